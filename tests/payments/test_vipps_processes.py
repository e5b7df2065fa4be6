"""Vipps MobilePay deals with real processes: ``dealbroker serve`` on SQLite (its embedded worker)
and ``serve`` beside ``dealbroker worker`` on PostgreSQL, against the Vipps emulator (its own
process on loopback). The buyer goes through our checkout to the emulator's landing page and
back; the emulator's signed webhooks reach the server; the worker captures, cancels, refunds
and pays out:

- a pickup deal: reserved, captured when the seller hands the item over (the deal completes),
  and only then paid out (payout = amount - fee);
- a shipped deal: captured when the carrier takes the parcel, then returned: refunded (after
  the capture: a Vipps refund) less the shipping;
- a shipped deal never handed over: its deadline, capped before the card reservation lapses,
  expires it, and the refund is the reservation's cancel (nothing captured);
- a pickup deal whose reservation lapsed at Vipps: the capture is refused, nothing is paid out
  or charged, both parties are told;
- a deal cancelled while the buyer is at Vipps: its payment there is terminated, nothing can
  be reserved after;
- a shipped deal disputed after delivery and refunded on the operator's decision: a Vipps
  refund of the whole captured amount;
- a payment the buyer let expire at Vipps (``EXPIRED``): failed, the deal waits, the buyer pays
  again; the integration's webhook endpoint is told each payment status, in order;
- a forged and a stale webhook are refused (401) and change nothing; a rejected payment leaves
  the deal waiting for another; a delivery whose Host a proxy rewrote is verified for the
  registered address (``DEALBROKER_BASE_URL``), one signed for the Host it claims is refused.

Money is conserved on every path.
"""

import html
import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals import repository as deal_rows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.events import service as events
from dealbroker.notifications.models import OutboxMessage
from dealbroker.payments import service as payments
from dealbroker.payments.methods import Method
from dealbroker.payments.models import Payment, ProviderCall
from dealbroker.payments.vipps import reference
from tests.lifecycle_helpers import new_deal
from tests.payments.vipps_emulator import MSN, WEBHOOK_SECRET, signed_headers
from tests.processes import FIRE_TIMEOUT, Server, Worker, free_port, run_on, wait_until
from tests.receiver import Receiver, deal_events

pytestmark = pytest.mark.server

DAY = 24 * 3600
BACK = "/o/vipps-test"


def _settings(db_url: str, emulator: Any, base: str) -> Settings:
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in emulator.settings().items()}
    return Settings(database_url=db_url, environment="sandbox", base_url=base, **values)  # type: ignore[arg-type]


def _signed(db_url: str, shipping: str) -> tuple[uuid.UUID, uuid.UUID]:
    async def work(sessionmaker: Any) -> tuple[uuid.UUID, uuid.UUID]:
        d = await new_deal(sessionmaker)
        await d.to_signed(shipping)
        return d.deal_id, d.integration_id

    return run_on(db_url, work)


def _locked(db_url: str, deal_id: uuid.UUID, action: Any) -> Any:
    """``action(session, deal)`` on the locked deal; the provider calls are the worker's."""

    async def work(sessionmaker: Any) -> Any:
        async with sessionmaker() as session, session.begin():
            deal = await deal_rows.by_id_for_update(session, deal_id)
            return await action(session, deal)

    return run_on(db_url, work)


def _state(db_url: str, deal_id: uuid.UUID) -> dict[str, Any]:
    async def work(sessionmaker: Any) -> dict[str, Any]:
        async with sessionmaker() as session:
            deal = await session.get(Deal, deal_id)
            payments_ = list(
                await session.scalars(
                    select(Payment).where(Payment.deal_id == deal_id).order_by(Payment.created_at)
                )
            )
            calls = list(
                await session.scalars(select(ProviderCall).where(ProviderCall.deal_id == deal_id))
            )
            told = list(
                await session.scalars(
                    select(OutboxMessage.kind).where(OutboxMessage.deal_id == deal_id)
                )
            )
            timers = list(
                await session.scalars(select(DealTimer).where(DealTimer.deal_id == deal_id))
            )
            return {
                "deal": deal,
                "payment": payments_[-1] if payments_ else None,
                "payments": payments_,
                "calls": calls,
                "told": told,
                "timers": timers,
            }

    return run_on(db_url, work)


def _pay(
    db_url: str, settings: Settings, base: str, deal_id: uuid.UUID, action: str, method: str
) -> tuple[str, str]:
    """The buyer pays by Vipps through our checkout and the emulator's landing page: the
    payment's reference and where the return page sent the buyer."""

    async def start(session: Any, deal: Deal) -> tuple[uuid.UUID, str]:
        payment, token = await payments.start(session, deal, settings, Method.VIPPS)
        return payment.id, token

    payment_id, token = _locked(db_url, deal_id, start)
    landing = _to_vipps(base, token)
    assert landing.startswith(settings.vipps_api_base)
    back = httpx.post(landing, data={"action": action, "method": method}, timeout=30)
    assert back.status_code == 303
    returned = httpx.get(back.headers["location"], timeout=30)
    assert returned.status_code == 303
    return reference(payment_id), returned.headers["location"]


def _to_vipps(base: str, token: str) -> str:
    """Our checkout's hand-off page for the token: where it sends the buyer on (Vipps's
    landing page), by its refresh and its link alike."""
    page = httpx.get(f"{base}/pay/vipps/{token}?return={BACK}", timeout=30)
    assert page.status_code == 200, page.text
    refresh = re.search(r'<meta http-equiv="refresh" content="0;url=([^"]+)">', page.text)
    link = re.search(r'<a class="button" href="([^"]+)" data-vipps-continue>', page.text)
    assert refresh is not None, page.text
    assert link is not None, page.text
    assert html.unescape(refresh.group(1)) == html.unescape(link.group(1))
    return html.unescape(link.group(1))


def _fire(db_url: str, deal_id: uuid.UUID, trigger: Trigger, actor: Actor, settings: Settings):  # type: ignore[no-untyped-def]
    _locked(db_url, deal_id, lambda s, d: flows.fire(s, d, trigger, actor, settings))


def _account(db_url: str, deal_id: uuid.UUID) -> None:
    _locked(
        db_url,
        deal_id,
        lambda s, d: payments.register_payout_account(s, d, "NO9386011117947", "Kari Nordmann"),
    )


def _until(db_url: str, deal_id: uuid.UUID, check: Any, what: str) -> dict[str, Any]:
    wait_until(lambda: check(_state(db_url, deal_id)), FIRE_TIMEOUT, what, interval=0.2)
    return _state(db_url, deal_id)


def _conserved(payment: Payment, vipps: dict[str, Any]) -> None:
    """What the buyer paid went out again to the cent, and Vipps took what we say we hold."""
    kept = payment.amount_minor - payment.refunded_minor - payment.paid_out_minor
    assert kept == payment.fee_minor + payment.shipping_minor or (
        payment.refunded_minor == payment.amount_minor and kept == 0
    ), vars(payment)
    aggregate = vipps["aggregate"]
    taken = aggregate["capturedAmount"]["value"] - aggregate["refundedAmount"]["value"]
    assert taken == payment.amount_minor - payment.refunded_minor


def _prove(db_url: str, emulator: Any, base: str, receiver: Receiver) -> None:
    settings = _settings(db_url, emulator, base)
    emulator.webhook_to(f"{base}/payments/v1/vipps/webhook")
    _disputed_and_refunded(db_url, emulator, settings, base, receiver)
    _expired_then_paid(db_url, emulator, settings, base, receiver)

    # --- pickup: reserved, captured at the hand-over, then paid out --------------------------
    deal_id, _ = _signed(db_url, "Pickup")
    ref, back = _pay(db_url, settings, base, deal_id, "approve", "WALLET")
    assert back == f"{BACK}?done=paid"
    state = _until(db_url, deal_id, lambda s: s["deal"].status == "Pickup_Pending", "paid")
    payment = state["payment"]
    assert payment.status == "Paid"
    assert payment.reserved_until is not None
    assert payment.captured_at is None
    assert emulator.payment(ref)["aggregate"]["capturedAmount"]["value"] == 0
    _account(db_url, deal_id)
    _fire(db_url, deal_id, Trigger.BUYER_APPROVED, Actor.BUYER, settings)
    state = _until(db_url, deal_id, lambda s: s["payment"].status == "PaidOut", "the payout")
    payment = state["payment"]
    assert payment.captured_at is not None
    assert payment.paid_out_minor == payment.amount_minor - payment.fee_minor
    kinds = sorted(c.kind for c in state["calls"])
    assert kinds == ["capture", "payout"]
    capture = next(c for c in state["calls"] if c.kind == "capture")
    payout = next(c for c in state["calls"] if c.kind == "payout")
    assert payout.created_at >= capture.finished_at  # the payout waited for the money
    _conserved(payment, emulator.payment(ref))

    # --- shipped: captured when the carrier takes it, returned: a Vipps refund ---------------
    deal_id, _ = _signed(db_url, "Carrier")
    ref, _ = _pay(db_url, settings, base, deal_id, "approve", "WALLET")
    _until(db_url, deal_id, lambda s: s["deal"].status == "Shipping_Pending", "paid")
    _fire(db_url, deal_id, Trigger.CARRIER_PICKED_UP, Actor.PROVIDER, settings)
    state = _until(db_url, deal_id, lambda s: s["payment"].captured_at is not None, "capture")
    assert emulator.payment(ref)["aggregate"]["capturedAmount"]["value"] == (
        state["payment"].amount_minor
    )
    _fire(db_url, deal_id, Trigger.CARRIER_RETURNED, Actor.PROVIDER, settings)
    state = _until(db_url, deal_id, lambda s: s["payment"].status == "Refunded", "the refund")
    vipps = emulator.payment(ref)
    assert vipps["aggregate"]["refundedAmount"]["value"] == state["payment"].refunded_minor > 0
    _conserved(state["payment"], vipps)

    # --- never handed over: the capped deadline expires it, the reservation is cancelled ----
    deal_id, integration_id = _signed(db_url, "Carrier")
    ref, _ = _pay(db_url, settings, base, deal_id, "approve", "CARD")
    state = _until(db_url, deal_id, lambda s: s["deal"].status == "Shipping_Pending", "paid")
    payment = state["payment"]
    [timer] = [t for t in state["timers"] if t.fired_at is None]
    # A card reservation holds 7 days: the 7-day hand-over deadline falls a day before.
    assert timer.due_at <= payment.reserved_until - timedelta(days=1)
    assert payment.reserved_until - payment.created_at < timedelta(days=7, minutes=5)

    async def advance(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            await flows.advance_deal_clock(session, integration_id, deal_id, 7 * DAY)

    run_on(db_url, advance)
    state = _until(db_url, deal_id, lambda s: s["payment"].status == "Refunded", "the cancel")
    vipps = emulator.payment(ref)
    assert vipps["aggregate"]["capturedAmount"]["value"] == 0
    assert vipps["aggregate"]["cancelledAmount"]["value"] == state["payment"].amount_minor
    assert state["payment"].refunded_minor == state["payment"].amount_minor
    _conserved(state["payment"], vipps)

    # --- a reservation lapsed at Vipps: the capture is refused, nothing moves, both told ----
    deal_id, _ = _signed(db_url, "Pickup")
    ref, _ = _pay(db_url, settings, base, deal_id, "approve", "WALLET")
    _until(db_url, deal_id, lambda s: s["deal"].status == "Pickup_Pending", "paid")
    _account(db_url, deal_id)
    emulator.decide(ref, "lapse")
    _fire(db_url, deal_id, Trigger.BUYER_APPROVED, Actor.BUYER, settings)
    state = _until(
        db_url,
        deal_id,
        lambda s: any(c.kind == "capture" and c.status == "failed" for c in s["calls"]),
        "the refused capture",
    )
    payment = state["payment"]
    assert payment.status == "PendingPayOut"
    assert payment.paid_out_minor == 0
    assert [c.kind for c in state["calls"]] == ["capture"]  # no payout was made
    assert state["told"].count("reservation_lapsed") == 2  # buyer and seller
    assert emulator.payment(ref)["aggregate"]["capturedAmount"]["value"] == 0

    # --- the deal cancelled while the buyer is at Vipps: the payment there is terminated ----
    deal_id, _ = _signed(db_url, "Pickup")

    async def start(session: Any, deal: Deal) -> tuple[uuid.UUID, str]:
        payment, token = await payments.start(session, deal, settings, Method.VIPPS)
        return payment.id, token

    payment_id, token = _locked(db_url, deal_id, start)
    _to_vipps(base, token)
    _fire(db_url, deal_id, Trigger.CANCEL, Actor.SELLER, settings)
    wait_until(
        lambda: emulator.payment(reference(payment_id))["state"] == "TERMINATED",
        FIRE_TIMEOUT,
        "the worker to cancel the payment at Vipps",
        interval=0.2,
    )
    emulator.decide(reference(payment_id), "approve")  # too late: nothing is reserved
    assert emulator.payment(reference(payment_id))["aggregate"]["authorizedAmount"]["value"] == 0
    assert _state(db_url, deal_id)["payment"].status == "PaymentCancelled"

    # --- forged and stale webhooks refused; a rejected payment leaves the deal waiting ------
    deal_id, _ = _signed(db_url, "Pickup")
    ref, back = _pay(db_url, settings, base, deal_id, "reject", "WALLET")
    assert back == f"{BACK}?done=payment-cancelled"
    state = _state(db_url, deal_id)
    assert state["payment"].status == "PaymentCancelled"
    assert state["deal"].status == "Signed"
    emulator.decide(ref, "approve")  # cannot: it is over (the emulator ignores it)
    before = _state(db_url, deal_id)["payment"].updated_at
    assert emulator.send(ref, "AUTHORIZED", signature="bad") == 401
    assert emulator.send(ref, "AUTHORIZED", signature="stale") == 401
    assert emulator.send(ref, "ABORTED") == 200  # a duplicate: acknowledged
    assert _state(db_url, deal_id)["payment"].updated_at == before

    # --- behind a proxy that rewrites the Host: verified for the registered address ---------
    amount = _state(db_url, deal_id)["payment"].amount_minor
    event = {"msn": MSN, "reference": ref, "name": "ABORTED", "success": True}
    body = json.dumps({**event, "amount": {"currency": "NOK", "value": amount}}).encode()
    registered = f"{settings.base_url}/payments/v1/vipps/webhook"
    now = datetime.now(UTC)
    proxied = {**signed_headers(registered, body, WEBHOOK_SECRET, now), "Host": "app.internal:8000"}
    answer = httpx.post(f"{base}/payments/v1/vipps/webhook", content=body, headers=proxied)
    assert answer.status_code == 200, answer.text
    # Signed for the host the request claims, not the registered one: refused.
    claimed = "http://app.internal:8000/payments/v1/vipps/webhook"
    forged = {**signed_headers(claimed, body, WEBHOOK_SECRET, now), "Host": "app.internal:8000"}
    answer = httpx.post(f"{base}/payments/v1/vipps/webhook", content=body, headers=forged)
    assert answer.status_code == 401


def _webhook(db_url: str, settings: Settings, integration_id: uuid.UUID, url: str) -> None:
    """The integration's webhook endpoint, for every event, at ``url``."""

    async def work(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            await events.create_endpoint(
                session,
                integration_id,
                settings,
                url=url,
                event_kinds=None,
                description=None,
                enabled=True,
            )

    run_on(db_url, work)


def _told(receiver: Receiver, deal_id: uuid.UUID, statuses: list[str]) -> None:
    """Once as many ``payment.status`` webhooks as ``statuses`` reached the integration's
    endpoint for the deal: they say those statuses, in the deal's order."""
    wait_until(
        lambda: len(deal_events(receiver, "payment.status", str(deal_id))) >= len(statuses),
        FIRE_TIMEOUT,
        f"the payment.status webhooks {statuses}",
        interval=0.2,
    )
    told = deal_events(receiver, "payment.status", str(deal_id))
    assert [e["data"]["status"] for e in told] == statuses


def _disputed_and_refunded(
    db_url: str, emulator: Any, settings: Settings, base: str, receiver: Receiver
) -> None:
    """A shipped deal, captured when the carrier takes the parcel; the buyer disputes the item
    and the operator decides for the buyer: the worker refunds the whole amount through Vipps
    (after the capture, a refund), once."""
    deal_id, integration_id = _signed(db_url, "Carrier")
    _webhook(db_url, settings, integration_id, receiver.url)
    ref, _ = _pay(db_url, settings, base, deal_id, "approve", "WALLET")
    _until(db_url, deal_id, lambda s: s["deal"].status == "Shipping_Pending", "paid")
    _fire(db_url, deal_id, Trigger.CARRIER_PICKED_UP, Actor.PROVIDER, settings)
    _until(db_url, deal_id, lambda s: s["payment"].captured_at is not None, "the capture")
    _fire(db_url, deal_id, Trigger.CARRIER_DELIVERED, Actor.PROVIDER, settings)
    _fire(db_url, deal_id, Trigger.BUYER_DENIED, Actor.BUYER, settings)
    assert _state(db_url, deal_id)["deal"].status == "Shipping_Review_Denied"
    _fire(db_url, deal_id, Trigger.DISPUTE_REFUNDED, Actor.OPERATOR, settings)
    state = _until(db_url, deal_id, lambda s: s["payment"].status == "Refunded", "the refund")
    payment = state["payment"]
    assert state["deal"].status == "Refunded"
    assert payment.refunded_minor == payment.amount_minor
    assert payment.paid_out_minor == 0
    assert sorted(c.kind for c in state["calls"]) == ["capture", "refund"]
    vipps = emulator.payment(ref)
    assert vipps["aggregate"]["capturedAmount"]["value"] == payment.amount_minor
    assert vipps["aggregate"]["refundedAmount"]["value"] == payment.amount_minor
    assert len([e for e in vipps["log"] if e.startswith("refund:")]) == 1  # one refund at Vipps
    _conserved(payment, vipps)
    _told(receiver, deal_id, ["Created", "Processing", "Paid", "Refunded"])


def _expired_then_paid(
    db_url: str, emulator: Any, settings: Settings, base: str, receiver: Receiver
) -> None:
    """The buyer is sent to Vipps and does not approve in time: the payment ``EXPIRED`` at
    Vipps has failed here, the buyer coming back is told so, the deal waits (``Signed``) with
    nothing reserved. The buyer pays again, a new payment: reserved, once."""
    deal_id, integration_id = _signed(db_url, "Pickup")
    _webhook(db_url, settings, integration_id, receiver.url)

    async def start(session: Any, deal: Deal) -> tuple[uuid.UUID, str]:
        payment, token = await payments.start(session, deal, settings, Method.VIPPS)
        return payment.id, token

    payment_id, token = _locked(db_url, deal_id, start)
    landing = _to_vipps(base, token)
    emulator.decide(reference(payment_id), "expire")
    state = _until(
        db_url, deal_id, lambda s: s["payment"].status == "PaymentFailed", "Vipps's EXPIRED"
    )
    assert state["deal"].status == "Signed"
    # The buyer comes back from Vipps (its landing page sends them to our return page).
    back = httpx.post(landing, data={"action": "approve"}, timeout=30)
    assert back.status_code == 303
    returned = httpx.get(back.headers["location"], timeout=30)
    assert returned.headers["location"] == f"{BACK}?done=payment-failed"
    # The worker's cancel of a payment closed unpaid finds it over at Vipps: nothing is asked
    # of Vipps, nothing was reserved or taken.
    state = _until(
        db_url,
        deal_id,
        lambda s: [(c.kind, c.status) for c in s["calls"]] == [("cancel", "succeeded")],
        "the worker's cancel to find the payment over",
    )
    expired = emulator.payment(reference(payment_id))
    assert expired["state"] == "EXPIRED"
    assert expired["log"] == []
    assert expired["aggregate"]["authorizedAmount"]["value"] == 0
    _told(receiver, deal_id, ["Created", "Processing", "PaymentFailed"])

    ref, back_to = _pay(db_url, settings, base, deal_id, "approve", "WALLET")
    assert back_to == f"{BACK}?done=paid"
    state = _until(db_url, deal_id, lambda s: s["deal"].status == "Pickup_Pending", "paid")
    assert [p.status for p in state["payments"]] == ["PaymentFailed", "Paid"]
    assert ref != reference(payment_id)
    _told(
        receiver,
        deal_id,
        ["Created", "Processing", "PaymentFailed", "Created", "Processing", "Paid"],
    )


def test_serve_on_sqlite_takes_vipps(
    tmp_path: Path, vipps_emulator: Any, receiver: Receiver
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'vipps.db'}"
    vipps_emulator.reset()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = vipps_emulator.settings(DEALBROKER_BASE_URL=base)
    server = Server(db_url, tmp_path, port=port, **settings)  # migrates, embeds the worker
    try:
        _prove(db_url, vipps_emulator, server.base, receiver)
    finally:
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())


def test_serve_and_worker_on_postgresql_take_vipps(
    pg_url: str, tmp_path: Path, vipps_emulator: Any, receiver: Receiver
) -> None:
    vipps_emulator.reset()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    settings = vipps_emulator.settings(DEALBROKER_BASE_URL=base)
    server = Server(pg_url, tmp_path, DEALBROKER_EMBEDDED_WORKER="off", port=port, **settings)
    worker = Worker(pg_url, tmp_path, **settings)
    try:
        worker.wait_ready()
        _prove(pg_url, vipps_emulator, server.base, receiver)
    finally:
        worker.close()
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())
        (tmp_path / "worker.log").write_text(worker.output())
