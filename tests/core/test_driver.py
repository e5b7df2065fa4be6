"""The deal reads on asyncpg directly (``core.driver``): the same rows and values as the
engine gives, and the engine's errors for what goes wrong (an outage 503, a full pool 503, a
bug 500 that logs no text), against the real databases."""

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Integer, bindparam, literal_column, select, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from dealbroker.core.db import create_engine, describe_error, is_outage
from dealbroker.core.driver import DriverReads, Query
from dealbroker.deals import repository
from dealbroker.deals.lifecycle import DealStatus
from tests.conftest import create_deal


def _postgresql(engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("the driver's own pool is PostgreSQL's")


# The backend a read ran on.
_PID = Query(select(literal_column("pg_backend_pid()").label("pid")))


@pytest.fixture
async def one_connection(engine) -> AsyncIterator[DriverReads]:
    """The driver's reads on a pool of one connection to the test database (PostgreSQL)."""
    _postgresql(engine)
    reads = DriverReads(engine, pool_size=1, pool_timeout=5)
    yield reads
    await reads.close()


async def test_the_driver_reads_the_same_rows_as_the_engine(client, caller, engine):
    """One deal and a page, read on the driver and through the engine: equal, value by value
    and type by type (the status an enum, times in UTC, JSON decoded, ids as UUIDs)."""
    made = [
        await create_deal(client, caller, name=f"Lamp {i}", images=[f"https://x.test/{i}.jpg"])
        for i in range(3)
    ]
    reads = DriverReads(engine, pool_size=2, pool_timeout=5)
    try:
        page_params = {"integration_id": caller.integration_id, "offset": 0, "limit": 2}
        for query, params in (
            (repository._ONE_QUERY, {"deal_id": uuid.UUID(made[0]["id"]), **page_params}),
            (repository._PAGE_QUERY, page_params),
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
                repository._ONE_QUERY,
                {"deal_id": uuid.UUID(made[0]["id"]), "integration_id": caller.integration_id},
            )
        )[0]
        assert deal.status is DealStatus.DRAFT
        assert deal.created_at.utcoffset().total_seconds() == 0
        assert deal.images == ["https://x.test/0.jpg"]
        assert isinstance(deal.seller, dict)
    finally:
        await reads.close()


async def test_a_database_down_is_an_outage(engine):
    """Nothing listens where the driver's pool connects: an ``OperationalError`` the API
    answers 503 (``core.db.is_outage``), naming classes, not the driver's message."""
    _postgresql(engine)
    down = create_engine("postgresql+asyncpg://postgres@127.0.0.1:1/nowhere")
    reads = DriverReads(down, pool_size=1, pool_timeout=5)
    try:
        with pytest.raises(OperationalError) as raised:
            await reads.fetch(Query(select(literal_column("1").label("one"))), {})
        assert is_outage(raised.value)
        assert "ConnectionRefusedError" in describe_error(raised.value)
    finally:
        await reads.close()
        await down.dispose()


async def test_a_wrong_statement_is_a_bug_not_an_outage_and_keeps_its_values(one_connection):
    """A statement PostgreSQL refuses: ``DBAPIError`` (the API's 500), with the SQLSTATE for
    the log and neither the value nor PostgreSQL's message in its text."""
    divide = Query(select((literal_column("1") / bindparam("n", type_=Integer)).label("q")))
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
    reads = DriverReads(engine, pool_size=1, pool_timeout=0.2)
    sleep = Query(select(literal_column("1").label("one")).where(text("pg_sleep(2) IS NOT NULL")))
    quick = Query(select(literal_column("1").label("one")))
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
    reads = DriverReads(with_options, pool_size=1, pool_timeout=5)
    try:
        assert [
            tuple(r) for r in await reads.fetch(Query(select(literal_column("1").label("one"))), {})
        ] == [(1,)]
        async with with_options.connect() as conn:  # the engine takes the same URL
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await reads.close()
        await with_options.dispose()
