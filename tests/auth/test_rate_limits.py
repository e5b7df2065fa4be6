"""Rate limits: requests per integration and failed token requests per client id, answered 429
with Retry-After; counted per process and shared between processes through PostgreSQL."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import event

from dealbroker.app import create_app
from dealbroker.core.db import create_engine
from dealbroker.core.ratelimit import IDLE_SECONDS, WINDOW_SECONDS, RateLimiter, block_size
from tests.conftest import (
    BACKENDS,
    BASE_URL,
    SELLER,
    database_url,
    inside_one_window,
    make_caller,
    make_settings,
)
from tests.processes import Server, drop_database


async def test_a_key_is_refused_at_its_limit_until_the_window_ends():
    limiter = RateLimiter()
    start = 1_000 * WINDOW_SECONDS + 0.5
    assert [await limiter.take("t", "a", 3, start) for _ in range(3)] == [None, None, None]
    # seconds to the next window
    assert await limiter.take("t", "a", 3, start + 10) == WINDOW_SECONDS - 10
    assert await limiter.take("t", "b", 3, start + 10) is None  # keys are counted apart
    assert await limiter.take("t", "a", 0, start + 10) is None  # 0: no limit
    assert await limiter.take("t", "a", 3, start + WINDOW_SECONDS) is None  # a new window


async def test_a_request_given_back_no_longer_counts():
    limiter = RateLimiter()
    assert await limiter.take("t", "a", 1, now=0) is None
    limiter.give_back("a")
    assert await limiter.take("t", "a", 1, now=0) is None
    assert await limiter.take("t", "a", 1, now=0) is not None


async def test_memory_is_bounded_by_dropping_the_least_recently_used_key():
    limiter = RateLimiter(max_keys=3)
    for key in ("a", "b", "a", "c", "d"):  # "b" is the least recently used when "d" comes
        await limiter.take("t", key, 10, now=0)
    assert await limiter.take("t", "a", 2, now=0) is not None
    assert await limiter.take("t", "b", 1, now=0) is None  # forgotten
    assert await limiter.take("t", "d", 1, now=0) is not None


async def test_a_long_key_is_counted_under_a_bounded_name():
    limiter = RateLimiter()
    long = "token-failures:" + "x" * 10_000
    assert await limiter.take("t", long, 1, now=0) is None
    assert await limiter.take("t", long, 1, now=0) is not None
    assert await limiter.take("t", long + "y", 1, now=0) is None
    assert all(len(key) <= 101 for key in limiter._budgets)


async def test_while_the_database_does_not_answer_a_process_counts_alone():
    closed = create_engine("postgresql+asyncpg://postgres@127.0.0.1:1/nothing", pool_size=1)
    limiter = RateLimiter(closed.execution_options(isolation_level="AUTOCOMMIT"))
    try:
        answers = [await limiter.take("t", "a", 3, now=0) for _ in range(4)]
    finally:
        await closed.dispose()
    assert answers[:3] == [None, None, None]
    assert answers[3] is not None


def _refusals(limit: str) -> float:
    return REGISTRY.get_sample_value("dealbroker_rate_limit_refusals_total", {"limit": limit}) or 0


@pytest.fixture
async def limited(db_url, engine) -> AsyncIterator[httpx.AsyncClient]:
    settings = make_settings(
        db_url, rate_limit_requests_per_minute=4, rate_limit_token_failures_per_minute=3
    )
    app = create_app(settings, engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield client


async def test_an_integration_over_its_limit_gets_429_with_retry_after(limited, sessionmaker):
    caller = await make_caller(limited, sessionmaker)
    other = await make_caller(limited, sessionmaker, "Other")
    refused_before = _refusals("api")
    statuses = [
        (await limited.get("/deals/v1/deals", headers=caller.headers)).status_code for _ in range(4)
    ]
    assert statuses == [200] * 4
    refused = await limited.post(
        "/deals/v1/deals",
        json={"name": "Bike", "price": 100, "seller": SELLER},
        headers=caller.headers,
    )
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert 1 <= int(refused.headers["retry-after"]) <= WINDOW_SECONDS
    assert refused.json()["type"].endswith("/rate-limited")
    assert _refusals("api") == refused_before + 1  # counted by limit, never by caller
    trigger = await limited.post(
        "/webhooks/v1/dealStatus",
        json={"dealId": "9b2f6c1e-3d4a-4f5b-8c6d-7e8f9a0b1c2d", "status": "Cancelled"},
        headers={"webhook-secret": caller.webhook_secret},
    )
    assert trigger.status_code == 429  # the sandbox triggers count towards the same limit
    assert (await limited.get("/deals/v1/deals", headers=other.headers)).status_code == 200
    assert (await limited.get("/ping")).status_code == 200  # no credential, no limit


async def test_failed_token_requests_are_limited_per_client_id(limited, sessionmaker):
    caller = await make_caller(limited, sessionmaker)  # one successful request: not counted
    form = {"grant_type": "client_credentials"}
    wrong = [
        (
            await limited.post("/oauth2/token", data=form, auth=(caller.client_id, "guess"))
        ).status_code
        for _ in range(3)
    ]
    assert wrong == [401, 401, 401]
    refused = await limited.post(
        "/oauth2/token", data=form, auth=(caller.client_id, caller.client_secret)
    )
    assert refused.status_code == 429  # even the right secret: a guess now would teach nothing
    assert refused.json()["error"] == "temporarily_unavailable"
    assert 1 <= int(refused.headers["retry-after"]) <= WINDOW_SECONDS
    for _ in range(5):  # an unknown client id is counted as a known one
        unknown = await limited.post("/oauth2/token", data=form, auth=("dbc_unknown", "guess"))
    assert unknown.status_code == 429
    other = await make_caller(limited, sessionmaker, "Other")
    assert other.token  # another client id is not affected


async def test_the_document_states_the_429s(limited):
    spec = (await limited.get("/openapi.json")).json()
    listed = spec["paths"]["/deals/v1/deals"]["get"]["responses"]["429"]
    assert listed["headers"]["Retry-After"] == {"$ref": "#/components/headers/RetryAfter"}
    assert "429" in spec["paths"]["/oauth2/token"]["post"]["responses"]
    assert "429" in spec["paths"]["/webhooks/v1/dealStatus"]["post"]["responses"]
    assert "429" not in spec["paths"]["/ping"]["get"]["responses"]


@pytest.fixture
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if "postgresql" not in BACKENDS:
        pytest.skip("postgresql is not among the test backends")
    url = database_url("postgresql", tmp_path_factory.mktemp("ratelimit"), "ratelimit")
    yield url
    drop_database(url)


async def test_with_no_pooled_connection_free_a_claim_is_counted_here_not_refused(pg, caplog):
    """Every pooled connection busy (a full pool under load, or each one waiting on a hung
    database): a request needing a claim is counted in this process, as while the database
    does not answer, not a 503; the run is logged once, and its end."""
    engine = create_engine(pg, pool_size=1, pool_timeout=0.2)
    limiter = RateLimiter(engine.execution_options(isolation_level="AUTOCOMMIT"))
    now = time.time() // WINDOW_SECONDS * WINDOW_SECONDS + 1
    caplog.set_level(logging.WARNING, "dealbroker.ratelimit")
    try:
        async with engine.connect() as held:  # the pool's only connection
            await held.exec_driver_sql("SELECT 1")
            answers = [await limiter.take("api", "api:full", 3, now) for _ in range(4)]
        assert answers[:3] == [None, None, None]
        assert answers[3] is not None  # still the limit, counted here
        assert await limiter.take("api", "api:free", 3, now) is None  # a claim again
    finally:
        await engine.dispose()
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "claiming shared rate limits failed; counting in this process alone: no database connection free",
        messages[1],
    ], messages
    assert messages[1].startswith("claiming shared rate limits recovered after 2 failures")


async def test_two_processes_claiming_blocks_never_pass_the_limit_together(pg):
    """Two limiters on one PostgreSQL database, as two server processes: a burst of 400
    spread over both lets through at most the limit of 120, and no fewer than 10 % below it;
    the database is asked once per block (6 requests), not per request."""
    engine = create_engine(pg, pool_size=4).execution_options(isolation_level="AUTOCOMMIT")
    first, second = RateLimiter(engine), RateLimiter(engine)
    now = time.time() // WINDOW_SECONDS * WINDOW_SECONDS + 1  # one window's
    claims = 0

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def count(*_: object) -> None:
        nonlocal claims
        claims += 1

    try:
        answers = await asyncio.gather(
            *((first if i % 2 else second).take("api", "api:burst", 120, now) for i in range(400))
        )
        let_through = answers.count(None)
        assert 108 <= let_through <= 120, let_through
        assert claims <= 120 // block_size(120) + 4, claims  # about one a block
        # A key idle for a second gives its unused units back for the other process to use.
        assert await first.take("api", "api:idle", 120, now) is None
        await first.sync(now + IDLE_SECONDS)
        let_through = [await second.take("api", "api:idle", 120, now) for _ in range(120)]
        assert let_through.count(None) == 119
    finally:
        await engine.dispose()


@pytest.mark.server
def test_a_burst_over_two_server_processes_stays_within_the_limit(pg, tmp_path):
    """The issue's case: 400 requests at once to two ``serve`` processes on one PostgreSQL
    database against a limit of 120 a minute let through about 120 (240 before: each process
    counted alone between its syncs), the rest 429 with Retry-After.

    The limits count per fixed minute: the burst itself, not the servers' start (which took
    longer than the margin on a loaded machine, the burst then letting through a window's
    limit on each side of the minute), must fall inside one window."""
    limit = {"DEALBROKER_RATE_LIMIT_REQUESTS_PER_MINUTE": "120"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = Server(pg, tmp_path / "a", **limit)
    second = Server(pg, tmp_path / "b", **limit)
    try:
        token = httpx.post(
            f"{first.base}/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(first.credential("client id"), first.credential("client secret")),
        ).json()["access_token"]
        bearer = {"Authorization": f"Bearer {token}"}

        async def burst() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=80)
            async with httpx.AsyncClient(timeout=30, limits=limits, headers=bearer) as client:
                return await asyncio.gather(
                    *(
                        client.get(f"{(first, second)[i % 2].base}/deals/v1/deals")
                        for i in range(400)
                    )
                )

        # The burst took up to 33 s on a loaded machine.
        inside_one_window(50)
        window, started = time.time() // WINDOW_SECONDS, time.monotonic()
        answers = asyncio.run(burst())
        took = time.monotonic() - started
        assert time.time() // WINDOW_SECONDS == window, f"the burst straddled windows: {took:.0f} s"
        statuses = [r.status_code for r in answers]
        assert set(statuses) <= {200, 429}, statuses
        assert 108 <= statuses.count(200) <= 132, statuses.count(200)
        refused = next(r for r in answers if r.status_code == 429)
        assert 1 <= int(refused.headers["retry-after"]) <= WINDOW_SECONDS
    finally:
        first.stop()
        second.stop()
