"""Reminders before a deadline are sent by the running processes, once each.

These tests start the real processes, move the sandbox clock (``deals.flows.advance_clock``,
what the sandbox's clock endpoint calls) past the reminder time, and watch the outbox:

* ``dealbroker serve`` on SQLite, whose embedded worker sends them, and sends none again after
  a restart;
* two ``dealbroker worker`` processes on one PostgreSQL database write each reminder once;
* a worker killed with SIGKILL in the middle of a reminder's transaction wrote nothing for it,
  and the worker started after it sends that reminder once, and no other a second time.
"""

import asyncio
import signal
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text

from dealbroker.deals import flows
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.notifications.models import OutboxMessage
from tests.conftest import BACKENDS
from tests.lifecycle_helpers import OLA, SELLER, paid
from tests.processes import Server, Worker, run_on

pytestmark = pytest.mark.server

TIMEOUT = 30.0
# Six days and an hour on: a 7-day deadline's reminder (24 hours before) is due, the deadline
# itself 23 hours away.
PAST_REMINDER = int(timedelta(days=6, hours=1).total_seconds())
KARI = SELLER["email"]


async def _make(sessionmaker: Any, carrier: int, pickup: int) -> dict[uuid.UUID, uuid.UUID]:
    """Paid deals, oldest first: ``{deal id: its integration}``. The pickups' buyers read
    Swedish, their sellers Norwegian."""
    made = [await paid(sessionmaker, "Carrier") for _ in range(carrier)]
    made += [
        await paid(sessionmaker, "Pickup", buyer_locale="sv", seller_locale="nb")
        for _ in range(pickup)
    ]
    return {d.deal_id: d.integration_id for d in made}


def make_deals(db_url: str, carrier: int, pickup: int) -> dict[uuid.UUID, uuid.UUID]:
    return run_on(db_url, lambda sm: _make(sm, carrier, pickup))


async def _advance(sessionmaker: Any, integrations: set[uuid.UUID]) -> None:
    async with sessionmaker() as session, session.begin():
        for integration_id in integrations:
            await flows.advance_clock(session, integration_id, PAST_REMINDER)


def advance(db_url: str, deals: dict[uuid.UUID, uuid.UUID]) -> None:
    """The sandbox clock of every deal's integration moves past the reminder time."""
    run_on(db_url, lambda sm: _advance(sm, set(deals.values())))


async def _sent(sessionmaker: Any, deal_ids: list[uuid.UUID]) -> Counter[tuple[Any, ...]]:
    async with sessionmaker() as session:
        rows = await session.execute(
            select(OutboxMessage.deal_id, OutboxMessage.to_email, OutboxMessage.subject).where(
                OutboxMessage.deal_id.in_(deal_ids), OutboxMessage.kind == "deadline_reminder"
            )
        )
        return Counter((r.deal_id, r.to_email, r.subject.split(":")[0]) for r in rows)


def sent(db_url: str, deal_ids: list[uuid.UUID]) -> Counter[tuple[Any, ...]]:
    """Each reminder written: (deal, to, the subject's first word, which says the language)."""
    return run_on(db_url, lambda sm: _sent(sm, deal_ids))


async def _handled(sessionmaker: Any, deal_ids: list[uuid.UUID]) -> int:
    async with sessionmaker() as session:
        return int(
            await session.scalar(
                select(func.count()).where(
                    DealTimer.deal_id.in_(deal_ids),
                    DealTimer.reminded_at.is_not(None),
                    # Not the approval's deadline to pay, closed (and its reminder with it) when
                    # the buyer paid.
                    DealTimer.fired_at.is_(None),
                )
            )
            or 0
        )


def handled(db_url: str, deal_ids: list[uuid.UUID]) -> int:
    return run_on(db_url, lambda sm: _handled(sm, deal_ids))


def wait_handled(db_url: str, deal_ids: list[uuid.UUID]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while handled(db_url, deal_ids) < len(deal_ids):
        assert time.monotonic() < deadline, f"timed out waiting for {len(deal_ids)} reminders"
        time.sleep(0.2)


def expected(carrier: list[uuid.UUID], pickup: list[uuid.UUID]) -> Counter[tuple[Any, ...]]:
    """One reminder per party who must act: the carrier deals' sellers, in English (no language
    learnt); both parties of a pickup, each in their language."""
    return Counter(
        {(d, KARI, "Reminder"): 1 for d in carrier}
        | {(d, KARI, "Påminnelse"): 1 for d in pickup}
        | {(d, OLA, "Påminnelse"): 1 for d in pickup}
    )


def statuses(db_url: str, deal_ids: list[uuid.UUID]) -> set[str]:
    async def work(sessionmaker: Any) -> set[str]:
        async with sessionmaker() as session:
            return set(await session.scalars(select(Deal.status).where(Deal.id.in_(deal_ids))))

    return run_on(db_url, work)


def test_serve_on_sqlite_sends_each_reminder_once_across_a_restart(tmp_path: Path) -> None:
    if "sqlite" not in BACKENDS:
        pytest.skip("SQLite is not among the test backends")
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}"
    server = Server(db_url, tmp_path)  # migrates the database, embeds the worker
    try:
        deals = make_deals(db_url, carrier=1, pickup=1)
        carrier, pickup = list(deals)[:1], list(deals)[1:]
        time.sleep(1.0)  # a few rounds of the embedded worker: nothing is due yet
        assert sent(db_url, list(deals)) == Counter()
        advance(db_url, deals)
        wait_handled(db_url, list(deals))
        assert sent(db_url, list(deals)) == expected(carrier, pickup)
    finally:
        server.stop()
    server = Server(db_url, tmp_path)
    try:
        time.sleep(1.0)
        assert sent(db_url, list(deals)) == expected(carrier, pickup)
    finally:
        server.stop()
    # The deadlines themselves are still 23 hours away.
    assert statuses(db_url, list(deals)) == {"Shipping_Pending", "Pickup_Pending"}


def test_two_workers_on_postgresql_send_each_reminder_once(pg_url: str, tmp_path: Path) -> None:
    deals = make_deals(pg_url, carrier=10, pickup=10)
    ids = list(deals)
    carrier, pickup = ids[:10], ids[10:]
    workers = [Worker(pg_url, tmp_path), Worker(pg_url, tmp_path)]
    try:
        for worker in workers:
            worker.wait_ready()
            assert "reminders" in worker.output()
        advance(pg_url, deals)  # both workers race for every reminder from here
        wait_handled(pg_url, ids)
        time.sleep(0.5)  # a late duplicate would show now
        for worker in workers:
            worker.process.terminate()
        for worker in workers:
            assert worker.wait() == 0, worker.output()
    finally:
        for worker in workers:
            worker.close()
    assert sent(pg_url, ids) == expected(carrier, pickup)
    assert statuses(pg_url, ids) == {"Shipping_Pending", "Pickup_Pending"}


def test_a_worker_killed_mid_reminder_sends_no_second_one(pg_url: str, tmp_path: Path) -> None:
    deals = make_deals(pg_url, carrier=8, pickup=0)
    ids = list(deals)  # their reminders fall due in this order
    stuck = ids[4]

    async def scenario(sessionmaker: Any) -> None:
        await _advance(sessionmaker, set(deals.values()))
        # Hold the fifth deal's row: the worker reminds the first four, then claims the fifth
        # timer and waits for the deal inside that reminder's transaction.
        async with sessionmaker() as holder, holder.begin():
            await holder.execute(select(Deal.id).where(Deal.id == stuck).with_for_update())
            worker = Worker(pg_url, tmp_path)
            try:
                deadline = time.monotonic() + TIMEOUT
                while not (await _handled(sessionmaker, ids) == 4 and await _waiting(holder)):
                    assert time.monotonic() < deadline, worker.output()
                    await asyncio.sleep(0.1)
                worker.process.send_signal(signal.SIGKILL)
                assert worker.wait() == -signal.SIGKILL
            finally:
                worker.close()
            assert await _sent(sessionmaker, ids) == Counter(
                {(d, KARI, "Reminder"): 1 for d in ids[:4]}
            )
        # The lock is let go; a new worker finds the fifth reminder not sent, and sends it and
        # the rest, once each.
        worker = Worker(pg_url, tmp_path)
        try:
            deadline = time.monotonic() + TIMEOUT
            while await _handled(sessionmaker, ids) < len(ids):
                assert time.monotonic() < deadline, worker.output()
                await asyncio.sleep(0.2)
            worker.process.terminate()
            assert worker.wait() == 0, worker.output()
        finally:
            worker.close()

    run_on(pg_url, scenario)
    assert sent(pg_url, ids) == expected(ids, [])


async def _waiting(session: Any) -> bool:
    """Whether a backend of this database waits for a lock (the worker, for the deal row we
    hold; the server is shared, so other databases' waits are left out)."""
    waiting = await session.scalar(
        text(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
    )
    return bool(waiting)
