"""Deal deadlines fire in every running process kind, by themselves.

The 24 hours a buyer has to review an arrived item and the 7 days to hand an item over are
timers the worker's job runner fires. These tests start the real processes, make a deadline
pass by moving a timer's due time into the past in the database (no sandbox call, no call of
the firing function), and watch the process complete or refund the deal on its own:

* ``dealbroker serve`` on SQLite, whose embedded worker runs the jobs;
* ``dealbroker worker`` on PostgreSQL, beside no server at all;
* two ``dealbroker worker`` processes on one PostgreSQL database fire each deadline once.
"""

import json
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from dealbroker.core import clock
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal, DealStatusChange, DealTimer
from dealbroker.events.models import Event
from dealbroker.payments.models import Payment, ProviderCall
from tests.conftest import BACKENDS
from tests.lifecycle_helpers import new_deal
from tests.processes import FIRE_TIMEOUT, Server, Worker, run_on, wait_until

pytestmark = pytest.mark.server


async def _arrived(sessionmaker: Any) -> uuid.UUID:
    """A paid carrier deal whose item has arrived: the buyer's 24 hours run."""
    d = await new_deal(sessionmaker)
    await d.to_signed("Carrier")
    await d.pay()
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await d.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    assert await d.status() == "Shipping_Arrived"
    return d.deal_id


async def _pickup(sessionmaker: Any) -> uuid.UUID:
    """A paid pickup deal: the 7 days to hand over and approve run."""
    d = await new_deal(sessionmaker)
    await d.to_signed("Pickup")
    await d.pay()
    assert await d.status() == "Pickup_Pending"
    return d.deal_id


def make_deals(db_url: str, arrived: int, pickup: int) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    async def work(sessionmaker: Any) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
        return (
            [await _arrived(sessionmaker) for _ in range(arrived)],
            [await _pickup(sessionmaker) for _ in range(pickup)],
        )

    return run_on(db_url, work)


def let_deadlines_pass(db_url: str, deal_ids: list[uuid.UUID]) -> int:
    """Move the deals' pending timers a second into the past, as if their time had run out."""

    async def work(sessionmaker: Any) -> int:
        async with sessionmaker() as session, session.begin():
            result = await session.execute(
                update(DealTimer)
                .where(DealTimer.deal_id.in_(deal_ids), DealTimer.fired_at.is_(None))
                .values(due_at=clock.now() - timedelta(seconds=1))
            )
            return int(result.rowcount)  # type: ignore[attr-defined]

    return run_on(db_url, work)


def states(db_url: str, deal_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str | None]]:
    """Each deal's status and its payment's status."""

    async def work(sessionmaker: Any) -> dict[uuid.UUID, tuple[str, str | None]]:
        async with sessionmaker() as session:
            rows = await session.execute(
                select(Deal.id, Deal.status, Deal.payment_status).where(Deal.id.in_(deal_ids))
            )
            return {r.id: (r.status, r.payment_status) for r in rows}

    return run_on(db_url, work)


def wait_for(db_url: str, expected: dict[uuid.UUID, tuple[str, str]]) -> None:
    wait_until(
        lambda: states(db_url, list(expected)) == expected,
        FIRE_TIMEOUT,
        f"the deadlines to fire: {expected}",
        interval=0.2,
    )


def expected(arrived: list[uuid.UUID], pickup: list[uuid.UUID]) -> dict:
    # Review time over: the item counts as approved; the seller has no payout account yet, so
    # the payout waits (PendingPayOut). Pickup time over: expired, and the buyer refunded.
    return {
        **{d: ("Completed", "PendingPayOut") for d in arrived},
        **{d: ("Refunded", "Refunded") for d in pickup},
    }


def timer_histories(db_url: str, deal_ids: list[uuid.UUID]) -> Counter[tuple[uuid.UUID, str]]:
    """How often each deal took each timer-fired transition."""

    async def work(sessionmaker: Any) -> Counter[tuple[uuid.UUID, str]]:
        async with sessionmaker() as session:
            rows = await session.execute(
                select(DealStatusChange.deal_id, DealStatusChange.trigger).where(
                    DealStatusChange.deal_id.in_(deal_ids), DealStatusChange.actor == "timer"
                )
            )
            return Counter((r.deal_id, r.trigger) for r in rows)

    return run_on(db_url, work)


def assert_fired_once(db_url: str, arrived: list[uuid.UUID], pickup: list[uuid.UUID]) -> None:
    """Each deadline fired exactly once: one transition, one event, one refund or payout."""
    histories = timer_histories(db_url, arrived + pickup)
    assert histories == Counter(
        {(d, "review_period_ended"): 1 for d in arrived}
        | {(d, "pickup_expired"): 1 for d in pickup}
    )

    async def work(sessionmaker: Any) -> tuple[Any, ...]:
        async with sessionmaker() as session:
            timers = list(
                await session.execute(
                    select(DealTimer.outcome, func.count())
                    .where(
                        DealTimer.deal_id.in_(arrived + pickup),
                        # each approval's deadline closed when its buyer paid
                        DealTimer.trigger != "approval_lapsed",
                    )
                    .group_by(DealTimer.outcome)
                )
            )
            events = [
                json.loads(e.payload)["data"]
                for e in await session.scalars(
                    select(Event).where(Event.deal_id.in_(arrived + pickup))
                )
            ]
            calls = list(
                await session.execute(
                    select(ProviderCall.deal_id, ProviderCall.kind, ProviderCall.status)
                )
            )
            payments = list(
                await session.execute(
                    select(Payment.refunded_minor, Payment.amount_minor).where(
                        Payment.deal_id.in_(pickup)
                    )
                )
            )
            return timers, events, calls, payments

    timers, events, calls, payments = run_on(db_url, work)
    # The review and pickup timers fired; the arrived deals' 7-day shipping timers and transit
    # timers, due too, found their deal moved on (the item was handed over, then delivered)
    # and were closed as skipped.
    assert dict(timers) == {"fired": len(arrived) + len(pickup), "skipped": 2 * len(arrived)}
    expired = Counter(e["dealId"] for e in events if e.get("status") == "Pickup_Expired")
    refunded = Counter(
        e["dealId"] for e in events if e.get("status") == "Refunded" and "amount" in e
    )
    assert expired == Counter({str(d): 1 for d in pickup})
    assert refunded == Counter({str(d): 1 for d in pickup})
    assert sorted((c.deal_id, c.kind, c.status) for c in calls) == sorted(
        (d, "refund", "succeeded") for d in pickup
    )
    assert all(refunded_minor == amount for refunded_minor, amount in payments)


def test_serve_on_sqlite_fires_deadlines_by_itself(tmp_path: Path) -> None:
    if "sqlite" not in BACKENDS:
        pytest.skip("SQLite is not among the test backends")
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}"
    server = Server(db_url, tmp_path)  # migrates the database, embeds the worker
    try:
        arrived, pickup = make_deals(db_url, arrived=1, pickup=1)
        # Nothing fires before its time.
        assert states(db_url, arrived + pickup) == {
            arrived[0]: ("Shipping_Arrived", "Paid"),
            pickup[0]: ("Pickup_Pending", "Paid"),
        }
        # With the unused shipping and transit timers of the arrived deal.
        assert let_deadlines_pass(db_url, arrived + pickup) == 4
        wait_for(db_url, expected(arrived, pickup))
        assert_fired_once(db_url, arrived, pickup)
    finally:
        server.stop()


def test_worker_on_postgresql_fires_deadlines_by_itself(pg_url: str, tmp_path: Path) -> None:
    arrived, pickup = make_deals(pg_url, arrived=1, pickup=1)
    worker = Worker(pg_url, tmp_path)
    try:
        worker.wait_ready()
        assert "deadlines" in worker.output()
        assert let_deadlines_pass(pg_url, arrived + pickup) == 4
        wait_for(pg_url, expected(arrived, pickup))
        worker.process.terminate()
        assert worker.wait() == 0, worker.output()
    finally:
        worker.close()
    assert_fired_once(pg_url, arrived, pickup)


def test_two_workers_fire_each_deadline_once(pg_url: str, tmp_path: Path) -> None:
    arrived, pickup = make_deals(pg_url, arrived=10, pickup=10)
    assert let_deadlines_pass(pg_url, arrived + pickup) == 40
    # Both start on a queue of due timers, racing for every one of them.
    workers = [Worker(pg_url, tmp_path), Worker(pg_url, tmp_path)]
    try:
        for worker in workers:
            worker.wait_ready()
        wait_for(pg_url, expected(arrived, pickup))
        for worker in workers:
            worker.process.terminate()
        for worker in workers:
            assert worker.wait() == 0, worker.output()
    finally:
        for worker in workers:
            worker.close()
    assert_fired_once(pg_url, arrived, pickup)


def test_the_worker_runs_every_job() -> None:
    """The runner takes its jobs from the one registry: deadlines cannot be left out."""
    from dealbroker.core.settings import Settings
    from dealbroker.worker import Runner

    settings = Settings(database_url="sqlite://")
    runner = Runner(create_sessionmaker(create_engine("sqlite+aiosqlite://")), settings)
    assert [job.name for job in runner.jobs] == [
        "deliveries",
        "deadlines",
        "eid-timeouts",
        "reminders",
        "provider-calls",
        "vipps-poll",
        "swish-poll",
        "swish-payouts",
        "parcels",
        "parcel-follow",
        "conversation-mail",
        "mail",
        "retention",
    ]
