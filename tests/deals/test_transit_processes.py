"""A parcel in transit always resolves, with no one pressing anything: the transit deadline
(``DEALBROKER_TRANSIT_DEADLINE_DAYS`` after the hand-over) fires in a real running process.

The sandbox clock (``deals.flows.advance_clock``, what ``POST /sandbox/v1/clock/advance``
calls) brings the deal's deadlines closer; the running process, not the test, first reminds the
buyer a day before the transit deadline (once), then fires the one that fell due: ``dealbroker
serve`` on SQLite (its embedded worker) and ``dealbroker worker`` on PostgreSQL. The deal goes
to dispute ("not received"), the buyer's money stays held, both parties are told and the webhook event is written.
"""

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from dealbroker.deals import flows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.events.models import Event
from dealbroker.notifications.models import OutboxMessage
from tests.lifecycle_helpers import new_deal
from tests.processes import FIRE_TIMEOUT, Server, Worker, run_on, wait_until

pytestmark = pytest.mark.server

DAY = 24 * 3600


def _in_transit(db_url: str) -> tuple[uuid.UUID, uuid.UUID]:
    """A paid carrier deal the seller has handed to the carrier; its integration."""

    async def work(sessionmaker: Any) -> tuple[uuid.UUID, uuid.UUID]:
        d = await new_deal(sessionmaker)
        await d.to_signed("Carrier")
        await d.pay()
        await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
        assert await d.status() == "Shipping_In_Progress"
        return d.deal_id, d.integration_id

    return run_on(db_url, work)


def _advance(db_url: str, integration_id: uuid.UUID, seconds: int) -> int:
    """The sandbox clock: the integration's pending deadlines come ``seconds`` closer."""

    async def work(sessionmaker: Any) -> int:
        async with sessionmaker() as session, session.begin():
            return await flows.advance_clock(session, integration_id, seconds)

    return run_on(db_url, work)


def _state(db_url: str, deal_id: uuid.UUID) -> dict[str, Any]:
    async def work(sessionmaker: Any) -> dict[str, Any]:
        async with sessionmaker() as session:
            deal = await session.get(Deal, deal_id)
            assert deal is not None
            events = [
                json.loads(e.payload)
                for e in await session.scalars(
                    select(Event).where(Event.deal_id == deal_id).order_by(Event.created_at)
                )
            ]
            messages = list(
                await session.scalars(
                    select(OutboxMessage).where(
                        OutboxMessage.deal_id == deal_id, OutboxMessage.kind == "deal_disputed"
                    )
                )
            )
            timers = list(
                await session.scalars(select(DealTimer).where(DealTimer.deal_id == deal_id))
            )
            reminders = list(
                await session.scalars(
                    select(OutboxMessage).where(
                        OutboxMessage.deal_id == deal_id,
                        OutboxMessage.kind == "deadline_reminder",
                    )
                )
            )
            return {
                "status": deal.status,
                "payment": deal.payment_status,
                "reason": deal.dispute_reason,
                "statuses": [e["data"]["status"] for e in events if e["event"] == "deal.status"],
                "told": sorted(m.to_email for m in messages),
                "reminded": [(m.to_email, m.body) for m in reminders],
                "transit": [
                    (t.outcome, t.fired_at is not None)
                    for t in timers
                    if t.trigger == Trigger.TRANSIT_EXPIRED.value
                ],
                "shipping": [t.outcome for t in timers if t.trigger == "shipping_expired"],
            }

    return run_on(db_url, work)


def _prove_transit_deadline(db_url: str) -> None:
    deal_id, integration_id = _in_transit(db_url)
    # 13 days of sandbox time: still in transit, nothing fires (the deadline is 14 days).
    assert _advance(db_url, integration_id, 13 * DAY) == 2  # the shipping and transit timers
    # The process would fire a due timer within a poll; the 7-day shipping deadline, due now,
    # is closed as skipped (the item was handed over) while the transit deadline waits.
    wait_until(
        lambda: _state(db_url, deal_id)["shipping"] == ["skipped"],
        FIRE_TIMEOUT,
        "the 7-day shipping deadline to be closed as skipped",
        interval=0.2,
    )
    # The transit deadline is a day away: the process reminds the buyer (not the seller, who
    # handed the parcel over), once.
    wait_until(
        lambda: len(_state(db_url, deal_id)["reminded"]) == 1,
        FIRE_TIMEOUT,
        "the buyer to be reminded of the transit deadline",
        interval=0.2,
    )
    state = _state(db_url, deal_id)
    assert (state["status"], state["transit"]) == ("Shipping_In_Progress", [(None, False)])
    ((to, body),) = state["reminded"]
    assert to != "kari@example.com"
    assert "Has the parcel arrived? Confirm its arrival on your offer page." in body
    # One more day: the running process fires the transit deadline by itself.
    assert _advance(db_url, integration_id, DAY) == 1
    wait_until(
        lambda: _state(db_url, deal_id)["status"] == "Shipping_Review_Denied",
        FIRE_TIMEOUT,
        "the transit deadline to fire",
        interval=0.2,
    )
    state = _state(db_url, deal_id)
    assert state["reason"] == "not received"
    assert state["payment"] == "Paid"  # the money stays held for the operator's decision
    assert state["statuses"][-2:] == ["Shipping_In_Progress", "Shipping_Review_Denied"]
    assert state["transit"] == [("fired", True)]
    # Both parties are told, the seller at the deal's address and the buyer at the offer's.
    assert len(state["told"]) == 2
    assert "kari@example.com" in state["told"]
    assert len(state["reminded"]) == 1  # no second reminder


def test_serve_on_sqlite_fires_the_transit_deadline(tmp_path: Path) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'transit.db'}"
    server = Server(db_url, tmp_path)  # migrates the database, embeds the worker
    try:
        _prove_transit_deadline(db_url)
    finally:
        server.stop()


def test_worker_on_postgresql_fires_the_transit_deadline(
    pg_url: str,
    tmp_path: Path,
) -> None:
    worker = Worker(pg_url, tmp_path)
    try:
        worker.wait_ready()
        _prove_transit_deadline(pg_url)
    finally:
        worker.close()
