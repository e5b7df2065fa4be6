"""A run of the delivery job that holds a short batch sent for the next claim to record
(``DeliveryJob.run_once``, ``linger``), and the waiter it learns of new deliveries by
(``Waiter.next``)."""

import asyncio
import json
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import event, func, select

from dealbroker.core import clock, wakeup
from dealbroker.core.fastpath.statements import DriverStatements
from dealbroker.events import repository
from dealbroker.events.models import Delivery, DeliveryAttempt
from dealbroker.events.tasks import DeliveryJob
from tests.conftest import create_deal, eventually
from tests.events.delivery import register

# What these tests check is the fast paths (``core.fastpath``): on, whatever the environment.
pytestmark = pytest.mark.usefixtures("fast_paths_on")


async def test_next_takes_its_own_wake_and_leaves_the_others():
    waiter = wakeup.Waiter()
    waiter.wake(wakeup.DELIVERIES)
    assert await waiter.next(wakeup.DELIVERIES, 0.01) is True  # waiting already: taken
    assert not waiter.event.is_set()
    assert waiter.take() == (set(), False)
    assert await waiter.next(wakeup.DELIVERIES, 0.01) is False  # none came in time

    later = asyncio.get_running_loop().call_later(0.01, waiter.wake, wakeup.DELIVERIES)
    assert await waiter.next(wakeup.DELIVERIES, 5.0) is True
    later.cancel()

    asyncio.get_running_loop().call_later(0.01, waiter.wake, wakeup.MAIL)
    assert await waiter.next(wakeup.DELIVERIES, 5.0) is False  # another job's: the runner's
    assert waiter.take() == ({wakeup.MAIL}, False)

    waiter.wake(wakeup.DELIVERIES)
    waiter.wake(None)  # every job: left to the runner, which runs them all
    assert await waiter.next(wakeup.DELIVERIES, 5.0) is False
    assert waiter.take() == ({wakeup.DELIVERIES}, True)

    asyncio.get_running_loop().call_later(0.01, waiter.release)
    assert await waiter.next(wakeup.DELIVERIES, 5.0) is False  # released: the runner stops


async def _recorded(sessionmaker) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Deliveries no longer pending, and attempts."""
    async with sessionmaker() as session:
        done = await session.scalar(
            select(func.count()).select_from(Delivery).where(Delivery.status != "pending")
        )
        attempts = await session.scalar(select(func.count()).select_from(DeliveryAttempt))
    return int(done or 0), int(attempts or 0)


@pytest.fixture
async def lingering(engine, sessionmaker):
    if engine.dialect.name != "postgresql":
        pytest.skip("the batch held for the next claim is PostgreSQL's (one statement)")
    job = DeliveryJob(sessionmaker, allow_private=True, rng=lambda: 0.0, linger=1.0)
    waiter = wakeup.subscribe()
    job.listen(waiter)
    yield job
    job.listen(None)
    wakeup.unsubscribe(waiter)
    await job.aclose()


async def test_a_short_batch_is_recorded_by_the_next_claim(
    client, caller, receiver, sessionmaker, lingering
):
    await register(client, caller, receiver.url)
    await create_deal(client, caller)
    lingering._waiter.take()  # as the runner does before a round
    run = asyncio.create_task(lingering.run_once())
    await eventually(lambda: len(receiver.requests) == 1)
    await asyncio.sleep(0.1)
    assert await _recorded(sessionmaker) == (0, 0)  # sent, held for the next claim
    await create_deal(client, caller)  # its commit wakes the run, which claims it
    await eventually(lambda: len(receiver.requests) == 2)
    await asyncio.sleep(0.1)
    assert await _recorded(sessionmaker) == (1, 1)  # the first, recorded with that claim
    assert await asyncio.wait_for(run, 5.0) == 2  # no more within the linger: recorded alone
    assert await _recorded(sessionmaker) == (2, 2)
    ids = [json.loads(r.body)["id"] for r in receiver.requests]
    assert len(set(ids)) == 2  # none sent twice


async def test_halting_ends_the_wait_and_records_the_batch_held(
    client, caller, receiver, sessionmaker, lingering
):
    lingering.linger = 60.0
    await register(client, caller, receiver.url)
    await create_deal(client, caller)
    lingering._waiter.take()
    run = asyncio.create_task(lingering.run_once())
    await eventually(lambda: len(receiver.requests) == 1)
    await asyncio.sleep(0.1)
    assert await _recorded(sessionmaker) == (0, 0)
    lingering.halt()
    assert await asyncio.wait_for(run, 5.0) == 1
    assert await _recorded(sessionmaker) == (1, 1)


async def test_a_failure_is_recorded_at_once_with_its_endpoint(
    client, caller, receiver, sessionmaker, lingering
):
    await register(client, caller, receiver.url)
    receiver.answer(500)
    await create_deal(client, caller)
    lingering._waiter.take()
    run = asyncio.create_task(lingering.run_once())
    await eventually(lambda: len(receiver.requests) == 1)
    await asyncio.sleep(0.1)
    async with sessionmaker() as session:
        attempts = await session.scalar(select(func.count()).select_from(DeliveryAttempt))
    assert attempts == 1  # not held: the endpoint is marked failing in the same transaction
    assert await asyncio.wait_for(run, 5.0) == 1


async def test_the_claim_skips_the_deliveries_its_statement_records(
    client, caller, receiver, engine, sessionmaker, lingering
):
    await register(client, caller, receiver.url)
    await create_deal(client, caller)
    now = clock.now()
    # Claimed with a lease already over (a worker stalled past it): due again.
    statements = DriverStatements(engine, 2, 5.0)
    (row,) = await repository.claim_due_alone(statements, now, now - timedelta(seconds=1), 10)
    updates = [
        {
            "b_id": row.id,
            "b_status": "succeeded",
            "b_attempts": 1,
            "b_next": now,
            "b_code": 200,
            "b_error": None,
            "b_now": now,
        }
    ]
    attempts = [
        {
            "id": uuid.uuid4(),
            "delivery_id": row.id,
            "endpoint_id": row.endpoint_id,
            "event_id": row.event_id,
            "integration_id": row.integration_id,
            "attempted_at": now,
            "success": True,
            "status_code": 200,
            "latency_ms": 1,
            "error": None,
            "response_excerpt": None,
            "request_headers": None,
        }
    ]
    await create_deal(client, caller)  # the next delivery, due
    later = clock.now()
    try:
        claimed = await repository.record_and_claim_alone(
            statements, updates, attempts, later, later + timedelta(seconds=30), 10
        )
    finally:
        await statements.close()
    assert [c.id for c in claimed] != [row.id]  # recorded by the statement: not claimed again
    assert len(claimed) == 1  # the next one is
    assert await _recorded(sessionmaker) == (1, 1)


async def test_the_job_claims_and_records_on_connections_of_its_own(
    client, caller, receiver, sessionmaker, lingering
):
    """No pooled connection checked out and returned per statement (that cost more CPU than
    the statement, once per event at a steady rate); closed by ``aclose``, opened again by a
    later claim."""
    await register(client, caller, receiver.url)
    pool = sessionmaker.kw["bind"].sync_engine.pool
    checkouts: list[object] = []

    def count(*_: object) -> None:
        checkouts.append(None)

    lingering.linger = 0.01
    for deals in (2, 1):  # the second time after ``aclose``
        for _ in range(deals):
            await create_deal(client, caller)
        event.listen(pool, "checkout", count)
        try:
            assert await lingering.run_once() == deals  # claimed, sent, recorded
        finally:
            event.remove(pool, "checkout", count)
        assert checkouts == []
        own = lingering._alone
        assert own is not None
        assert own.connections.open >= 1
        await lingering.aclose()
        assert own.connections.open == 0
    assert await _recorded(sessionmaker) == (3, 3)
