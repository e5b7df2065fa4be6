"""Load shedding: a full database pool answers 503 with Retry-After after a bounded wait, the
concurrency cap answers 503 at once, and the health checks answer within a second meanwhile."""

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import text

from dealbroker.core.concurrency import ConcurrencyLimitMiddleware
from dealbroker.core.db import create_engine
from tests.conftest import BACKENDS, database_url
from tests.processes import Server, drop_database

POOL_TIMEOUT = 1.0


@pytest.fixture
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if "postgresql" not in BACKENDS:
        pytest.skip("postgresql is not among the test backends")
    url = database_url("postgresql", tmp_path_factory.mktemp("shed"), "shed")
    yield url
    drop_database(url)


async def _timed(
    client: httpx.AsyncClient, path: str, **kwargs: dict[str, str]
) -> tuple[float, httpx.Response]:
    started = time.monotonic()
    response = await client.get(path, **kwargs)
    return time.monotonic() - started, response


@pytest.mark.server
def test_a_full_pool_answers_503_fast_and_readyz_still_answers(pg, tmp_path):
    """Pool of 2, cap of 10, 40 requests at once, each stuck on a table lock the test holds:
    2 take the connections, 8 wait for one and get 503 after the pool timeout, 30 are refused
    at once by the cap; never a 500. /readyz and /ping answer within a second throughout."""
    server = Server(
        pg,
        tmp_path,
        DEALBROKER_DB_POOL_SIZE="2",
        DEALBROKER_DB_POOL_TIMEOUT_SECONDS=str(POOL_TIMEOUT),
        DEALBROKER_MAX_REQUESTS_IN_FLIGHT="10",
    )
    try:
        asyncio.run(_load(server, pg))
    finally:
        server.stop()
    assert "Traceback" not in server.output()


async def _load(server: Server, pg: str) -> None:
    limits = httpx.Limits(max_connections=100)
    async with httpx.AsyncClient(base_url=server.base, timeout=20, limits=limits) as client:
        token = (
            await client.post(
                "/oauth2/token",
                data={"grant_type": "client_credentials"},
                auth=(server.credential("client id"), server.credential("client secret")),
            )
        ).json()["access_token"]
        bearer = {"Authorization": f"Bearer {token}"}
        assert (await client.get("/deals/v1/deals", headers=bearer)).status_code == 200

        locker = create_engine(pg, pool_size=1)
        try:
            async with locker.connect() as conn:
                # Every read of deals now waits, holding its pooled connection.
                await conn.execute(text("LOCK TABLE deals IN ACCESS EXCLUSIVE MODE"))
                load = [
                    asyncio.create_task(_timed(client, "/deals/v1/deals", headers=bearer))
                    for _ in range(40)
                ]
                probes: list[tuple[str, float, int]] = []
                deadline = time.monotonic() + POOL_TIMEOUT + 10
                while sum(task.done() for task in load) < 38 and time.monotonic() < deadline:
                    for path in ("/readyz", "/ping"):
                        elapsed, response = await _timed(client, path)
                        probes.append((path, elapsed, response.status_code))
                    await asyncio.sleep(0.1)
                await conn.rollback()  # the lock goes: the two holding a connection finish
            answers = await asyncio.gather(*load)
        finally:
            await locker.dispose()

    statuses = sorted(response.status_code for _, response in answers)
    assert 500 not in statuses
    assert statuses == [200] * 2 + [503] * 38, statuses
    for elapsed, response in answers:
        if response.status_code != 503:
            continue
        assert response.headers["retry-after"] == "1"
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"].endswith("/service-unavailable")
        assert elapsed < POOL_TIMEOUT + 3, elapsed
    refused_at_once = [e for e, r in answers if r.status_code == 503 and e < POOL_TIMEOUT * 0.8]
    assert len(refused_at_once) >= 30  # the cap's, without waiting for the pool
    assert probes, "no health check ran while the load did"
    assert all(status == 200 for _, _, status in probes), probes
    assert max(elapsed for _, elapsed, _ in probes) < 1.0, probes


async def test_the_cap_refuses_past_its_count_at_once_and_lets_health_checks_through():
    """Requests above the cap get 503 problem+json with Retry-After without reaching the app;
    the health paths pass whatever the count; a finished request frees its place."""
    release = asyncio.Event()
    entered = 0

    async def slow_app(scope, receive, send):
        nonlocal entered
        entered += 1
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    cap = ConcurrencyLimitMiddleware(slow_app, max_in_flight=3)
    transport = httpx.ASGITransport(app=cap)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        held = [asyncio.create_task(client.get("/deals/v1/deals")) for _ in range(3)]
        while entered < 3:
            await asyncio.sleep(0.01)
        refused = await asyncio.wait_for(client.get("/deals/v1/deals"), 1)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["status"] == 503
        health = asyncio.create_task(client.get("/readyz"))
        while entered < 4:  # the health check reached the app past the cap
            await asyncio.sleep(0.01)
        release.set()
        assert [r.status_code for r in await asyncio.gather(*held, health)] == [200] * 4
        assert cap.in_flight == 0
        assert (await client.get("/deals/v1/deals")).status_code == 200
