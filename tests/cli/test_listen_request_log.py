"""An idle ``dealbroker listen`` leaves its integration's request log alone: a real server
process, the real command polling once a second, and the rows it left counted in the
database; an event still reaches the receiver at once, and the poll that found it is logged."""

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from dealbroker.core.db import create_engine
from tests.cli.listening import Api, Listener
from tests.conftest import BACKENDS, database_url
from tests.processes import Server, drop_database, wait_until
from tests.receiver import start_receiver

pytestmark = pytest.mark.server

IDLE_SECONDS = 5.0


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = database_url(request.param, tmp_path_factory.mktemp("quiet"), "listen_quiet")
    yield url
    if request.param != "sqlite":
        drop_database(url)


def logged(db: str) -> list[tuple[str, str, int]]:
    """The request log's rows, oldest first: method, route, status."""

    async def read() -> list[tuple[str, str, int]]:
        engine = create_engine(db, pool_size=1)
        try:
            async with engine.connect() as connection:
                rows = await connection.execute(
                    text("SELECT method, route, status FROM api_requests ORDER BY at")
                )
                return [tuple(row) for row in rows]  # type: ignore[misc]
        finally:
            await engine.dispose()

    return asyncio.run(read())


@pytest.mark.parametrize("since", [False, True], ids=["from-now", "since"])
def test_an_idle_listen_leaves_no_rows_and_an_event_arrives_at_once(db, tmp_path, since):
    server = Server(db, tmp_path, DEALBROKER_API_REQUEST_LOG_FLUSH_SECONDS="0.2")
    receiver = start_receiver()
    try:
        api = Api(server)
        api.create_deal("Older bike")  # an event from before listen starts
        args = [
            "--forward-to",
            receiver.url,
            "--api-url",
            server.base,
            "--client-id",
            server.credential("client id"),
            "--client-secret",
            server.credential("client secret"),
            "--webhook-secret",
            server.credential("webhook secret"),
        ]
        if since:
            time.sleep(1.1)  # the older deal's event is from before --since (whole seconds)
            args += ["--since", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S")]
        time.sleep(0.5)
        before = len(logged(db))
        listener = Listener(db, tmp_path, *args, interval=1.0)
        try:
            time.sleep(IDLE_SECONDS)  # a look a second, as listen does by default
            rows = logged(db)[before:]
            # Its token, and the look that placed the cursor (which found the older event).
            assert len(rows) <= 2, rows
            assert receiver.requests == []

            started = time.monotonic()
            deal_id = api.create_deal("New bike")
            wait_until(lambda: len(receiver.requests) == 1, 10, "the new event forwarded")
            assert time.monotonic() - started < 2.0
            assert deal_id.encode() in receiver.requests[0].body
            wait_until(
                lambda: ("GET", "/events/v1/events", 200) in logged(db)[before + len(rows) :],
                5,
                "the poll that found the event in the request log",
            )
            time.sleep(IDLE_SECONDS)
            polls = [r for r in logged(db)[before:] if r[1] == "/events/v1/events"]
            assert len(polls) <= 8, polls  # the looks that found it (it settles in 5 s)
        finally:
            listener.stop()
    finally:
        receiver.close()
        server.stop()
