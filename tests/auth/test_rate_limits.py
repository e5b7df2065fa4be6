"""Rate limits: requests per integration and failed token requests per client id, answered 429
with Retry-After; counted per process and shared between processes through PostgreSQL."""

import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from dealbroker.app import create_app
from dealbroker.core.ratelimit import WINDOW_SECONDS, RateLimiter
from tests.conftest import BASE_URL, SELLER, database_url, make_caller, make_settings
from tests.processes import Server, drop_database


def test_a_key_is_refused_at_its_limit_until_the_window_ends():
    limiter = RateLimiter()
    start = 1_000 * WINDOW_SECONDS + 0.5
    assert [limiter.take("a", 3, start) for _ in range(3)] == [None, None, None]
    assert limiter.take("a", 3, start + 10) == WINDOW_SECONDS - 10  # seconds to the next window
    assert limiter.take("b", 3, start + 10) is None  # keys are counted apart
    assert limiter.take("a", 0, start + 10) is None  # 0: no limit
    assert limiter.take("a", 3, start + WINDOW_SECONDS) is None  # a new window


def test_memory_is_bounded_by_dropping_the_least_recently_used_key():
    limiter = RateLimiter(max_keys=3)
    for key in ("a", "b", "a", "c", "d"):  # "b" is the least recently used when "d" comes
        limiter.hit(key, now=0)
    assert limiter.retry_after("a", 2, now=0) is not None
    assert limiter.retry_after("b", 1, now=0) is None  # forgotten
    assert limiter.retry_after("d", 1, now=0) is not None


def test_a_long_key_is_counted_under_a_bounded_name():
    limiter = RateLimiter()
    long = "token-failures:" + "x" * 10_000
    limiter.hit(long, now=0)
    assert limiter.retry_after(long, 1, now=0) is not None
    assert limiter.retry_after(long + "y", 1, now=0) is None
    assert all(len(key) <= 101 for key in limiter._counts)


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
    url = database_url("postgresql", tmp_path_factory.mktemp("ratelimit"), "ratelimit")
    yield url
    drop_database(url)


@pytest.mark.server
def test_the_limit_holds_across_two_server_processes(pg, tmp_path):
    """Two ``serve`` processes on one PostgreSQL database count one integration together: what
    one let through is refused by the other once they have synced (every second)."""
    if time.time() % WINDOW_SECONDS > WINDOW_SECONDS - 20:  # all of it inside one window
        time.sleep(WINDOW_SECONDS - time.time() % WINDOW_SECONDS + 0.1)
    limit = {"DEALBROKER_RATE_LIMIT_REQUESTS_PER_MINUTE": "20"}
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

        def statuses(server: Server, n: int) -> list[int]:
            return [
                httpx.get(f"{server.base}/deals/v1/deals", headers=bearer).status_code
                for _ in range(n)
            ]

        assert statuses(first, 10) == [200] * 10
        time.sleep(2.5)  # the first has shared its 10
        assert statuses(second, 1) == [200]
        time.sleep(2.5)  # the second has read the total: 11
        burst = statuses(second, 15)
        assert burst == [200] * 9 + [429] * 6
        time.sleep(2.5)  # the first has read the total: 20
        assert statuses(first, 1) == [429]
    finally:
        first.stop()
        second.stop()
