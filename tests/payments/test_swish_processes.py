"""A Swish deal on Swish's word alone, with real processes: ``dealbroker serve`` on SQLite (its
embedded worker) and ``serve`` beside ``dealbroker worker`` on PostgreSQL, against the Swish
emulator (its own process on loopback, mutual TLS). The buyer's checkout page makes the payment
request; only Swish's callback (confirmed by the server's own retrieval over mutual TLS) makes
the payment ``Paid``; a forged callback is refused and changes nothing, a repeated one changes
nothing again; the pickup expires and the worker refunds the buyer through Swish, once. Money
is conserved: the refund is the amount.

A deployment that also pays sellers to a Swish number (the emulator serves Swish's Payouts API
beside the payment requests, as Swish does): one deal paid in by Swish and, completed, paid out
to the seller's Swish number (``PaidOut``, the amount less the fee); one disputed at the pickup
and refunded through Swish on the operator's decision; one whose request the buyer declined,
paid on a second attempt. The integration's webhook endpoint (a loopback receiver) is told each
payment status, in order."""

import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from dealbroker.core import money
from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals import repository as deals_rows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.payments import reconciliation
from dealbroker.payments.models import Payment, ProviderCall
from tests.payments.swish_deals import (
    PAYEE_ALIAS,
    PAYEE_SSN,
    SSN,
    SWISH_NUMBER,
    SellerPage,
    payout_calls,
)
from tests.payments.swish_fixture import MERCHANT, SwishEmulator, pay_again, signed_swish_deal
from tests.processes import FIRE_TIMEOUT, Server, Worker, free_port, run_on, wait_until
from tests.receiver import Receiver, deal_events

pytestmark = pytest.mark.server
DAY = 24 * 3600


def _settings(db_url: str, emulator: SwishEmulator, base: str) -> Settings:
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in emulator.settings().items()}
    return Settings(database_url=db_url, environment="sandbox", base_url=base, **values)  # type: ignore[arg-type]


def _state(db_url: str, deal_id: uuid.UUID) -> tuple[Deal, Payment]:
    async def work(sessionmaker: Any) -> tuple[Deal, Payment]:
        async with sessionmaker() as session:
            deal = await session.get(Deal, deal_id)
            payment = await session.scalar(  # the deal's latest
                select(Payment)
                .where(Payment.deal_id == deal_id)
                .order_by(Payment.created_at.desc())
                .limit(1)
            )
            assert deal is not None
            assert payment is not None
            return deal, payment

    return run_on(db_url, work)


def _advance(db_url: str, deal: Deal, seconds: int) -> None:
    async def work(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            await flows.advance_deal_clock(session, deal.integration_id, deal.id, seconds)

    run_on(db_url, work)


def _prove(db_url: str, emulator: SwishEmulator, base: str) -> None:
    emulator.reset()
    settings = _settings(db_url, emulator, base)
    deal_id, token = signed_swish_deal(db_url, settings)
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    with httpx.Client(timeout=30, headers={"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)"}) as web:
        form = web.get(page)
        assert form.status_code == 200, form.text
        assert "data-swish-start" in form.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)  # type: ignore[union-attr]
        started = web.post(page, data={"csrf": csrf, "mode": "qr"}, follow_redirects=False)
        assert started.status_code == 303, started.text
        waiting = web.get(page)
        assert "data-swish-waiting" in waiting.text
        assert "data-swish-qr" in waiting.text
        assert web.get(f"{base}/pay/swish/{token}/status").json() == {"waiting": True}
        [request] = emulator.get("requests")
        assert request["callbackUrl"] == f"{base}/payments/v1/swish/callback"
        assert request["amount"] == 4500.0
        assert _state(db_url, deal_id)[1].status == "Processing"

        # A forged callback (no identifier of ours, a wrong one) is refused, nothing changes.
        for forged in ("", "0" * 32):
            told = emulator.post(
                "callback", {"id": request["id"], "identifier": forged, "status": "PAID"}
            )
            assert told["status"] == 401
        assert _state(db_url, deal_id)[1].status == "Processing"

        # Swish's callback, with our identifier: confirmed over mutual TLS, the payment is paid.
        emulator.post("pay", {"id": request["id"]})
        wait_until(
            lambda: _state(db_url, deal_id)[1].status == "Paid", FIRE_TIMEOUT, "Swish's callback"
        )
        deal, payment = _state(db_url, deal_id)
        assert deal.status == "Pickup_Pending"
        assert payment.swish_payment_reference
        assert web.get(f"{base}/pay/swish/{token}/status").json() == {"waiting": False}
        back = web.get(page, follow_redirects=False)
        assert back.status_code == 303
        assert back.headers["location"] == "/o/deal?done=paid"
        # The same callback again: acknowledged, applied once.
        assert emulator.post("callback", {"id": request["id"]})["status"] == 200
        assert _state(db_url, deal_id)[0].status == "Pickup_Pending"

    # Not a Swish callback, or a callback about no request of ours: refused.
    assert httpx.post(f"{base}/payments/v1/swish/callback", content=b"{not json").status_code == 400
    assert (
        httpx.post(f"{base}/payments/v1/swish/callback", content=b"x" * 20_000).status_code == 400
    )
    stranger = {"id": uuid.uuid4().hex.upper(), "status": "PAID", "amount": 1, "currency": "SEK"}
    assert httpx.post(f"{base}/payments/v1/swish/callback", json=stranger).status_code == 401

    _late_money(db_url, emulator, settings, base)
    _late_money(db_url, emulator, settings, base, callback=False)
    _expired(db_url, emulator, settings, base)
    _answer_lost_then_pay_again(db_url, emulator, settings, base)
    _posted_twice(db_url, emulator, settings, base)
    _callback_never_comes(db_url, emulator, settings, base)
    _no_500(db_url, emulator, settings, base)

    # The pickup is never made: the deal expires and the worker refunds through Swish, once.
    _advance(db_url, deal, 30 * DAY)
    wait_until(
        lambda: _state(db_url, deal_id)[1].status == "Refunded",
        FIRE_TIMEOUT * 2,
        "the worker's Swish refund",
        interval=0.3,
    )
    deal, payment = _state(db_url, deal_id)
    [refund] = [
        r for r in emulator.get("refunds") if r["payerPaymentReference"] == payment.id.hex.upper()
    ]
    assert refund["status"] == "PAID"
    assert refund["amount"] == 4500.0
    assert refund["originalPaymentReference"] == payment.swish_payment_reference
    # Swish's refund callback was taken (it woke the refund's call; it applied nothing itself).
    told = [e for e in emulator.get("log") if e.get("callback") == refund["id"]]
    assert [e.get("status") for e in told] == [200]
    assert payment.refunded_minor == payment.amount_minor == 450_000
    assert payment.paid_out_minor == 0
    _reconciled(db_url, settings, payment.id)


def _reconciled(db_url: str, settings: Settings, payment_id: uuid.UUID) -> None:
    """``payments reconcile`` asks Swish about each of our Swish payments and refunds: all
    agree; then one of ours says unpaid what Swish holds paid, and that is shown."""
    since, until = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC) + timedelta(hours=1)

    async def differences(sessionmaker: Any) -> list[str]:
        found = await reconciliation.reconcile(
            sessionmaker, settings, since, until, bank_files=False
        )
        return [d.line() for d in found]

    assert "swish" in [s.name for s in reconciliation.sources(settings, bank_files=False)]
    assert run_on(db_url, differences) == []

    async def unpaid(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            await session.execute(
                update(Payment).where(Payment.id == payment_id).values(status="PaymentFailed")
            )

    run_on(db_url, unpaid)
    assert run_on(db_url, differences) == [
        f"payment {payment_id.hex.upper()}: status PaymentFailed here, PAID at the provider"
    ]

    # The rows as a restore to a moment before the refund leaves them: the payment held, its
    # refund call unknown. Its first refund's id is known, so Swish is asked, and it has it.
    async def restored(sessionmaker: Any) -> str:
        async with sessionmaker() as session, session.begin():
            call = await session.scalar(
                select(ProviderCall).where(
                    ProviderCall.payment_id == payment_id, ProviderCall.kind == "refund"
                )
            )
            await session.delete(call)
            await session.execute(
                update(Payment)
                .where(Payment.id == payment_id)
                .values(status="Paid", refunded_minor=0)
            )
            return call.id.hex.upper()

    forgotten = run_on(db_url, restored)
    assert run_on(db_url, differences) == [
        f"refund {forgotten}: PAID at Swish (SEK 4500.00), missing here (our payment "
        f"{payment_id}, Paid here)"
    ]


def _late_money(
    db_url: str, emulator: SwishEmulator, settings: Settings, base: str, *, callback: bool = True
) -> None:
    """The deal is cancelled while Swish is down, so its request cannot be cancelled; the buyer
    pays it all the same: the money goes back to the buyer, whole, once. Without Swish's
    callback too (lost): the refund reads the payment's reference from Swish."""
    deal_id, token = signed_swish_deal(db_url, settings)
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    with httpx.Client(timeout=30, follow_redirects=True) as web:
        csrf = re.search(r'name="csrf" value="([^"]+)"', web.get(page).text).group(1)  # type: ignore[union-attr]
        started = web.post(page, data={"csrf": csrf, "mode": "number", "phone": "070-123 45 67"})
        assert started.status_code == 200
        assert "data-swish-waiting" in started.text
    [request] = [r for r in emulator.get("requests") if r["status"] == "CREATED"]
    # Without a callback, the cancel's own retry finds the money: one 503 lets the buyer pay.
    path = f"/swish-cpcapi/api/v1/paymentrequests/{request['id']}"
    failures = {"mode": "503", "count": 5 if callback else 1, "method": "PATCH", "path": path}
    emulator.post("fail", failures)

    async def cancel(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            deal = await deals_rows.by_id_for_update(session, deal_id)
            await flows.fire(session, deal, Trigger.CANCEL, Actor.SELLER, settings)

    run_on(db_url, cancel)
    assert _state(db_url, deal_id)[1].status == "PaymentCancelled"
    emulator.post("pay", {"id": request["id"], "callback": callback})
    wait_until(
        lambda: _state(db_url, deal_id)[1].status == "Refunded",
        FIRE_TIMEOUT * 2,
        "the late money to be refunded",
        interval=0.3,
    )
    deal, payment = _state(db_url, deal_id)
    assert deal.status == "Cancelled"
    refunds = [
        r for r in emulator.get("refunds") if r["payerPaymentReference"] == payment.id.hex.upper()
    ]
    assert [(r["status"], r["amount"]) for r in refunds] == [("PAID", 4500.0)]
    assert payment.refunded_minor == payment.amount_minor
    if not callback:
        assert payment.swish_payment_reference is None  # never told: read for the refund
        assert [e for e in emulator.get("log") if e.get("callback") == request["id"]] == []


def _expired(db_url: str, emulator: SwishEmulator, settings: Settings, base: str) -> None:
    """The buyer does not answer within Swish's 3 minutes: the request ends in ``ERROR``
    (``TM01``), the payment has failed, and the page sends the buyer back to try again."""
    deal_id, token = signed_swish_deal(db_url, settings)
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    with httpx.Client(timeout=30, headers={"User-Agent": "Mozilla/5.0 (iPhone)"}) as web:
        csrf = re.search(r'name="csrf" value="([^"]+)"', web.get(page).text).group(1)  # type: ignore[union-attr]
        waiting = web.post(page, data={"csrf": csrf, "mode": "app"}, follow_redirects=True)
        assert "swish://paymentrequest?token=" in waiting.text  # the app opens it on a phone
        [request] = [r for r in emulator.get("requests") if r["status"] == "CREATED"]
        emulator.post("expire", {"id": request["id"]})
        wait_until(
            lambda: _state(db_url, deal_id)[1].status == "PaymentFailed",
            FIRE_TIMEOUT,
            "Swish's expiry callback",
        )
        back = web.get(page, follow_redirects=False)
        assert back.headers["location"] == "/o/deal?done=payment-failed"
    assert _state(db_url, deal_id)[0].status == "Signed"  # the buyer may pay again


def _start(web: httpx.Client, page: str, **form: str) -> httpx.Response:
    csrf = re.search(r'name="csrf" value="([^"]+)"', web.get(page).text).group(1)  # type: ignore[union-attr]
    return web.post(page, data={"csrf": csrf, **form}, follow_redirects=False)


def _callbacks(emulator: SwishEmulator, ident: str) -> list[Any]:
    return [e.get("status") for e in emulator.get("log") if e.get("callback") == ident]


def _answer_lost_then_pay_again(
    db_url: str, emulator: SwishEmulator, settings: Settings, base: str
) -> None:
    """Swish makes the request, but its answer is lost; the buyer presses Pay again (Swish:
    made already). Swish's callback carries the identifier of the first attempt: recognised,
    and it alone makes the payment paid (nobody opens the page)."""
    deal_id, token = signed_swish_deal(db_url, settings)
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    emulator.post("fail", {"mode": "lost", "count": 1, "method": "PUT"})
    with httpx.Client(timeout=30) as web:
        lost = _start(web, page, mode="number", phone="070-123 45 67")
        assert lost.status_code == 503
        assert "Swish does not answer just now" in lost.text
        [request] = [r for r in emulator.get("requests") if r["status"] == "CREATED"]
        again = _start(web, page, mode="number", phone="070-123 45 67")
        assert again.status_code == 303, again.text
    assert _state(db_url, deal_id)[1].status == "Processing"
    emulator.post("pay", {"id": request["id"]})
    wait_until(
        lambda: _state(db_url, deal_id)[1].status == "Paid", FIRE_TIMEOUT, "Swish's callback"
    )
    assert _callbacks(emulator, request["id"]) == [200]


def _posted_twice(db_url: str, emulator: SwishEmulator, settings: Settings, base: str) -> None:
    """Two presses of Pay at once: the second reads the payment before the first has kept the
    request, and gets "made already". The first's request token (the QR code) and the
    identifier stay."""
    deal_id, token = signed_swish_deal(db_url, settings)
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    with httpx.Client(timeout=30) as web:
        assert _start(web, page, mode="qr").status_code == 303
        _, made = _state(db_url, deal_id)
        assert made.swish_request_token

        async def unsettled(sessionmaker: Any) -> None:  # as the second press read it
            async with sessionmaker() as session, session.begin():
                await session.execute(
                    update(Payment).where(Payment.id == made.id).values(status="Created")
                )

        run_on(db_url, unsettled)
        assert _start(web, page, mode="qr").status_code == 303
        _, payment = _state(db_url, deal_id)
        assert payment.status == "Processing"
        assert payment.swish_request_token == made.swish_request_token
        assert payment.swish_callback_hash == made.swish_callback_hash
        assert "data-swish-qr" in web.get(page).text
    [request] = [r for r in emulator.get("requests") if r["status"] == "CREATED"]
    emulator.post("pay", {"id": request["id"]})
    wait_until(
        lambda: _state(db_url, deal_id)[1].status == "Paid", FIRE_TIMEOUT, "Swish's callback"
    )
    assert _callbacks(emulator, request["id"]) == [200]


def _callback_never_comes(
    db_url: str, emulator: SwishEmulator, settings: Settings, base: str
) -> None:
    """The buyer pays in the app and closes the page; Swish's callback never arrives. The
    worker's polling asks Swish about the request (older than a minute) and the payment is paid."""
    deal_id, token = signed_swish_deal(db_url, settings)
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    with httpx.Client(timeout=30) as web:
        assert _start(web, page, mode="number", phone="070-123 45 67").status_code == 303
    [request] = [r for r in emulator.get("requests") if r["status"] == "CREATED"]
    emulator.post("pay", {"id": request["id"], "callback": False})
    _, payment = _state(db_url, deal_id)

    async def a_minute_ago(sessionmaker: Any) -> None:  # POLL_AFTER, without waiting for it
        async with sessionmaker() as session, session.begin():
            await session.execute(
                update(Payment)
                .where(Payment.id == payment.id)
                .values(updated_at=datetime.now(UTC) - timedelta(minutes=2))
            )

    run_on(db_url, a_minute_ago)
    wait_until(
        lambda: _state(db_url, deal_id)[1].status == "Paid", FIRE_TIMEOUT, "the Swish polling"
    )
    deal, payment = _state(db_url, deal_id)
    assert deal.status == "Pickup_Pending"
    assert payment.swish_payment_reference == emulator.get("requests")[-1]["paymentReference"]
    assert _callbacks(emulator, request["id"]) == []


def _no_500(db_url: str, emulator: SwishEmulator, settings: Settings, base: str) -> None:
    """A payment Swish cannot take (not in SEK) gets a page that says so; a payment whose deal
    is gone, the not-found page: never a 500."""
    deal_id, token = signed_swish_deal(db_url, settings)
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    _, payment = _state(db_url, deal_id)

    async def in_nok(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            await session.execute(
                update(Payment).where(Payment.id == payment.id).values(currency="NOK")
            )

    run_on(db_url, in_nok)
    with httpx.Client(timeout=30) as web:
        refused = _start(web, page, mode="qr")
        assert refused.status_code == 402, refused.text
        assert "Swish cannot take this payment" in refused.text
        assert "text/html" in refused.headers["content-type"]
    _, refused_payment = _state(db_url, deal_id)
    assert refused_payment.status == "Created"
    assert refused_payment.swish_callback_hash is None  # nothing asked of Swish

    async def its_deal_gone(sessionmaker: Any) -> None:  # as the deal's lookup now finds it
        async with sessionmaker() as session, session.begin():
            await session.execute(
                update(Payment).where(Payment.id == payment.id).values(integration_id=uuid.uuid4())
            )

    run_on(db_url, its_deal_gone)
    with httpx.Client(timeout=30) as web:
        for answer in (web.get(page), web.post(page, data={"mode": "qr"})):
            assert answer.status_code == 404, answer.text
            assert "text/html" in answer.headers["content-type"]


# --- one deployment that takes Swish and pays sellers by Swish -----------------------------------

SECRET_KEY = "swish-processes-" + "k" * 32


def _both_ways(emulator: SwishEmulator, base: str) -> dict[str, str]:
    """The ``DEALBROKER_*`` variables of a SEK deployment whose buyers pay by Swish and whose
    sellers may be paid to a Swish number, both through the emulator."""
    return emulator.settings(
        payouts=True, DEALBROKER_BASE_URL=base, DEALBROKER_SECRET_KEY=SECRET_KEY
    )


def _settings_of(db_url: str, env: dict[str, str]) -> Settings:
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in env.items()}
    return Settings(database_url=db_url, environment="sandbox", **values)  # type: ignore[arg-type]


def _pay(db_url: str, emulator: SwishEmulator, base: str, deal_id: uuid.UUID, token: str) -> Any:
    """The buyer pays through our checkout page (with their number) and Swish: the payment is
    ``Paid``. Swish's payment request, as Swish holds it."""
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    with httpx.Client(timeout=30) as web:
        assert _start(web, page, mode="number", phone="070-123 45 67").status_code == 303
    _, payment = _state(db_url, deal_id)
    [request] = [r for r in emulator.get("requests") if r["id"] == payment.id.hex.upper()]
    assert request["status"] == "CREATED"
    emulator.post("pay", {"id": request["id"]})
    wait_until(
        lambda: _state(db_url, deal_id)[1].status == "Paid", FIRE_TIMEOUT, "Swish's callback"
    )
    [request] = [r for r in emulator.get("requests") if r["id"] == request["id"]]
    return request


def _told(receiver: Receiver, deal_id: uuid.UUID, statuses: list[str]) -> list[dict[str, Any]]:
    """The ``payment.status`` webhooks the integration's endpoint got for the deal, once as
    many as ``statuses`` have come: they say those statuses, in that order."""
    wait_until(
        lambda: len(deal_events(receiver, "payment.status", str(deal_id))) >= len(statuses),
        FIRE_TIMEOUT,
        f"the payment.status webhooks {statuses}",
        interval=0.2,
    )
    told = deal_events(receiver, "payment.status", str(deal_id))
    assert [e["data"]["status"] for e in told] == statuses
    return told


def _fire(db_url: str, deal_id: uuid.UUID, trigger: Trigger, actor: Actor, settings: Settings):  # type: ignore[no-untyped-def]
    """The trigger on the locked deal, in process; the provider calls are the worker's."""

    async def fire(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            deal = await deals_rows.by_id_for_update(session, deal_id)
            await flows.fire(session, deal, trigger, actor, settings)

    run_on(db_url, fire)


def _prove_both_ways(db_url: str, emulator: SwishEmulator, base: str, receiver: Receiver) -> None:
    emulator.reset()
    emulator.payouts.enrol(PAYEE_ALIAS, PAYEE_SSN)
    settings = _settings_of(db_url, _both_ways(emulator, base))
    _paid_in_and_out(db_url, emulator, settings, base, receiver)
    _disputed_and_refunded(db_url, emulator, settings, base, receiver)
    _declined_then_paid(db_url, emulator, settings, base, receiver)


def _paid_in_and_out(
    db_url: str, emulator: SwishEmulator, settings: Settings, base: str, receiver: Receiver
) -> None:
    """One deal: the buyer pays by Swish, the seller gives a Swish number on their page, the
    buyer approves the item, the worker pays the seller's number through Swish's payouts:
    ``PaidOut``, the amount less the fee; what Swish took in went out again but the fee."""
    deal_id, token = signed_swish_deal(db_url, settings, bank_account=False, webhook=receiver.url)
    request = _pay(db_url, emulator, base, deal_id, token)
    assert request["payeeAlias"] == MERCHANT
    assert _state(db_url, deal_id)[0].status == "Pickup_Pending"

    seller = SellerPage(db_url, settings, deal_id)
    assert 'data-payout-form="swish"' in seller.get()
    assert seller.give_swish(SWISH_NUMBER, SSN).status_code in (200, 303)
    _fire(db_url, deal_id, Trigger.BUYER_APPROVED, Actor.BUYER, settings)
    wait_until(
        lambda: _state(db_url, deal_id)[1].status == "PaidOut",
        FIRE_TIMEOUT,
        "the worker's Swish payout",
        interval=0.2,
    )
    deal, payment = _state(db_url, deal_id)
    assert deal.status == "Completed"
    assert payment.method == "swish"
    assert payment.paid_out_minor == payment.amount_minor - payment.fee_minor > 0
    assert payment.refunded_minor == 0
    [call] = run_on(db_url, lambda sm: payout_calls(sm, deal_id))
    assert (call.rail, call.status) == ("swish", "succeeded")
    [made] = emulator.payouts.state()["payouts"]
    assert made["payoutInstructionUUID"] == call.id.hex.upper()
    assert (made["payerAlias"], made["payeeAlias"], made["status"]) == (
        MERCHANT,
        PAYEE_ALIAS,
        "PAID",
    )
    # Money conserved: in through Swish, out through Swish, the fee kept, nothing else.
    taken_in = round(Decimal(str(request["amount"])) * 100)
    paid_out = round(Decimal(made["amount"]) * 100)
    assert taken_in == payment.amount_minor
    assert paid_out == payment.paid_out_minor
    assert taken_in - paid_out == payment.fee_minor
    assert emulator.get("refunds") == []
    assert "paid out</strong> to your Swish number" in seller.get()

    told = _told(receiver, deal_id, ["Created", "Processing", "Paid", "PendingPayOut", "PaidOut"])
    assert told[-1]["data"]["amount"] == money.to_string(payment.amount_minor)
    assert told[-1]["data"]["fee"] == money.to_string(payment.fee_minor)
    assert told[-1]["data"]["currency"] == "SEK"


def _disputed_and_refunded(
    db_url: str, emulator: SwishEmulator, settings: Settings, base: str, receiver: Receiver
) -> None:
    """The buyer, at the pickup, says the item is not as agreed; the operator decides the
    dispute for the buyer: the worker refunds the whole amount through Swish, once."""
    deal_id, token = signed_swish_deal(db_url, settings, webhook=receiver.url)
    request = _pay(db_url, emulator, base, deal_id, token)
    _fire(db_url, deal_id, Trigger.BUYER_DENIED, Actor.BUYER, settings)
    assert _state(db_url, deal_id)[0].status == "Pickup_Denied"
    _fire(db_url, deal_id, Trigger.DISPUTE_REFUNDED, Actor.OPERATOR, settings)
    wait_until(
        lambda: _state(db_url, deal_id)[1].status == "Refunded",
        FIRE_TIMEOUT,
        "the worker's Swish refund",
        interval=0.2,
    )
    deal, payment = _state(db_url, deal_id)
    assert deal.status == "Refunded"
    refunds = [
        r for r in emulator.get("refunds") if r["payerPaymentReference"] == payment.id.hex.upper()
    ]
    assert [(r["status"], r["originalPaymentReference"]) for r in refunds] == [
        ("PAID", request["paymentReference"])
    ]
    assert round(Decimal(str(refunds[0]["amount"])) * 100) == payment.amount_minor
    assert payment.refunded_minor == payment.amount_minor
    assert payment.paid_out_minor == 0
    assert run_on(db_url, lambda sm: payout_calls(sm, deal_id)) == []
    _told(receiver, deal_id, ["Created", "Processing", "Paid", "Refunded"])


def _declined_then_paid(
    db_url: str, emulator: SwishEmulator, settings: Settings, base: str, receiver: Receiver
) -> None:
    """The buyer declines the request in the Swish app: the payment has failed, the checkout
    page sends the buyer back saying so, the deal waits (``Signed``) and nothing was taken. The
    buyer pays again, a new payment with a new request: paid, once."""
    deal_id, token = signed_swish_deal(db_url, settings, webhook=receiver.url)
    page = f"{base}/pay/swish/{token}?return=/o/deal"
    with httpx.Client(timeout=30) as web:
        assert _start(web, page, mode="number", phone="070-123 45 67").status_code == 303
        _, failing = _state(db_url, deal_id)
        emulator.post("decline", {"id": failing.id.hex.upper()})
        wait_until(
            lambda: _state(db_url, deal_id)[1].status == "PaymentFailed",
            FIRE_TIMEOUT,
            "Swish's callback of the declined request",
        )
        back = web.get(page, follow_redirects=False)
        assert back.status_code == 303
        assert back.headers["location"] == "/o/deal?done=payment-failed"
    deal, failed = _state(db_url, deal_id)
    assert deal.status == "Signed"
    assert failed.swish_payment_reference is None
    _told(receiver, deal_id, ["Created", "Processing", "PaymentFailed"])

    again = pay_again(db_url, settings, deal_id)
    assert again != token
    _pay(db_url, emulator, base, deal_id, again)
    deal, paid = _state(db_url, deal_id)
    assert paid.id != failed.id
    assert deal.status == "Pickup_Pending"
    ours = {failed.id.hex.upper(), paid.id.hex.upper()}
    statuses = {r["id"]: r["status"] for r in emulator.get("requests") if r["id"] in ours}
    assert statuses == {failed.id.hex.upper(): "DECLINED", paid.id.hex.upper(): "PAID"}
    _told(
        receiver,
        deal_id,
        ["Created", "Processing", "PaymentFailed", "Created", "Processing", "Paid"],
    )


def test_serve_on_sqlite_pays_in_and_out_by_swish(
    tmp_path: Path, swish_emulator: SwishEmulator, receiver: Receiver
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'swish.db'}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = Server(db_url, tmp_path, port=port, **_both_ways(swish_emulator, base))
    try:
        _prove_both_ways(db_url, swish_emulator, base, receiver)
    finally:
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())


def test_serve_and_worker_on_postgresql_pay_in_and_out_by_swish(
    pg_url: str, tmp_path: Path, swish_emulator: SwishEmulator, receiver: Receiver
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = _both_ways(swish_emulator, base)
    server = Server(pg_url, tmp_path, port=port, DEALBROKER_EMBEDDED_WORKER="off", **env)
    worker = Worker(pg_url, tmp_path, **env)
    try:
        worker.wait_ready()
        _prove_both_ways(pg_url, swish_emulator, base, receiver)
    finally:
        worker.close()
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())
        (tmp_path / "worker.log").write_text(worker.output())


def test_serve_on_sqlite_takes_swish(tmp_path: Path, swish_emulator: SwishEmulator) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'swish.db'}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = Server(
        db_url, tmp_path, port=port, DEALBROKER_BASE_URL=base, **swish_emulator.settings()
    )
    try:
        _prove(db_url, swish_emulator, base)
    finally:
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())


def test_serve_and_worker_on_postgresql_take_swish(
    pg_url: str, tmp_path: Path, swish_emulator: SwishEmulator
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = {"DEALBROKER_BASE_URL": base, **swish_emulator.settings()}
    server = Server(pg_url, tmp_path, port=port, DEALBROKER_EMBEDDED_WORKER="off", **settings)
    worker = Worker(pg_url, tmp_path, **settings)
    try:
        worker.wait_ready()
        _prove(pg_url, swish_emulator, base)
    finally:
        worker.close()
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())
        (tmp_path / "worker.log").write_text(worker.output())
