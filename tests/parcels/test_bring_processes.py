"""Carrier deals on Bring's word alone, with real processes: ``dealbroker serve`` on SQLite (its
embedded worker) and ``serve`` beside ``dealbroker worker`` on PostgreSQL, against the Bring
emulator (its own process on loopback). The worker books each parcel at the emulator; only the
emulator's Event Cast pushes, sent to the server's ``/carriers/v1/bring/events``, move the deals
after that (and the deals' own deadlines, fired by the running worker):

- one parcel is handed in, waits at the pickup point and is collected; the buyer's 24 hours
  pass and the deal completes, the seller paid;
- one is handed in and comes back to the seller: refunded, less the shipping;
- one is handed in and never arrives: after the carrier's days it is lost, the dispute opens;
- one booking times out at Bring (made all the same) and is repeated: one parcel, never two;
  one meets Bring down (503s): the seller is told once, and it is booked when Bring is back.

Money is conserved on every path: what the buyer paid is what went out again.
"""

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals.models import Deal
from dealbroker.notifications.models import OutboxMessage
from dealbroker.parcels.models import Parcel
from dealbroker.payments.models import Payment
from tests.parcels.deals import book, shipping_pending
from tests.processes import FIRE_TIMEOUT, Server, Worker, run_on, wait_until

pytestmark = pytest.mark.server

DAY = 24 * 3600
TIMEOUT = "2"  # seconds Bring has to answer, here: the hang below outlasts it


def _settings(db_url: str, emulator: Any) -> Settings:
    values = {
        k.removeprefix("DEALBROKER_").lower(): v
        for k, v in emulator.settings(DEALBROKER_BRING_TIMEOUT_SECONDS=TIMEOUT).items()
    }
    return Settings(database_url=db_url, environment="sandbox", **values)  # type: ignore[arg-type]


def _booking_asked(db_url: str, settings: Settings) -> tuple[uuid.UUID, uuid.UUID]:
    """A paid Carrier deal whose seller has a payout account and has asked for a label."""

    async def work(sessionmaker: Any) -> tuple[uuid.UUID, uuid.UUID]:
        d = await shipping_pending(sessionmaker)
        await d.payout_account()
        await book(d, settings)
        return d.deal_id, d.integration_id

    return run_on(db_url, work)


def _state(db_url: str, deal_id: uuid.UUID) -> dict[str, Any]:
    async def work(sessionmaker: Any) -> dict[str, Any]:
        async with sessionmaker() as session:
            deal = await session.get(Deal, deal_id)
            assert deal is not None
            parcels = list(await session.scalars(select(Parcel).where(Parcel.deal_id == deal_id)))
            payment = await session.scalar(select(Payment).where(Payment.deal_id == deal_id))
            told = [
                m.kind
                for m in await session.scalars(
                    select(OutboxMessage).where(OutboxMessage.deal_id == deal_id)
                )
            ]
            return {"deal": deal, "parcels": parcels, "payment": payment, "told": told}

    return run_on(db_url, work)


def _booked(db_url: str, deal_id: uuid.UUID) -> Parcel:
    wait_until(
        lambda: [p.status for p in _state(db_url, deal_id)["parcels"]] == ["booked"],
        FIRE_TIMEOUT,
        "the worker to book the parcel at Bring",
        interval=0.2,
    )
    [parcel] = _state(db_url, deal_id)["parcels"]
    return parcel


def _status(db_url: str, deal_id: uuid.UUID, status: str, what: str) -> dict[str, Any]:
    wait_until(
        lambda: _state(db_url, deal_id)["deal"].status == status,
        FIRE_TIMEOUT,
        what,
        interval=0.2,
    )
    return _state(db_url, deal_id)


class Clock:
    """Event times after the booking, one a second, as Bring's scans come."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def next(self) -> str:
        self.at += timedelta(seconds=1)
        return self.at.isoformat()


def _advance(db_url: str, integration_id: uuid.UUID, deal_id: uuid.UUID, seconds: int) -> None:
    async def work(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            await flows.advance_deal_clock(session, integration_id, deal_id, seconds)

    run_on(db_url, work)


def _conserved(state: dict[str, Any]) -> None:
    """What the buyer paid went out again, to the cent: to the seller, back to the buyer, as
    our fee, or for the shipping."""
    payment = state["payment"]
    kept = payment.amount_minor - payment.refunded_minor - payment.paid_out_minor
    assert kept == payment.fee_minor + payment.shipping_minor or (
        payment.refunded_minor == payment.amount_minor and kept == 0
    ), vars(payment)


def _prove(db_url: str, emulator: Any, base: str) -> None:
    settings = _settings(db_url, emulator)
    emulator.push_to(f"{base}/carriers/v1/bring/events")
    clock = Clock()

    # --- delivered to the pickup point, the review passes, the seller is paid ---
    deal_id, integration_id = _booking_asked(db_url, settings)
    parcel = _booked(db_url, deal_id)
    assert parcel.label_pdf is not None
    assert parcel.label_pdf.startswith(b"%PDF")
    assert parcel.qr_png is not None  # Bring's QR code, to show at the counter
    assert parcel.qr_png.startswith(b"\x89PNG\r\n\x1a\n")
    assert "parcel_booked" in _state(db_url, deal_id)["told"]
    emulator.event(parcel.shipment_id, "HANDED_IN", created=clock.next())
    _status(db_url, deal_id, "Shipping_In_Progress", "Bring's hand-in scan to move the deal")
    emulator.event(parcel.shipment_id, "READY_FOR_PICKUP", created=clock.next())
    emulator.event(parcel.shipment_id, "DELIVERED", created=clock.next())
    _status(db_url, deal_id, "Shipping_Arrived", "the collection to start the review")
    _advance(db_url, integration_id, deal_id, DAY)
    state = _status(db_url, deal_id, "Completed", "the 24-hour review to pass in the worker")
    wait_until(
        lambda: _state(db_url, deal_id)["payment"].status == "PaidOut",
        FIRE_TIMEOUT,
        "the seller to be paid",
        interval=0.2,
    )
    _conserved(_state(db_url, deal_id))

    # --- handed in, not collected, back to the seller: refunded ---
    deal_id, integration_id = _booking_asked(db_url, settings)
    parcel = _booked(db_url, deal_id)
    emulator.event(parcel.shipment_id, "HANDED_IN", created=clock.next())
    _status(db_url, deal_id, "Shipping_In_Progress", "the hand-in scan")
    emulator.event(parcel.shipment_id, "DELIVERED_SENDER", created=clock.next())
    _status(db_url, deal_id, "Refunded", "the parcel back at the seller to refund the buyer")
    wait_until(
        lambda: _state(db_url, deal_id)["payment"].status == "Refunded",
        FIRE_TIMEOUT,
        "the buyer's refund",
        interval=0.2,
    )
    _conserved(_state(db_url, deal_id))
    # By way of Shipping_Returned: the parcel back at the seller, then the buyer's refund.
    passed = [h.to_status for h in run_on(db_url, lambda sm: _history(sm, deal_id))]
    assert passed[-2:] == ["Shipping_Returned", "Refunded"], passed
    # The same push again (Event Cast retries): nothing changes twice.
    before = len(run_on(db_url, lambda sm: _history(sm, deal_id)))
    emulator.event(parcel.shipment_id, "DELIVERED_SENDER", created=clock.at.isoformat())
    assert len(run_on(db_url, lambda sm: _history(sm, deal_id))) == before

    # --- handed in and never delivered: lost after the carrier's days, the dispute opens ---
    deal_id, integration_id = _booking_asked(db_url, settings)
    parcel = _booked(db_url, deal_id)
    emulator.event(parcel.shipment_id, "HANDED_IN", created=clock.next())
    _status(db_url, deal_id, "Shipping_In_Progress", "the hand-in scan")
    _advance(db_url, integration_id, deal_id, settings.carrier_lost_after_days * DAY)
    state = _status(db_url, deal_id, "Shipping_Review_Denied", "the parcel to count as lost")
    assert state["deal"].dispute_reason == "lost"
    assert state["payment"].status == "Paid"  # held for the operator's decision

    # --- a booking that times out at Bring is made once ---
    emulator.fail("hang", path="/booking/api/create", hang_seconds=float(TIMEOUT) + 2)
    deal_id, integration_id = _booking_asked(db_url, settings)
    wait_until(
        lambda: (_state(db_url, deal_id)["parcels"][0].last_error or "") != "",
        FIRE_TIMEOUT,
        "the timed-out booking to be put off",
        interval=0.2,
    )
    state = _state(db_url, deal_id)
    assert state["parcels"][0].status == "booking"
    assert state["told"].count("parcel_delayed") == 1  # the seller knows what happens next
    reference = state["parcels"][0].reference
    # Bring made it all the same; the retry comes after the wait the adapter asked for, which
    # the test brings forward as a clock would.
    wait_until(lambda: len(emulator.bookings(reference)) == 1, FIRE_TIMEOUT, "the late booking")
    run_on(db_url, lambda sm: _due_now(sm, deal_id))
    parcel = _booked(db_url, deal_id)
    assert len(emulator.bookings(reference)) == 1  # one parcel, never two
    assert parcel.shipment_id == emulator.bookings(reference)[0]["consignmentNumber"]

    # --- Bring down: the booking waits, is not lost, and is made when Bring is back ---
    emulator.fail("503", count=2, path="/booking/api/create")
    deal_id, integration_id = _booking_asked(db_url, settings)
    parcel = _booked(db_url, deal_id)
    state = _state(db_url, deal_id)
    assert state["told"].count("parcel_delayed") == 1
    assert parcel.attempts >= 3


async def _history(sessionmaker: Any, deal_id: uuid.UUID) -> list[Any]:
    from dealbroker.deals import repository

    async with sessionmaker() as session:
        return await repository.history(session, deal_id)


async def _due_now(sessionmaker: Any, deal_id: uuid.UUID) -> None:
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Parcel)
            .where(Parcel.deal_id == deal_id)
            .values(next_attempt_at=datetime.now(UTC) - timedelta(seconds=1))
        )


def test_serve_on_sqlite_follows_bring(tmp_path: Path, bring_emulator: Any) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'bring.db'}"
    bring_emulator.reset()
    settings = bring_emulator.settings(DEALBROKER_BRING_TIMEOUT_SECONDS=TIMEOUT)
    server = Server(db_url, tmp_path, **settings)  # migrates, embeds the worker
    try:
        _prove(db_url, bring_emulator, server.base)
    finally:
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())


def test_serve_and_worker_on_postgresql_follow_bring(
    pg_url: str, tmp_path: Path, bring_emulator: Any
) -> None:
    bring_emulator.reset()
    settings = bring_emulator.settings(DEALBROKER_BRING_TIMEOUT_SECONDS=TIMEOUT)
    server = Server(pg_url, tmp_path, DEALBROKER_EMBEDDED_WORKER="off", **settings)
    worker = Worker(pg_url, tmp_path, **settings)
    try:
        worker.wait_ready()
        _prove(pg_url, bring_emulator, server.base)
    finally:
        worker.close()
        server.stop()
        (tmp_path / "serve.log").write_text(server.output())
        (tmp_path / "worker.log").write_text(worker.output())
