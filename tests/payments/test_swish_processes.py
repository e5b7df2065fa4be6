"""A Swish deal on Swish's word alone, with real processes: ``dealbroker serve`` on SQLite (its
embedded worker) and ``serve`` beside ``dealbroker worker`` on PostgreSQL, against the Swish
emulator (its own process on loopback, mutual TLS). The buyer's checkout page makes the payment
request; only Swish's callback (confirmed by the server's own retrieval over mutual TLS) makes
the payment ``Paid``; a forged callback is refused and changes nothing, a repeated one changes
nothing again; the pickup expires and the worker refunds the buyer through Swish, once. Money
is conserved: the refund is the amount."""

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals import repository as deals_rows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.payments import reconciliation
from dealbroker.payments.models import Payment
from tests.payments.swish_fixture import SwishEmulator, signed_swish_deal
from tests.processes import FIRE_TIMEOUT, Server, Worker, free_port, run_on, wait_until

pytestmark = pytest.mark.server
DAY = 24 * 3600


def _settings(db_url: str, emulator: SwishEmulator, base: str) -> Settings:
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in emulator.settings().items()}
    return Settings(database_url=db_url, environment="sandbox", base_url=base, **values)  # type: ignore[arg-type]


def _state(db_url: str, deal_id: uuid.UUID) -> tuple[Deal, Payment]:
    async def work(sessionmaker: Any) -> tuple[Deal, Payment]:
        async with sessionmaker() as session:
            deal = await session.get(Deal, deal_id)
            payment = await session.scalar(select(Payment).where(Payment.deal_id == deal_id))
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
