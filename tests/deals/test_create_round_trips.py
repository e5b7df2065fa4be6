"""Creating a deal writes everything in one statement on PostgreSQL, run by itself (no BEGIN,
no COMMIT): one round trip after authentication, and the same rows on both databases."""

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import Uuid, bindparam, func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from dealbroker.app import create_app
from dealbroker.auth import dependencies
from dealbroker.auth.service import NotCached, Principal
from dealbroker.core import clock, wakeup
from dealbroker.core.db import create_engine, create_sessionmaker, describe_error, is_outage
from dealbroker.core.fastpath.statements import DriverStatements
from dealbroker.deals import service
from dealbroker.deals.models import Deal, DealCounter, DealStatusChange
from dealbroker.deals.schemas import DealCreate
from dealbroker.events.models import Delivery, Event, WebhookEndpoint
from dealbroker.users.models import User
from tests.conftest import BASE_URL, SELLER, make_caller, make_settings

# What these tests check is the fast paths (``core.fastpath``): on, whatever the environment.
pytestmark = pytest.mark.usefixtures("fast_paths_on")


class RoundTrips:
    """Counts the requests asyncpg sends to the server for the task in ``counting`` (not the
    app's background work, such as the rate limits' sync)."""

    def __init__(self) -> None:
        self.counting: asyncio.Task[Any] | None = None
        self.seen: list[str] = []

    def wrap(self, owner: Any, name: str, label: Callable[..., str]) -> Any:
        original = getattr(owner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            if self.counting is not None and self.counting is asyncio.current_task():
                self.seen.append(label(*args, **kwargs))
            return await original(*args, **kwargs)

        return counted


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    trips = RoundTrips()
    connection, statement = asyncpg.connection.Connection, asyncpg.prepared_stmt.PreparedStatement
    # Every way SQLAlchemy's asyncpg adapter talks to the server: BEGIN/COMMIT go through
    # ``execute``; statements are prepared once per connection, then run with ``fetch``. And
    # the statements run on the driver directly (``core.fastpath.statements``), with the connection's ``fetch``.
    for owner, name, label in (
        (connection, "execute", lambda _c, query, *a, **k: query),
        (connection, "executemany", lambda _c, query, *a, **k: query),
        (connection, "fetch", lambda _c, query, *a, **k: query),
        (connection, "fetchrow", lambda _c, query, *a, **k: query),
        (connection, "prepare", lambda _c, query, *a, **k: "PREPARE " + query),
        (statement, "fetch", lambda s, *a, **k: s.get_query()),
    ):
        monkeypatch.setattr(owner, name, trips.wrap(owner, name, label))
    original = dependencies.principal_for

    async def principal_for(*args: Any) -> Any:
        principal = await original(*args)
        trips.counting = asyncio.current_task()  # from here on, the request's own work
        return principal

    monkeypatch.setattr(dependencies, "principal_for", principal_for)
    cached = dependencies.cached_principal

    def cached_principal(*args: Any) -> Any:
        principal = cached(*args)
        if not isinstance(principal, NotCached):  # a cached token: the check ends here
            trips.counting = asyncio.current_task()
        return principal

    monkeypatch.setattr(dependencies, "cached_principal", cached_principal)
    return trips


async def _endpoint(
    maker: async_sessionmaker[AsyncSession],
    integration_id: uuid.UUID,
    kinds: list[str] | None,
    *,
    enabled: bool = True,
) -> uuid.UUID:
    now = clock.now()
    endpoint = WebhookEndpoint(
        id=uuid.uuid4(),
        integration_id=integration_id,
        url="https://receiver.example.com/hook",
        description=None,
        event_kinds=kinds,
        enabled=enabled,
        disabled_reason=None,
        failing_since=None,
        created_at=now,
        updated_at=now,
    )
    async with maker() as session, session.begin():
        session.add(endpoint)
    return endpoint.id


@pytest.mark.parametrize("idempotency_key", [False, True])
async def test_create_is_one_round_trip_on_postgresql(
    db_url: str, engine: AsyncEngine, round_trips: RoundTrips, idempotency_key: bool
) -> None:
    """Counted from authentication on (the token is cached by then). With an Idempotency-Key
    too: the key is stored with its answer by the same statement."""
    if not db_url.startswith("postgresql"):
        pytest.skip("round trips are counted on PostgreSQL")
    # One connection, so the warm-up request leaves its statements prepared for the counted one.
    own = create_engine(db_url, pool_size=1)
    app = create_app(make_settings(db_url), own)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
                caller = await make_caller(client, create_sessionmaker(own))
                await _endpoint(create_sessionmaker(own), caller.integration_id, None)
                for seller in (SELLER, None, SELLER):
                    body = {"name": "Road bike", "price": 4500.5, "seller": seller}
                    headers = dict(caller.headers)
                    if idempotency_key:
                        headers["Idempotency-Key"] = str(uuid.uuid4())
                    round_trips.counting = None
                    round_trips.seen.clear()
                    response = await client.post("/deals/v1/deals", json=body, headers=headers)
                    assert response.status_code == 201, response.text
                counted = list(round_trips.seen)
                if idempotency_key:
                    replay = await client.post("/deals/v1/deals", json=body, headers=headers)
                    assert replay.headers["Idempotent-Replayed"] == "true"
                    assert (replay.status_code, replay.content) == (201, response.content)
        # The last create: its statements were prepared by the first one.
        assert len(counted) == 1, counted
        assert counted[0].startswith("WITH "), counted
    finally:
        await own.dispose()


async def test_create_writes_the_deal_history_count_user_event_and_deliveries(
    client: httpx.AsyncClient,
    caller: Any,
    other: Any,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    every = await _endpoint(sessionmaker, caller.integration_id, None)
    status = await _endpoint(sessionmaker, caller.integration_id, ["deal.status"])
    await _endpoint(sessionmaker, caller.integration_id, ["deal.offer"])
    await _endpoint(sessionmaker, caller.integration_id, [])
    await _endpoint(sessionmaker, caller.integration_id, None, enabled=False)
    await _endpoint(sessionmaker, other.integration_id, None)
    seller = {**SELLER, "email": " Kari@Example.com "}
    bodies = [{"name": "Road bike", "seller": seller}, {"name": "Lamp", "seller": SELLER}, {}]
    created = []
    for body in bodies:
        response = await client.post("/deals/v1/deals", json=body, headers=caller.headers)
        assert response.status_code == 201, response.text
        created.append(uuid.UUID(response.json()["id"]))
    async with sessionmaker() as session:
        deals = {d.id: d for d in await session.scalars(select(Deal))}
        users = list(
            await session.scalars(select(User).where(User.integration_id == caller.integration_id))
        )
        counters = list(await session.scalars(select(DealCounter)))
        for deal_id in created:
            deal = deals[deal_id]
            assert (deal.version, deal.events_emitted, deal.status) == (1, 1, "Draft")
            history = list(
                await session.scalars(
                    select(DealStatusChange).where(DealStatusChange.deal_id == deal_id)
                )
            )
            assert [(h.from_status, h.to_status, h.deal_version) for h in history] == [
                (None, "Draft", 1)
            ]
            event = await session.scalar(select(Event).where(Event.deal_id == deal_id))
            assert event is not None
            assert (event.kind, event.deal_sequence) == ("deal.status", 1)
            targets = await session.scalars(
                select(Delivery.endpoint_id).where(Delivery.event_seq == event.seq)
            )
            deliveries = list(
                await session.scalars(select(Delivery).where(Delivery.event_seq == event.seq))
            )
            assert sorted(map(str, targets)) == sorted(map(str, [every, status]))
            assert {d.status for d in deliveries} == {"pending"}
            assert all(d.id.version == 4 for d in deliveries)
    # One user for the seller, whatever the case and spacing of the address.
    assert [(u.email, u.name) for u in users] == [("kari@example.com", "Kari Nordmann")]
    assert deals[created[0]].seller_user_id == deals[created[1]].seller_user_id == users[0].id
    assert deals[created[2]].seller_user_id is None
    assert sum(c.count for c in counters if c.integration_id == caller.integration_id) == 3


async def test_a_create_that_queues_deliveries_wakes_the_workers(
    db_url: str,
    client: httpx.AsyncClient,
    caller: Any,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """In this process once it commits, and on PostgreSQL every listening process (NOTIFY)."""
    notified: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    listener = None
    if db_url.startswith("postgresql"):
        listener = await asyncpg.connect(db_url.replace("postgresql+asyncpg", "postgresql"))
        await listener.add_listener(wakeup.CHANNEL, lambda *args: notified.put_nowait(args[2:]))
    waiter = wakeup.subscribe()
    try:
        await client.post("/deals/v1/deals", json={"name": "Lamp"}, headers=caller.headers)
        assert not waiter.event.is_set()  # no endpoint, no delivery: nobody to wake
        await _endpoint(sessionmaker, caller.integration_id, None)
        response = await client.post("/deals/v1/deals", json={}, headers=caller.headers)
        assert response.status_code == 201, response.text
        # The delivery job alone: the worker's other jobs have nothing new to find.
        assert waiter.take() == ({wakeup.DELIVERIES}, False)
        if listener is not None:
            woken = await asyncio.wait_for(notified.get(), 5)
            assert woken == (wakeup.CHANNEL, wakeup.DELIVERIES)
    finally:
        wakeup.unsubscribe(waiter)
        if listener is not None:
            await listener.close()


async def test_racing_creates_with_one_key_write_one_of_everything(
    client: httpx.AsyncClient, caller: Any, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """The losers of the key write nothing at all: no user, count, event or delivery."""
    await _endpoint(sessionmaker, caller.integration_id, None)
    headers = {**caller.headers, "Idempotency-Key": "one-key"}
    body = {"name": "Once", "seller": SELLER}
    responses = await asyncio.gather(
        *(client.post("/deals/v1/deals", json=body, headers=headers) for _ in range(12))
    )
    assert {r.status_code for r in responses} == {201}
    assert len({r.content for r in responses}) == 1
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in responses) == 11
    async with sessionmaker() as session:
        for model in (Deal, DealStatusChange, User, Event, Delivery):
            count = select(func.count()).select_from(model)
            if hasattr(model, "integration_id"):
                count = count.where(model.integration_id == caller.integration_id)
            assert await session.scalar(count) == 1, model
        total = select(func.sum(DealCounter.count)).where(
            DealCounter.integration_id == caller.integration_id
        )
        assert await session.scalar(total) == 1


async def _create(
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Any,
    data: DealCreate,
    alone: DriverStatements | None,
) -> uuid.UUID:
    """The API's create (``alone``: by itself, on PostgreSQL on the driver's own connections)
    or a create inside a transaction (through the engine)."""
    principal = Principal(caller.integration_id, frozenset({"deals:read", "deals:write"}))
    async with sessionmaker() as session:
        if alone is not None:
            deal = await service.create(session, principal, data, "NOK", alone=alone)
            await session.commit()
        else:
            async with session.begin():
                deal = await service.create(session, principal, data, "NOK")
    return deal.id


async def test_the_driver_stores_and_fails_as_the_engine(
    db_url: str, engine: AsyncEngine, caller: Any, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    """The create on the driver binds its values as the engine does (the stored text of its
    JSON, a missing seller included, its enum, its timestamps) and raises the engine's error
    for a statement the database refuses (here a name too long for its column)."""
    stored = text(
        "SELECT name, description, price_minor, currency, CAST(images AS TEXT), package_type,"
        " status, CAST(seller AS TEXT), seller_user_id IS NULL, created_at = updated_at,"
        " version, events_emitted, handover_attempts, clock_offset_seconds FROM deals"
        " WHERE id = :id"
    ).bindparams(bindparam("id", type_=Uuid))
    reads = DriverStatements(engine, 2, 5.0)
    try:
        for body in (
            {"name": "Lamp", "price": 12.5, "packageType": "Small", "seller": SELLER},
            {"images": ["https://cdn.example.com/1.jpg"], "seller": {**SELLER, "email": "a@b.no"}},
            {},
        ):
            data = DealCreate.model_validate(body)
            rows = []
            for alone in (reads, None):
                deal_id = await _create(sessionmaker, caller, data, alone)
                async with sessionmaker() as session:
                    rows.append(tuple((await session.execute(stored, {"id": deal_id})).one()))
            assert rows[0] == rows[1], body
        if not db_url.startswith("postgresql"):
            return  # SQLite does not bound a VARCHAR's length
        errors = []
        for alone in (reads, None):
            with pytest.raises(DBAPIError) as raised:
                await _create(
                    sessionmaker, caller, DealCreate.model_construct(name="x" * 300), alone
                )
            error = raised.value
            # Described alike, but for the line that ran it (the driver's, or the engine's caller).
            described = describe_error(error).rsplit(" at ", 1)[0]
            errors.append((type(error), type(error.orig), is_outage(error), described))
        assert errors[0] == errors[1]
        assert errors[0][1:] == (
            errors[0][1],
            False,
            "DBAPIError (asyncpg.exceptions.StringDataRightTruncationError, 22001)",
        )
    finally:
        await reads.close()
