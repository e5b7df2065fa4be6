"""Failed token requests: a guesser's burst is refused past the limit, counted as it arrives,
and cannot lock the client's owner out from another address."""

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from dealbroker.app import create_app
from dealbroker.core.ratelimit import WINDOW_SECONDS
from tests.conftest import BASE_URL, database_url, inside_one_window, make_caller, make_settings
from tests.processes import Server

FORM = {"grant_type": "client_credentials"}
ATTACKER = ("203.0.113.7", 40000)
OWNER = ("198.51.100.2", 40000)


@pytest.fixture
async def guarded(db_url, engine) -> AsyncIterator[FastAPI]:
    settings = make_settings(
        db_url,
        rate_limit_token_failures_per_minute=20,
        rate_limit_token_failures_per_client_per_minute=40,
    )
    app = create_app(settings, engine)
    async with app.router.lifespan_context(app):
        inside_one_window(20)  # every test here counts its failures within one minute
        yield app


def _client(app: FastAPI, address: tuple[str, int]) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, client=address), base_url=BASE_URL
    )


async def _at_once(
    client: httpx.AsyncClient, n: int, client_id: str, secret: str
) -> list[httpx.Response]:
    return await asyncio.gather(
        *(client.post("/oauth2/token", data=FORM, auth=(client_id, secret)) for _ in range(n))
    )


def _assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 429
    assert response.json()["error"] == "temporarily_unavailable"
    assert 1 <= int(response.headers["retry-after"]) <= WINDOW_SECONDS


async def test_a_burst_is_counted_as_it_arrives_and_cannot_stop_the_owner(guarded, sessionmaker):
    async with _client(guarded, OWNER) as owner, _client(guarded, ATTACKER) as attacker:
        caller = await make_caller(owner, sessionmaker)
        answers = await _at_once(attacker, 30, caller.client_id, "guess")
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [401] * 20 + [429] * 10  # counted before checked: no burst slips by
        for refused in (r for r in answers if r.status_code == 429):
            _assert_refused(refused)
        _assert_refused(
            await attacker.post(
                "/oauth2/token", data=FORM, auth=(caller.client_id, caller.client_secret)
            )
        )  # from the guesser's address even the right secret waits: a guess teaches nothing
        mine = await owner.post(
            "/oauth2/token", data=FORM, auth=(caller.client_id, caller.client_secret)
        )
        assert mine.status_code == 200, mine.text  # the owner, elsewhere, is not locked out
        unknown = await _at_once(attacker, 25, "dbc_unknown", "guess")
        assert sorted(r.status_code for r in unknown) == [401] * 20 + [429] * 5


async def test_many_addresses_meet_the_client_ceiling_but_not_a_known_owner(guarded, sessionmaker):
    """Guesses from many addresses stop at the per-client ceiling (40 here) for addresses
    that never got a token for that client; the owner's address, which did, goes on."""
    async with _client(guarded, OWNER) as owner:
        caller = await make_caller(owner, sessionmaker)
    for i in range(3):  # 3 addresses x 20 failures > 40
        async with _client(guarded, (f"203.0.113.{10 + i}", 40000)) as guesser:
            await _at_once(guesser, 20, caller.client_id, "guess")
    async with _client(guarded, ("203.0.113.99", 40000)) as newcomer:
        _assert_refused(
            await newcomer.post(
                "/oauth2/token", data=FORM, auth=(caller.client_id, caller.client_secret)
            )
        )
    async with _client(guarded, OWNER) as owner:
        mine = await owner.post(
            "/oauth2/token", data=FORM, auth=(caller.client_id, caller.client_secret)
        )
        assert mine.status_code == 200, mine.text


async def test_a_right_secret_is_not_counted_as_a_failure(guarded, sessionmaker):
    async with _client(guarded, OWNER) as owner:
        caller = await make_caller(owner, sessionmaker)
        for _ in range(3):  # 30 in all, more than the limit; 10 at a time, under it
            answers = await _at_once(owner, 10, caller.client_id, caller.client_secret)
            assert [r.status_code for r in answers] == [200] * 10


@pytest.mark.server
def test_a_real_server_refuses_a_burst_but_serves_the_owner_at_another_address(tmp_path):
    """``serve`` on loopback: 30 bad secrets at once from 127.0.0.1 get 20 x 401 and 10 x 429
    (all 401 before: each was checked before any failed); the owner at 127.0.0.2 gets its
    token."""
    server = Server(database_url("sqlite", tmp_path, "lockout"), tmp_path)
    client_id, secret = server.credential("client id"), server.credential("client secret")
    inside_one_window(20)

    async def run() -> tuple[list[httpx.Response], httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base, timeout=20) as attacker:
            burst = await _at_once(attacker, 30, client_id, "guess")
        owner_transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(
            base_url=server.base, timeout=20, transport=owner_transport
        ) as owner:
            mine = await owner.post("/oauth2/token", data=FORM, auth=(client_id, secret))
        return burst, mine

    try:
        burst, mine = asyncio.run(run())
    finally:
        server.stop()
    assert sorted(r.status_code for r in burst) == [401] * 20 + [429] * 10
    for refused in (r for r in burst if r.status_code == 429):
        _assert_refused(refused)
    assert mine.status_code == 200, mine.text
