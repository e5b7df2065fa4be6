"""The API's request log (``integrations.request_log``): each integration's requests with their
route template, status and request id, listed to that integration only; a request with a
made-up token or client id is no one's; the buffer is bounded and written at a real server's
shutdown."""

import asyncio
import json
import logging
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from dealbroker.app import create_app
from dealbroker.core import callers
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.request_log import RequestLogMiddleware
from dealbroker.integrations import request_log
from dealbroker.integrations.models import ApiRequest
from tests.conftest import BACKENDS, advance_clock, create_deal, database_url, make_settings
from tests.processes import Server, cli, drop_database

TOKEN_FORM = {"grant_type": "client_credentials"}


@pytest.fixture
async def app(db_url, engine):
    """The app, its buffer written only when a test says so (or at its shutdown)."""
    application = create_app(make_settings(db_url, api_request_log_flush_seconds=3600), engine)
    async with application.router.lifespan_context(application):
        yield application


async def listed(client, caller, **params) -> list[dict]:
    response = await client.get("/integrations/v1/requests", params=params, headers=caller.headers)
    assert response.status_code == 200, response.text
    return response.json()["items"]


async def test_requests_are_listed_with_their_route_status_and_request_id(
    app, client, caller, other, sessionmaker
):
    deal = await create_deal(client, caller)
    got = await client.get(
        f"/deals/v1/deals/{deal['id']}?secret=query",
        headers={**caller.headers, "X-Request-Id": "r-1"},
    )
    assert got.status_code == 200
    missing = await client.get(f"/deals/v1/deals/{uuid.uuid4()}", headers=caller.headers)
    assert missing.status_code == 404
    malformed = await client.get("/deals/v1/deals/not-an-id", headers=caller.headers)
    assert malformed.status_code == 400
    await client.get("/deals/v1/deals", headers=other.headers)
    made_up = await client.get("/deals/v1/deals", headers={"Authorization": "Bearer made-up"})
    assert made_up.status_code == 401
    wrong_secret = await client.post("/oauth2/token", data=TOKEN_FORM, auth=(caller.client_id, "x"))
    assert wrong_secret.status_code == 401
    await client.post("/oauth2/token", data=TOKEN_FORM, auth=("dbc_made_up", "x"))
    await app.state.api_requests.flush(sessionmaker)

    mine = await listed(client, caller)
    newest = [(r["method"], r["route"], r["status"]) for r in mine]
    assert newest == [
        ("POST", "/oauth2/token", 401),
        ("GET", "/deals/v1/deals/{dealId}", 400),
        ("GET", "/deals/v1/deals/{dealId}", 404),
        ("GET", "/deals/v1/deals/{dealId}", 200),
        ("POST", "/deals/v1/deals", 201),
        ("POST", "/oauth2/token", 200),  # the token the caller got
    ]
    by_status = {r["status"]: r for r in mine if r["route"] == "/deals/v1/deals/{dealId}"}
    assert by_status[200]["requestId"] == "r-1"
    assert by_status[200]["dealId"] == deal["id"]
    assert by_status[404]["requestId"] == missing.headers["x-request-id"]
    assert by_status[404]["requestId"] == missing.json()["requestId"]
    assert "dealId" not in by_status[400]  # not an id: the route alone says it
    assert all(r["durationMs"] > 0 and r["at"].endswith("Z") for r in mine)
    assert not any("secret" in str(r) for r in mine)  # no query string

    theirs = await listed(client, other)
    assert [(r["route"], r["status"]) for r in theirs] == [
        ("/deals/v1/deals", 200),
        ("/oauth2/token", 200),
    ]
    async with sessionmaker() as session:
        owners = set(await session.scalars(select(ApiRequest.integration_id)))
    assert owners == {caller.integration_id, other.integration_id}  # the made-up ones: no one's


async def test_the_list_filters_by_status_class_and_route_and_pages(
    app, client, caller, sessionmaker
):
    deal = await create_deal(client, caller)
    for _ in range(3):
        await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)
    await client.get(f"/deals/v1/deals/{uuid.uuid4()}", headers=caller.headers)
    await app.state.api_requests.flush(sessionmaker)

    failed = await listed(client, caller, status="4xx")
    assert [r["status"] for r in failed] == [404]
    reads = await listed(client, caller, route="/deals/v1/deals/{dealId}", status="2xx")
    assert [r["status"] for r in reads] == [200] * 3
    assert await listed(client, caller, status="5xx") == []
    response = await client.get(
        "/integrations/v1/requests",
        params={"route": "/deals/v1/deals/{dealId}", "pageSize": 3, "page": 2},
        headers=caller.headers,
    )
    assert response.json()["page"] == {
        "pageSize": 3,
        "pageNumber": 2,
        "totalPages": 2,
        "totalCount": 4,
    }
    assert [r["status"] for r in response.json()["items"]] == [200]  # the oldest read
    bad = await client.get(
        "/integrations/v1/requests", params={"status": "3xx"}, headers=caller.headers
    )
    assert bad.status_code == 400
    # A route holding U+0000, which PostgreSQL's text cannot hold: refused before any query.
    nul = await client.get(
        "/integrations/v1/requests", params={"route": "/deals\x00"}, headers=caller.headers
    )
    assert nul.status_code == 400, nul.text
    assert "route: Value error, must not contain the NUL character" in nul.json()["detail"]


async def test_a_sandbox_trigger_is_its_integrations(app, client, caller, sessionmaker):
    """The triggers authenticate with the webhook secret, not a token: still the caller's."""
    await advance_clock(client, caller, 60)
    await app.state.api_requests.flush(sessionmaker)
    assert [(r["method"], r["route"], r["status"]) for r in await listed(client, caller)] == [
        ("POST", "/sandbox/v1/clock/advance", 200),
        ("POST", "/oauth2/token", 200),
    ]


async def test_the_cli_lists_the_same_requests(app, client, caller, other, sessionmaker, db_url):
    await client.get(f"/deals/v1/deals/{uuid.uuid4()}", headers=caller.headers)
    await client.get("/deals/v1/deals", headers=caller.headers)
    await client.get("/deals/v1/deals", headers=other.headers)
    await app.state.api_requests.flush(sessionmaker)
    shown = await asyncio.to_thread(
        cli, db_url, "integrations", "requests", caller.client_id, "--status", "4xx"
    )
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert lines == await listed(client, caller, status="4xx")
    assert [(r["route"], r["status"]) for r in lines] == [("/deals/v1/deals/{dealId}", 404)]
    every = await asyncio.to_thread(cli, db_url, "integrations", "requests", caller.client_id)
    assert len(every.stdout.splitlines()) == 3  # the token's, the 404, the list
    unknown = await asyncio.to_thread(cli, db_url, "integrations", "requests", "dbc_unknown")
    assert unknown.returncode == 1
    assert "No integration with client id 'dbc_unknown'" in unknown.stderr


async def test_a_full_buffer_drops_counts_and_says_so(sessionmaker, caplog):
    log = request_log.RequestLog(max_pending=2)
    for n in range(3):
        log.note(("dbc_nobody", 0.0, "GET", "/ping", None, 200, f"r{n}", 1))
    with caplog.at_level(logging.WARNING, logger="dealbroker.http"):
        await log.flush(sessionmaker)
    assert "1 api requests dropped: the buffer was full" in caplog.text


@pytest.mark.server
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_real_server_writes_what_it_holds_when_it_stops(backend: str, tmp_path: Path) -> None:
    """Flushed only at shutdown (the interval is an hour): SIGTERM, then the rows are there."""
    db_url = database_url(backend, tmp_path, "request_log")
    server = Server(db_url, tmp_path, DEALBROKER_API_REQUEST_LOG_FLUSH_SECONDS="3600")
    try:
        auth = (server.credential("client id"), server.credential("client secret"))
        with httpx.Client(base_url=server.base, timeout=20) as http:
            token = http.post("/oauth2/token", data=TOKEN_FORM, auth=auth).json()["access_token"]
            headers = {"Authorization": f"Bearer {token}"}
            ids = [http.get("/deals/v1/deals", headers=headers).headers["x-request-id"]]
            ids.append(
                http.get(f"/deals/v1/deals/{uuid.uuid4()}", headers=headers).headers["x-request-id"]
            )
    finally:
        server.stop()

    async def rows() -> list[tuple[str, str, int]]:
        engine = create_engine(db_url, pool_size=1)
        try:
            async with create_sessionmaker(engine)() as session:
                found = await session.scalars(select(ApiRequest).order_by(ApiRequest.seq))
                return [(r.route, r.request_id, r.status) for r in found]
        finally:
            await engine.dispose()

    try:
        found = asyncio.run(rows())
    finally:
        if backend == "postgresql":
            drop_database(db_url)
    assert [(route, status) for route, _, status in found] == [
        ("/oauth2/token", 200),
        ("/deals/v1/deals", 200),
        ("/deals/v1/deals/{dealId}", 404),
    ]
    assert [rid for _, rid, _ in found[1:]] == ids


async def test_the_status_recorded_is_the_answers_behind_the_request_log_and_alone() -> None:
    # Behind the request log's middleware (as in the app) the status is read from its note of
    # the answer; around an app alone, from the answer itself.
    integration_id = uuid.uuid4()

    async def answer(scope, receive, send) -> None:
        callers.identify(scope, integration_id)
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def call(app) -> None:
        scope = {"type": "http", "method": "GET", "path": "/x", "headers": [], "state": {}}
        scope["headers"] = [(b"x-request-id", b"r-7")]

        async def receive() -> dict:
            return {"type": "http.request", "body": b""}

        async def send(message) -> None:
            pass

        await app(scope, receive, send)

    behind = request_log.RequestLog()
    await call(RequestLogMiddleware(request_log.RecordRequests(answer, behind)))
    alone = request_log.RequestLog()
    await call(request_log.RecordRequests(answer, alone))
    assert [(e[0], e[5], e[6]) for e in behind._pending] == [(integration_id, 404, "r-7")]
    assert [(e[0], e[5], e[6]) for e in alone._pending] == [(integration_id, 404, "")]
