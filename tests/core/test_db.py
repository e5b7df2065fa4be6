"""Database errors in the log: named by class and code, never with the request's data.

A penetration test (issue "Security") found a request's personal data in the log, among a
database error's parameters and text. Each case here makes the real database refuse a real
statement whose parameter is an email address, and whose error text echoes it.
"""

import logging
import re
import time
import traceback

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from dealbroker import worker as worker_module
from dealbroker.core import db, logs
from dealbroker.core.db import DatabaseFault, create_engine, describe_error
from dealbroker.deals import repository as deals_repository
from tests.conftest import SELLER, make_settings
from tests.processes import free_port, silent_port

EMAIL = "kari.personal@example.com"
# Statements each database refuses with an error whose text holds the parameter.
ECHOING = {
    # OperationalError: "JSON path error near '…'"
    "sqlite": ["SELECT json_extract('{}', :value)"],
    "postgresql": [
        # asyncpg, before sending: "invalid input for query argument $1: '…'"
        "SELECT CAST(:value AS uuid)",
        # the server: 'invalid input syntax for type uuid: "…"'
        "SELECT CAST(CAST(:value AS text) AS uuid)",
    ],
}


async def refused(session, statement: str) -> DBAPIError:
    """The error the database raises for ``statement`` run with ``EMAIL``."""
    with pytest.raises(DBAPIError) as caught:
        await session.execute(text(statement), {"value": EMAIL})
    return caught.value


def assert_no_personal_data(caplog: pytest.LogCaptureFixture) -> None:
    assert caplog.records
    assert EMAIL not in caplog.text  # formatted messages and any traceback
    for record in caplog.records:
        assert EMAIL not in record.getMessage()


async def test_the_error_itself_hides_its_parameters(engine):
    for statement in ECHOING[engine.dialect.name]:
        async with engine.connect() as conn:
            with pytest.raises(DBAPIError) as caught:
                await conn.execute(text(statement), {"value": EMAIL})
        assert "parameters hidden" in str(caught.value)
        assert EMAIL not in describe_error(caught.value)


async def test_database_error_in_a_request_logs_no_personal_data(
    client, caller, engine, monkeypatch, caplog
):
    caplog.set_level(logging.INFO, logger="dealbroker")
    operational = engine.dialect.name == "sqlite"  # SQLite says OperationalError, asyncpg not
    for statement in ECHOING[engine.dialect.name]:

        async def add(session, deal, *_args, statement=statement, **_kwargs):
            await session.execute(text(statement), {"value": deal.seller["email"]})

        monkeypatch.setattr(deals_repository, "add", add)
        caplog.clear()

        request = client.post(
            "/deals/v1/deals",
            json={"name": "Road bike", "seller": {**SELLER, "email": EMAIL}},
            headers={**caller.headers, "X-Request-Id": "req-1"},
        )
        if operational:  # the database is unwell: 503, try again
            response = await request
            assert response.status_code == 503, response.text
            assert EMAIL not in response.text
        else:  # a bug: the server answers 500 and prints the traceback of what it was given
            with pytest.raises(DatabaseFault) as raised:
                await request
            assert EMAIL not in "".join(traceback.format_exception(raised.value))

        assert_no_personal_data(caplog)
        (line,) = [m for m in map(logging.LogRecord.getMessage, caplog.records) if "database" in m]
        if operational:  # the first of a run of refused requests (``logs.Failures``)
            assert line.startswith("requests on the database failed; answering 503: ")
            assert line.endswith(" on /deals/v1/deals rid=req-1")
        else:
            assert line.startswith("database error on /deals/v1/deals rid=req-1: ")
        assert "Error (" in line
        assert " at deals/service.py:" in line  # ours, that called the (patched) repository


async def test_database_error_in_a_job_logs_no_personal_data(
    db_url, sessionmaker, monkeypatch, caplog
):
    class Failing:
        name = "failing"
        every = 0.0

        async def run_once(self) -> int:
            async with sessionmaker() as session:
                raise await refused(session, ECHOING[dialect][-1])

        async def aclose(self) -> None:
            return None

    dialect = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    monkeypatch.setattr(worker_module, "jobs", lambda sessionmaker, settings: [Failing()])
    runner = worker_module.Runner(sessionmaker, make_settings(db_url))
    caplog.set_level(logging.INFO, logger="dealbroker")

    assert await runner.run_round() == 0

    assert_no_personal_data(caplog)
    (message,) = [r.getMessage() for r in caplog.records if r.name == "dealbroker.worker"]
    assert message.startswith("job failing failed; retrying: ")
    assert "Error (" in message


async def test_a_database_out_of_reach_in_a_job_is_logged_in_a_few_lines_without_tracebacks(
    db_url, sessionmaker, monkeypatch, caplog
):
    """PostgreSQL down or restarting: opening a connection is refused by the driver, before
    SQLAlchemy wraps anything. The worker logs that as it logs a database error, in one line
    without a traceback, and not on every poll while it lasts: then a count now and then, and
    how long it lasted once the job runs again."""
    unreachable = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/none")
    down = True

    class Unreachable:
        name = "unreachable"
        every = 0.0
        more = False

        async def run_once(self) -> int:
            if not down:
                return 0
            async with unreachable.connect() as conn:
                await conn.execute(text("SELECT 1"))
            return 1

        async def aclose(self) -> None:
            return None

    monkeypatch.setattr(worker_module, "jobs", lambda sessionmaker, settings: [Unreachable()])
    runner = worker_module.Runner(sessionmaker, make_settings(db_url))
    caplog.set_level(logging.INFO, logger="dealbroker")

    def logged() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "dealbroker.worker"]

    async def poll() -> None:
        runner._wanted.add("unreachable")  # due now, as each poll of an outage finds it
        assert await runner.run_round() == 0

    try:
        for _ in range(3):
            await poll()
        (first,) = logged()  # three failures, one line
        # The line of ours that ran it: the runner's, this job being the test's.
        assert re.fullmatch(
            r"job unreachable failed; retrying: ConnectionRefusedError at worker\.py:\d+",
            first.getMessage(),
        )
        monkeypatch.setattr(logs, "FAILURE_LOG_SECONDS", 0.0)
        await poll()  # its time come, the next failure is logged with the count
        assert re.fullmatch(
            r"job unreachable failed 4 times in \d+ s; retrying: ConnectionRefusedError at .*",
            logged()[-1].getMessage(),
        )
        down = False
        await poll()
        await poll()
    finally:
        await unreachable.dispose()

    assert [r.getMessage() for r in logged()[2:]] == [
        "job unreachable recovered after 4 failures in 0 s"
    ]
    assert all(r.exc_info is None for r in logged())


async def test_a_database_that_does_not_answer_in_a_job_is_one_line_after_the_connect_timeout(
    db_url, sessionmaker, monkeypatch, caplog
):
    """A database server hung: the job's connection gives up after ``CONNECT_TIMEOUT`` (not
    asyncpg's 60 s, which would hold every job of the round) and the runner logs one line."""
    monkeypatch.setattr(db, "CONNECT_TIMEOUT", 0.3)
    with silent_port() as port:
        silent = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/none")

        class Silent:
            name = "silent"
            every = 0.0
            more = False

            async def run_once(self) -> int:
                async with silent.connect() as conn:
                    await conn.execute(text("SELECT 1"))
                return 1

            async def aclose(self) -> None:
                return None

        monkeypatch.setattr(worker_module, "jobs", lambda sessionmaker, settings: [Silent()])
        runner = worker_module.Runner(sessionmaker, make_settings(db_url))
        caplog.set_level(logging.INFO, logger="dealbroker")
        try:
            started = time.monotonic()
            assert await runner.run_round() == 0
            assert time.monotonic() - started < 10
        finally:
            await silent.dispose()

    (record,) = [r for r in caplog.records if r.name == "dealbroker.worker"]
    assert record.exc_info is None
    assert re.fullmatch(
        r"job silent failed; retrying: TimeoutError at worker\.py:\d+", record.getMessage()
    )


async def test_a_write_refused_as_read_only_is_an_outage(engine):
    """A write that reaches a standby still in recovery (the moment of a failover's promotion)
    is refused with SQLSTATE 25006: an outage the API answers 503 with Retry-After, not a
    bug's 500, and the pool drops that connection rather than lend it again. A read-only
    transaction makes the real database refuse it the same way."""
    if engine.dialect.name != "postgresql":
        pytest.skip("a read-only transaction is PostgreSQL's")
    async with engine.connect() as conn:
        await conn.execute(text("SET TRANSACTION READ ONLY"))
        with pytest.raises(DBAPIError) as caught:
            await conn.execute(text("CREATE TEMPORARY TABLE t (x int)"))
    assert str(getattr(caught.value.orig, "sqlstate", "")) == "25006"
    assert db.is_outage(caught.value)
    assert caught.value.connection_invalidated
