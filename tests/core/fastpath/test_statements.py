"""Statements on asyncpg directly (``core.fastpath.statements``): the same rows and values as the
engine gives, and the engine's errors for what goes wrong (an outage 503, a full pool 503, a
bug 500 that logs no text), against the real databases."""

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import JSON, Integer, bindparam, cast, literal_column, null, select, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from dealbroker.app import create_app
from dealbroker.core import db
from dealbroker.core.db import create_engine, describe_error, is_outage
from dealbroker.core.fastpath.statements import DriverStatement, DriverStatements
from dealbroker.core.statuses import DealStatus
from dealbroker.core.types import UTCDateTime
from dealbroker.deals import repository
from tests.conftest import BASE_URL, create_deal, eventually, make_caller, make_settings
from tests.processes import silent_port
from tests.proxy import StallingProxy

# What these tests check is the fast paths (``core.fastpath``): on, whatever the environment.
pytestmark = pytest.mark.usefixtures("fast_paths_on")


def _postgresql(engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("the driver's own pool is PostgreSQL's")


# The backend a read ran on.
_PID = DriverStatement(select(literal_column("pg_backend_pid()").label("pid")))
_ONE = DriverStatement(select(literal_column("1").label("one")))


@pytest.fixture
async def one_connection(engine) -> AsyncIterator[DriverStatements]:
    """The driver's reads on a pool of one connection to the test database (PostgreSQL)."""
    _postgresql(engine)
    reads = DriverStatements(engine, pool_size=1, pool_timeout=5)
    yield reads
    await reads.close()


async def test_the_driver_statements_the_same_rows_as_the_engine(client, caller, engine):
    """One deal and a page, read on the driver and through the engine: equal, value by value
    and type by type (the status an enum, times in UTC, JSON decoded, ids as UUIDs)."""
    made = [
        await create_deal(client, caller, name=f"Lamp {i}", images=[f"https://x.test/{i}.jpg"])
        for i in range(3)
    ]
    reads = DriverStatements(engine, pool_size=2, pool_timeout=5)
    try:
        page_params = {"integration_id": caller.integration_id, "offset": 0, "limit": 2}
        for query, params in (
            (repository._ONE_ON_DRIVER, {"deal_id": uuid.UUID(made[0]["id"]), **page_params}),
            (repository._PAGE_ON_DRIVER, page_params),
        ):
            ours = await reads.fetch(query, params)
            async with engine.connect() as conn:
                theirs = (await conn.execute(query.statement, params)).all()
            assert ours
            assert len(ours) == len(theirs)
            for mine, engines in zip(ours, theirs, strict=True):
                assert mine._asdict() == engines._asdict()
                for name, value in mine._asdict().items():
                    assert type(value) is type(engines._mapping[name]), name
        deal = (
            await reads.fetch(
                repository._ONE_ON_DRIVER,
                {"deal_id": uuid.UUID(made[0]["id"]), "integration_id": caller.integration_id},
            )
        )[0]
        assert deal.status is DealStatus.DRAFT
        assert deal.created_at.utcoffset().total_seconds() == 0
        assert deal.images == ["https://x.test/0.jpg"]
        assert isinstance(deal.seller, dict)
    finally:
        await reads.close()


async def test_json_and_timestamps_are_the_engines_values(one_connection, engine):
    """On the reads' own connections JSON arrives as its text and is decoded by ``read_rows``,
    and a ``timestamptz`` is taken as asyncpg decodes it (UTC already): the engine's values and
    types, JSON ``null`` and SQL ``NULL``, ``jsonb`` and text beyond ASCII included."""
    statement = select(
        cast(literal_column("""'{"a": [1, "Tromsø", null, 2.5], "b": {"c": true}}'"""), JSON).label(
            "j"
        ),
        cast(literal_column("'null'"), JSON).label("json_null"),
        cast(literal_column("""'["å", {"x": 1}]'"""), JSONB).label("jb"),
        cast(null(), JSON).label("sql_null"),
        cast(literal_column("'2026-11-22 12:00:00.5+02'"), UTCDateTime).label("t"),
        cast(null(), UTCDateTime).label("no_t"),
    )
    query = DriverStatement(statement)
    (ours,) = await one_connection.fetch(query, {})
    async with engine.connect() as conn:
        (theirs,) = (await conn.execute(statement)).all()
    assert ours._asdict() == theirs._asdict()
    for name, value in ours._asdict().items():
        assert type(value) is type(theirs._mapping[name]), name
    assert ours.j == {"a": [1, "Tromsø", None, 2.5], "b": {"c": True}}
    assert ours.json_null is None
    assert ours.sql_null is None
    assert ours.no_t is None
    assert ours.t.tzinfo is UTC
    assert ours.t == datetime(2026, 11, 22, 10, 0, 0, 500000, UTC)


async def test_a_database_down_is_an_outage(engine):
    """Nothing listens where the driver's pool connects: an ``OperationalError`` the API
    answers 503 (``core.db.is_outage``), naming classes, not the driver's message."""
    _postgresql(engine)
    down = create_engine("postgresql+asyncpg://postgres@127.0.0.1:1/nowhere")
    reads = DriverStatements(down, pool_size=1, pool_timeout=5)
    try:
        with pytest.raises(OperationalError) as raised:
            await reads.fetch(_ONE, {})
        assert is_outage(raised.value)
        assert "ConnectionRefusedError" in describe_error(raised.value)
        assert reads.connections.open == 0  # the failed connect holds no place
    finally:
        await reads.close()
        await down.dispose()


async def test_a_database_that_does_not_answer_is_an_outage_after_the_connect_timeout(
    engine, monkeypatch
):
    """The connection is made and never answered (a server hung): the driver gives up after
    ``CONNECT_TIMEOUT``, not asyncpg's 60 s, and says the database is out of reach (503), not
    that its own connections were all taken (``PoolTimeout``, whose wait is ``pool_timeout``)."""
    _postgresql(engine)
    monkeypatch.setattr(db, "CONNECT_TIMEOUT", 0.3)
    with silent_port() as port:
        silent = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/none")
        reads = DriverStatements(silent, pool_size=1, pool_timeout=30)
        try:
            started = asyncio.get_running_loop().time()
            with pytest.raises(OperationalError) as raised:
                await reads.fetch(_ONE, {})
            assert asyncio.get_running_loop().time() - started < 10
            assert is_outage(raised.value)
            assert "ConnectionError" in describe_error(raised.value)
            assert reads.connections.open == 0
        finally:
            await reads.close()
            await silent.dispose()


async def test_a_database_with_no_connection_slot_is_an_outage(engine):
    """PostgreSQL refusing a connection for want of a slot (``too many connections``,
    SQLSTATE 53300; here for a role allowed none) is an overload, not a bug: an outage for the
    driver's reads and the engine alike, and the API's 503 with ``Retry-After``, never a 500."""
    _postgresql(engine)
    role = f"dealbroker_no_slot_{uuid.uuid4().hex[:8]}"
    async with engine.connect() as conn:
        admin = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await admin.execute(text(f'CREATE ROLE "{role}" LOGIN CONNECTION LIMIT 0'))
    url = engine.url.set(username=role)
    full = create_engine(url.render_as_string(hide_password=False))
    reads = DriverStatements(full, pool_size=1, pool_timeout=5)
    try:
        with pytest.raises(DBAPIError) as raised:
            await reads.fetch(_ONE, {})
        assert is_outage(raised.value)
        assert "53300" in describe_error(raised.value)
        with pytest.raises(DBAPIError) as through_engine:
            async with full.connect() as conn:
                await conn.execute(text("SELECT 1"))
        assert is_outage(through_engine.value)
        app = create_app(make_settings(url.render_as_string(hide_password=False)), full)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client,
        ):
            answer = await client.post(
                "/oauth2/token", data={"grant_type": "client_credentials"}, auth=("a", "b")
            )
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"]
    finally:
        await reads.close()
        await full.dispose()
        async with engine.connect() as conn:
            admin = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await admin.execute(text(f'DROP ROLE "{role}"'))


async def test_a_wrong_statement_is_a_bug_not_an_outage_and_keeps_its_values(one_connection):
    """A statement PostgreSQL refuses: ``DBAPIError`` (the API's 500), with the SQLSTATE for
    the log and neither the value nor PostgreSQL's message in its text."""
    divide = DriverStatement(
        select((literal_column("1") / bindparam("n", type_=Integer)).label("q"))
    )
    with pytest.raises(DBAPIError) as raised:
        await one_connection.fetch(divide, {"n": 0})
    assert not isinstance(raised.value, OperationalError)
    assert not is_outage(raised.value)
    assert "22012" in describe_error(raised.value)  # division_by_zero
    assert "division" not in str(raised.value)


async def test_a_full_pool_is_the_engines_pool_timeout(engine):
    """Every connection of the driver's pool busy for the pool timeout: SQLAlchemy's
    ``TimeoutError``, which the API answers 503 with Retry-After (test_load_shedding)."""
    _postgresql(engine)
    reads = DriverStatements(engine, pool_size=1, pool_timeout=0.2)
    sleep = DriverStatement(
        select(literal_column("1").label("one")).where(text("pg_sleep(2) IS NOT NULL"))
    )
    quick = _ONE
    try:
        slow = asyncio.create_task(reads.fetch(sleep, {}))
        await asyncio.sleep(0.5)  # it holds the one connection
        with pytest.raises(PoolTimeout):
            await reads.fetch(quick, {})
        assert [tuple(r) for r in await slow] == [(1,)]
        assert [tuple(r) for r in await reads.fetch(quick, {})] == [(1,)]
    finally:
        await reads.close()


async def test_a_connection_cut_under_the_pool_is_an_outage_then_recovers(engine, one_connection):
    """PostgreSQL ends the pool's connection (as a restart does): the next read is either
    served on a new connection or an outage (503), never a bug; the one after is served."""
    (first,) = await one_connection.fetch(_PID, {})
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first.pid})
    await asyncio.sleep(0.2)
    outcome: BaseException | list = []
    try:
        outcome = await one_connection.fetch(_PID, {})
    except OperationalError as cut:
        outcome = cut
    assert not isinstance(outcome, BaseException) or is_outage(outcome)
    (again,) = await one_connection.fetch(_PID, {})
    assert again.pid != first.pid


async def test_a_read_leaves_its_connection_without_a_reset_round_trip(engine, one_connection):
    """The pool takes a connection back without asyncpg's default reset statement (a round
    trip after every read): the backend's last statement is the read itself, and the next read
    on the same connection is served as the first was."""
    (first,) = await one_connection.fetch(_PID, {})
    async with engine.connect() as conn:
        last = (
            await conn.execute(
                text("SELECT query FROM pg_stat_activity WHERE pid = :pid"), {"pid": first.pid}
            )
        ).scalar_one()
    assert "pg_backend_pid()" in last
    assert "RESET" not in last
    (again,) = await one_connection.fetch(_PID, {})
    assert again.pid == first.pid


async def test_the_pool_connects_as_the_engine_reads_its_url(engine):
    """A URL's query string as SQLAlchemy's asyncpg dialect takes it (``ssl``, the adapter's
    ``prepared_statement_cache_size``): the driver's pool connects with the dialect's reading of
    it, as the engine does; given to asyncpg as a DSN, PostgreSQL would refuse them as settings."""
    _postgresql(engine)
    url = engine.url.update_query_dict({"ssl": "disable", "prepared_statement_cache_size": "50"})
    with_options = create_engine(url.render_as_string(hide_password=False))
    reads = DriverStatements(with_options, pool_size=1, pool_timeout=5)
    try:
        assert [tuple(r) for r in await reads.fetch(_ONE, {})] == [(1,)]
        async with with_options.connect() as conn:  # the engine takes the same URL
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await reads.close()
        await with_options.dispose()


# --- the driver's connections (``DriverConnections``) ----------------------------------------------


def _sleeping(seconds: float) -> DriverStatement:
    """A read that holds its connection ``seconds``, then names its backend."""
    return DriverStatement(
        select(literal_column("pg_backend_pid()").label("pid")).where(
            text(f"pg_sleep({seconds}) IS NOT NULL")
        )
    )


async def _backends(engine, pids) -> set[int]:
    """Which of ``pids`` are still connected backends."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE pid = ANY(:pids)"), {"pids": list(pids)}
        )
        return {r.pid for r in rows}


async def test_reads_never_hold_more_connections_than_the_pool_size(engine):
    """Five reads at once on a pool of two: two connections, opened as needed; the others
    wait their turn on them, and every read is served."""
    _postgresql(engine)
    reads = DriverStatements(engine, pool_size=2, pool_timeout=5)
    try:
        rows = await asyncio.gather(*(reads.fetch(_sleeping(0.2), {}) for _ in range(5)))
        pids = {row.pid for (row,) in rows}
        assert len(pids) == 2
        assert (reads.connections.open, reads.connections.idle) == (2, 2)
    finally:
        await reads.close()
    assert (reads.connections.open, reads.connections.idle) == (0, 0)
    assert await _backends(engine, pids) == set()


async def test_a_caller_that_gave_up_waiting_takes_nothing_with_it(engine, one_connection):
    """A read that waited past the pool timeout leaves no place taken: the connection it
    waited for goes idle, and the next read is served on it."""
    slow = asyncio.create_task(one_connection.fetch(_sleeping(0.5), {}))
    await asyncio.sleep(0.1)
    impatient = DriverStatements(engine, pool_size=1, pool_timeout=0.1)
    impatient.connections = one_connection.connections  # the same connections, less patience
    with pytest.raises(PoolTimeout):
        await impatient.fetch(_ONE, {})
    (held,) = await slow
    assert (one_connection.connections.open, one_connection.connections.idle) == (1, 1)
    (again,) = await one_connection.fetch(_PID, {})
    assert again.pid == held.pid


async def test_a_read_cancelled_mid_statement_closes_its_connection(engine, one_connection):
    """A read cancelled while PostgreSQL runs its statement: that connection is closed, not
    lent again (its statement may still be running), and the caller waiting for it opens a
    new one in its place."""
    (first,) = await one_connection.fetch(_PID, {})
    held = asyncio.create_task(one_connection.fetch(_sleeping(5), {}))
    await asyncio.sleep(0.2)
    waiting = asyncio.create_task(one_connection.fetch(_PID, {}))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # the one connection is held
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held
    (served,) = await asyncio.wait_for(waiting, 5)
    assert served.pid != first.pid
    assert (one_connection.connections.open, one_connection.connections.idle) == (1, 1)
    await eventually_gone(engine, first.pid)


async def eventually_gone(engine, pid: int) -> None:
    """Wait until PostgreSQL's backend ``pid`` is gone."""

    async def gone() -> bool:
        return not await _backends(engine, [pid])

    await eventually(gone)


async def test_an_idle_connection_is_closed_after_its_idle_time(engine, one_connection):
    """A connection idle for ``idle_seconds`` is closed: PostgreSQL's backend goes, the place
    is free, and the next read opens a new one."""
    one_connection.connections.idle_seconds = 0.3
    (first,) = await one_connection.fetch(_PID, {})
    (again,) = await one_connection.fetch(_PID, {})
    assert again.pid == first.pid  # lent again while fresh
    await eventually_gone(engine, first.pid)
    assert (one_connection.connections.open, one_connection.connections.idle) == (0, 0)
    (new,) = await one_connection.fetch(_PID, {})
    assert new.pid != first.pid


async def test_many_reads_some_cancelled_keep_the_count_exact(engine):
    """Forty reads at once on a pool of three, every third cancelled mid-way: the reads not
    cancelled are served, and what is left is exactly the connections idle, at most three."""
    _postgresql(engine)
    reads = DriverStatements(engine, pool_size=3, pool_timeout=10)
    try:
        tasks = [asyncio.create_task(reads.fetch(_sleeping(0.02), {})) for _ in range(40)]
        await asyncio.sleep(0.03)
        for task in tasks[::3]:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        served = [o for o in outcomes if isinstance(o, list)]
        failed = [o for o in outcomes if not isinstance(o, list | asyncio.CancelledError)]
        assert failed == []
        assert len(served) >= 40 - len(tasks[::3])
        connections = reads.connections
        assert connections.open == connections.idle <= 3
        assert not connections._waiters
        assert len(await asyncio.gather(*(reads.fetch(_ONE, {}) for _ in range(6)))) == 6
        assert connections.open == connections.idle <= 3
    finally:
        await reads.close()


async def test_closed_connections_refuse_reads_as_an_outage(one_connection):
    """After ``close`` (the app stopping), a read is an outage (503), not a hang."""
    await one_connection.fetch(_ONE, {})
    await one_connection.close()
    with pytest.raises(OperationalError):
        await one_connection.fetch(_ONE, {})


async def test_each_connection_is_closed_after_its_own_idle_time(engine):
    """Two connections gone idle together; one lent again meanwhile: the other is closed
    once idle for ``idle_seconds``, the one lent again only once idle that long itself."""
    _postgresql(engine)
    reads = DriverStatements(engine, pool_size=2, pool_timeout=5)
    reads.connections.idle_seconds = 1.5
    try:
        both = await asyncio.gather(*(reads.fetch(_sleeping(0.1), {}) for _ in range(2)))
        pids = {row.pid for (row,) in both}
        assert len(pids) == 2
        await asyncio.sleep(0.75)
        (again,) = await reads.fetch(_PID, {})  # the one last idle, idle afresh from now
        (other,) = pids - {again.pid}
        await eventually_gone(engine, other)
        assert await _backends(engine, [again.pid]) == {again.pid}
        assert (reads.connections.open, reads.connections.idle) == (1, 1)
        await eventually_gone(engine, again.pid)
        assert (reads.connections.open, reads.connections.idle) == (0, 0)
    finally:
        await reads.close()


async def test_a_statement_past_its_timeout_is_cancelled_on_every_path_and_answered_503(
    engine, db_url, sessionmaker, caplog
):
    """``create_engine(..., statement_timeout=...)`` (``DEALBROKER_DB_STATEMENT_TIMEOUT_SECONDS``):
    PostgreSQL cancels a statement that runs longer (SQLSTATE 57014), on the engine's own
    connections and the driver's (``DriverStatements``, ``connect_kwargs``); each is an
    outage, not a bug, and leaves its connection usable. A request whose read waits on a lock
    is answered 503 with Retry-After within about
    the timeout, and logged as the first of a run of refused requests."""
    _postgresql(engine)
    timeout = 0.3
    timed = create_engine(db_url, pool_size=1, pool_timeout=5, statement_timeout=timeout)
    reads = DriverStatements(timed, pool_size=1, pool_timeout=5)
    slow = "SELECT pg_sleep(5)"
    try:
        raised: list[DBAPIError] = []
        for run in (
            lambda: _on_engine(timed, slow),
            lambda: reads.fetch(_sleeping(5), {}),
        ):
            started = asyncio.get_running_loop().time()
            with pytest.raises(DBAPIError) as caught:
                await run()
            assert asyncio.get_running_loop().time() - started < timeout + 1.5
            raised.append(caught.value)
        for exc in raised:
            assert is_outage(exc)
            assert "57014" in describe_error(exc)
        # The connections were not lost to it: one each, and they answer at once.
        assert await _on_engine(timed, "SELECT 1") == 1
        assert (await reads.fetch(_ONE, {}))[0].one == 1
        assert reads.connections.open == 1

        app = create_app(make_settings(db_url), timed)
        caplog.set_level("INFO", logger="dealbroker")
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
                caller = await make_caller(client, sessionmaker)
                locker = create_engine(db_url, pool_size=1)
                try:
                    async with locker.connect() as conn:
                        await conn.execute(text("LOCK TABLE deals IN ACCESS EXCLUSIVE MODE"))
                        for _ in range(3):
                            started = asyncio.get_running_loop().time()
                            response = await client.get("/deals/v1/deals", headers=caller.headers)
                            elapsed = asyncio.get_running_loop().time() - started
                            assert response.status_code == 503, response.text
                            assert response.headers["retry-after"] == "5"
                            assert elapsed < timeout + 1.5
                        await conn.rollback()
                finally:
                    await locker.dispose()
                assert (
                    await client.get("/deals/v1/deals", headers=caller.headers)
                ).status_code == 200
    finally:
        await reads.close()
        await timed.dispose()
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "dealbroker.http" and "database" in r.getMessage()
    ]
    assert len(lines) == 2, lines  # three refused: the first, then the end
    assert lines[0].startswith("requests on the database failed; answering 503: DBAPIError (")
    assert "57014" in lines[0]
    assert re.fullmatch(r"requests on the database recovered after 3 failures in \d+ s", lines[1])


async def _on_engine(engine, statement: str) -> object:
    async with engine.connect() as conn:
        return await conn.scalar(text(statement))


async def test_a_statement_the_server_does_not_answer_gives_up_after_the_timeout_and_a_second(
    engine, db_url
):
    """The server hung (a proxy that stops forwarding): no cancellation comes back, so the
    client gives up ``STATEMENT_TIMEOUT_GRACE`` after the statement's timeout and closes the
    connection at once, rather than politely (SQLAlchemy's close waits 2 s more for a server
    that does not answer), on the engine's connections and the driver's own
    (``DriverStatements``); an outage each. Once the server answers again, the next statement
    runs on a new connection."""
    _postgresql(engine)
    timeout = 0.5
    url = make_url(db_url)
    with StallingProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
        hung = create_engine(proxied, pool_size=1, pool_timeout=5, statement_timeout=timeout)
        statements = DriverStatements(hung, pool_size=1, pool_timeout=5)
        try:
            assert await _on_engine(hung, "SELECT 1") == 1  # a pooled connection, then the hang
            proxy.stall()
            started = asyncio.get_running_loop().time()
            with pytest.raises(TimeoutError):
                await _on_engine(hung, "SELECT 1")
            assert (
                asyncio.get_running_loop().time() - started
                < timeout + db.STATEMENT_TIMEOUT_GRACE + 0.4
            )
            proxy.resume()
            assert await _on_engine(hung, "SELECT 1") == 1

            proxy.stall()
            started = asyncio.get_running_loop().time()
            with pytest.raises(OperationalError) as raised:
                await statements.fetch(_ONE, {})
            assert (
                asyncio.get_running_loop().time() - started
                < timeout + db.STATEMENT_TIMEOUT_GRACE + 0.4
            )
            assert is_outage(raised.value)
            assert raised.value.connection_invalidated
            proxy.resume()
            assert (await statements.fetch(_ONE, {}))[0].one == 1
        finally:
            await statements.close()
            await hung.dispose()
