"""The buffered writes (the API's request log, the rate limits' refusals): a flush that fails,
whatever the error, keeps its entries for the next one, and a pool exhausted once does not end
the writing for the process's life."""

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core.db import create_engine
from dealbroker.integrations.request_log import RequestLog
from tests.conftest import BACKENDS, database_url
from tests.processes import Server, drop_database

POOL_TIMEOUT = 1.0
ENDPOINTS = "/integrations/v1/webhook-endpoints"
REFUSALS_FLUSH = 5.0  # integrations.refusals.FLUSH_SECONDS, as the server runs it


class _Failing(RequestLog):
    """A request log whose writes fail with ``error`` while it is set."""

    error: BaseException | None = None

    async def _write(self, session: AsyncSession, pending: list) -> None:  # type: ignore[type-arg]
        if self.error is not None:
            raise self.error
        await super()._write(session, pending)


@pytest.mark.parametrize(
    "error",
    [PoolTimeout("pool full"), RuntimeError("a bug"), asyncio.CancelledError()],
    ids=["pool-timeout", "bug", "cancelled"],
)
async def test_a_failed_flush_keeps_its_entries_up_to_the_bound(
    error: BaseException, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    buffer = _Failing(max_pending=3)
    buffer.error = error
    entries = [("nobody", float(i), "GET", "/x", None, 200, f"r{i}", 1) for i in range(2)]
    for entry in entries:
        buffer.note(entry)
    with pytest.raises(type(error)):
        await buffer.flush(sessionmaker)
    assert buffer._pending == entries  # kept for the next flush

    # Noted meanwhile: after the kept ones, up to the bound (the note past it is dropped).
    buffer.note(("nobody", 9.0, "GET", "/x", None, 200, "r9", 1))
    buffer.note(("nobody", 10.0, "GET", "/x", None, 200, "r10", 1))
    with pytest.raises(type(error)):
        await buffer.flush(sessionmaker)
    assert [e[6] for e in buffer._pending] == ["r0", "r1", "r9"]

    buffer.error = None
    await buffer.flush(sessionmaker)  # written (a client id no integration has: no row)
    assert buffer._pending == []


@pytest.fixture
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if "postgresql" not in BACKENDS:
        pytest.skip("postgresql is not among the test backends")
    url = database_url("postgresql", tmp_path_factory.mktemp("fullpool"), "fullpool")
    yield url
    drop_database(url)


@pytest.mark.server
def test_a_pool_exhausted_once_loses_no_request_and_no_refusal(pg, tmp_path):
    """A real ``serve`` on PostgreSQL (only there is the pool bounded, by
    ``DEALBROKER_DB_POOL_SIZE`` and ``DEALBROKER_DB_POOL_TIMEOUT_SECONDS``) whose two pooled
    connections are held by requests stuck on a table lock for longer than both buffers' flush
    periods: their flushes find no connection free within the pool's timeout. Once the lock
    goes, every request answered, before, during and after, is in the request log, and every
    429 in the refusals' tally (it once lost the batch in hand and stopped writing for good:
    1,530 of 4,475 requests recorded in a soak)."""
    server = Server(
        pg,
        tmp_path,
        DEALBROKER_DB_POOL_SIZE="2",
        DEALBROKER_DB_POOL_TIMEOUT_SECONDS=str(POOL_TIMEOUT),
        DEALBROKER_API_REQUEST_LOG_FLUSH_SECONDS="0.5",
        DEALBROKER_RATE_LIMIT_TOKEN_FAILURES_PER_MINUTE="2",
    )
    try:
        asyncio.run(_exhaust_once_then_use(server, pg))
    finally:
        server.stop()
    output = server.output()
    # The full pool reached both writers, which said so (the first of a run of failures), no
    # traceback.
    for what in ("api requests", "rate-limit refusals"):
        line = f"writing {what} failed; kept for the next time: no database connection free"
        assert line in output, output
    assert "Traceback" not in output, output


class _Client:
    """The integration's calls, each answer's request id kept."""

    def __init__(self, server: Server, http: httpx.AsyncClient) -> None:
        self.server, self.http = server, http
        self.request_ids: list[str] = []
        self.refused = 0  # answers 429
        self.bearer: dict[str, str] = {}

    async def call(self, method: str, path: str, **kwargs: object) -> httpx.Response:
        response = await self.http.request(method, path, **kwargs)  # type: ignore[arg-type]
        self.request_ids.append(response.headers["x-request-id"])
        self.refused += response.status_code == 429
        return response

    async def token(self) -> None:
        auth = (self.server.credential("client id"), self.server.credential("client secret"))
        data = {"grant_type": "client_credentials"}
        answer = await self.call("POST", "/oauth2/token", data=data, auth=auth)
        self.bearer = {"Authorization": f"Bearer {answer.json()['access_token']}"}

    async def read(self) -> int:
        return (await self.call("GET", "/deals/v1/deals", headers=self.bearer)).status_code

    async def create(self) -> int:
        answer = await self.call("POST", "/deals/v1/deals", json={}, headers=self.bearer)
        return answer.status_code

    async def endpoints(self) -> int:
        answer = await self.call("GET", ENDPOINTS, headers=self.bearer)
        return answer.status_code

    async def refusal(self) -> None:
        """Wrong secrets until the token failures' limit (2 a minute) refuses one."""
        auth = (self.server.credential("client id"), "wrong")
        for _ in range(6):  # a new minute may start meanwhile
            data = {"grant_type": "client_credentials"}
            answer = await self.call("POST", "/oauth2/token", data=data, auth=auth)
            if answer.status_code == 429:
                return
            assert answer.status_code == 401, answer.text
        raise AssertionError("no 429 after six wrong secrets")


async def _wait(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.05)


async def _exhaust_once_then_use(server: Server, pg: str) -> None:
    observer = create_engine(pg, pool_size=2)

    async def refusals_written() -> int:
        async with observer.connect() as conn:
            return int(
                await conn.scalar(text("SELECT coalesce(sum(count), 0) FROM rate_limit_refusals"))
            )

    async def requests_written() -> set[str]:
        async with observer.connect() as conn:
            return set((await conn.scalars(text("SELECT request_id FROM api_requests"))).all())

    async def waiting_on_the_lock() -> int:
        async with observer.connect() as conn:
            query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            return int(await conn.scalar(text(query)))

    async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
        client = _Client(server, http)
        await client.token()
        assert await client.read() == 200
        try:
            # A refusal, written by the tally's flush: the next flush is REFUSALS_FLUSH away.
            await client.refusal()
            await _wait(lambda: _equal(refusals_written, client.refused), 10, "the first flush")
            flushed = time.monotonic()
            await client.refusal()  # pending when the pool is full

            async with observer.connect() as locker:
                await locker.execute(text("LOCK TABLE webhook_endpoints IN ACCESS EXCLUSIVE MODE"))
                # Lists of endpoints read on pooled connections (the deals' reads and writes
                # have connections of their own, core.fastpath.statements), and wait for the lock with them.
                held = [asyncio.create_task(client.endpoints()) for _ in range(2)]
                await _wait(lambda: _at_least(waiting_on_the_lock, 2), 5, "the pool held")
                # Answered 503 after the pool's timeout, and pending in the request log.
                assert [await client.endpoints() for _ in range(2)] == [503, 503]
                # Past the tally's next flush and its wait for a connection.
                await asyncio.sleep(
                    flushed + REFUSALS_FLUSH + POOL_TIMEOUT + 1.5 - time.monotonic()
                )
                await locker.rollback()
            assert await asyncio.gather(*held) == [200, 200]

            # Then used normally: every request is recorded, every refusal counted.
            for _ in range(10):
                assert await client.create() == 201
                assert await client.read() == 200
                assert await client.endpoints() == 200
            await client.refusal()
            ready = (await http.get("/readyz")).json()
            assert ready["restarting"] == []
            # Written within the tally's flush period (the request log's is shorter).
            deadline = time.monotonic() + REFUSALS_FLUSH + 5
            while time.monotonic() < deadline and (
                await refusals_written() != client.refused
                or not set(client.request_ids) <= await requests_written()
            ):
                await asyncio.sleep(0.1)
            missing = set(client.request_ids) - await requests_written()
            answered = len(client.request_ids)
            assert not missing, f"{len(missing)} of {answered} requests not in the request log"
            counted = await refusals_written()
            assert counted == client.refused, f"{counted} of {client.refused} refusals counted"
        finally:
            await observer.dispose()


async def _equal(read, expected: int) -> bool:  # type: ignore[no-untyped-def]
    return await read() == expected


async def _at_least(read, expected: int) -> bool:  # type: ignore[no-untyped-def]
    return await read() >= expected
