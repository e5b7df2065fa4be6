"""The application's routes are its own, not included routers: each request is matched as a
bare FastAPI app matches (``core.fastpath.routes``), the health checks first."""

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Annotated

import fastapi.routing
import httpx
import pytest
from fastapi import APIRouter, Cookie, Depends, FastAPI, Form, Response
from fastapi.routing import APIRoute, request_response

from dealbroker.app import create_app
from dealbroker.core.fastpath import routes as fast_routes
from tests.conftest import BASE_URL, SELLER, create_deal, make_caller, make_settings

# What these tests check is the fast paths (``core.fastpath``): on, whatever the environment.
pytestmark = pytest.mark.usefixtures("fast_paths_on")


def test_the_app_holds_its_routes_itself_the_health_checks_first(tmp_path):
    app = create_app(make_settings(f"sqlite+aiosqlite:///{tmp_path}/r.db"))
    api = [r for r in app.router.routes if isinstance(r, APIRoute)]
    # No router is left as a branch that every request would walk.
    assert all(type(r).__name__ != "_IncludedRouter" for r in app.router.routes)
    paths = [r.path for r in api]
    assert paths.index("/healthz") < paths.index("/oauth2/token") < paths.index("/deals/v1/deals")
    assert "/back-office/login" in paths


def test_a_nested_router_is_refused():
    outer, inner = APIRouter(), APIRouter()

    @inner.get("/x")
    async def x() -> None:
        return None

    outer.include_router(inner)
    with pytest.raises(TypeError, match="flattened"):
        fast_routes.include(FastAPI(), outer)


# --- routes solved directly (``routes.DirectRoute``) ---------------------------------------

DIRECT = {
    ("GET", "/ping"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/deals/v1/deals"),
    ("POST", "/deals/v1/deals"),
    ("GET", "/deals/v1/deals/{dealId}"),
    ("POST", "/deals/v1/deals/{dealId}/status"),
    ("POST", "/deals/{dealId}/status"),
    ("POST", "/deals/v1/deals/{dealId}/shipment-events"),
    ("GET", "/deals/v1/lifecycle"),
}


def _direct(app: FastAPI) -> list[APIRoute]:
    return [
        r
        for r in app.router.routes
        if isinstance(r, fast_routes.DirectRoute) and fast_routes._steps(r.dependant) is not None
    ]


def test_the_health_checks_and_the_deal_routes_are_solved_directly(tmp_path):
    app = create_app(make_settings(f"sqlite+aiosqlite:///{tmp_path}/r.db"))
    solved = {(m, r.path) for r in _direct(app) for m in r.methods}
    assert solved == DIRECT


def test_what_a_direct_route_cannot_solve_is_fastapis():
    """A form, a cookie, a generator left after the response (the request's scope) or a plain
    function: FastAPI's handler, whichever the route class."""
    router = APIRouter(route_class=fast_routes.DirectRoute)

    async def request_scoped() -> AsyncIterator[int]:
        yield 1

    def plain() -> int:
        return 1

    @router.post("/form")
    async def form(name: Annotated[str, Form()]) -> Response:
        return Response(name)

    @router.get("/cookie")
    async def cookie(session: Annotated[str, Cookie()]) -> Response:
        return Response(session)

    @router.get("/request-scoped")
    async def scoped(one: Annotated[int, Depends(request_scoped)]) -> Response:
        return Response(str(one))

    @router.get("/plain")
    async def in_thread(one: Annotated[int, Depends(plain)]) -> Response:
        return Response(str(one))

    @router.get("/function-scoped")
    async def function_scoped(
        one: Annotated[int, Depends(request_scoped, scope="function")],
    ) -> Response:
        return Response(str(one))

    steps = {r.path: fast_routes._steps(r.dependant) for r in router.routes}  # type: ignore[attr-defined]
    assert [p for p, s in steps.items() if s is not None] == ["/function-scoped"]


@contextlib.contextmanager
def fastapi_handlers(app: FastAPI) -> Iterator[None]:
    """Every direct route of ``app`` answered by FastAPI's own request handler meanwhile (the
    routes are the modules' own objects: put back at the end)."""
    swapped = [(r, r.app) for r in _direct(app)]
    for route, _ in swapped:
        route.app = request_response(APIRoute.get_route_handler(route))
    try:
        yield
    finally:
        for route, direct in swapped:
            route.app = direct


@pytest.fixture
def solver_calls(monkeypatch) -> list[str]:
    """The paths of the requests FastAPI's dependency solver was called for."""
    calls: list[str] = []
    original = fastapi.routing.solve_dependencies

    async def counted(*, request, **kwargs):
        calls.append(request.url.path)
        return await original(request=request, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    return calls


def _comparable(response: httpx.Response) -> tuple[int, bytes, dict[str, str]]:
    headers = {k: v for k, v in response.headers.items() if k != "date"}
    return response.status_code, response.content, headers


async def test_a_direct_route_answers_every_request_as_fastapi_does(
    client, app, caller, other, solver_calls
):
    """The same requests, answered directly and by FastAPI's handler: the same status, body
    and headers, valid or not (a malformed id or page, no token, a wrong one, another
    integration's deal, a stale or current ETag). Valid ones never reach FastAPI's solver;
    those that fail validation are FastAPI's from the start."""
    mine = (await create_deal(client, caller, name="Lamp"))["id"]
    theirs = (await create_deal(client, other, name="Chair"))["id"]
    etag = (await client.get("/deals/v1/lifecycle", headers=caller.headers)).headers["etag"]
    tokens = {
        "none": {},
        "wrong": {"Authorization": "Bearer nope"},
        "basic": {"Authorization": "Basic eDp5"},
        "good": caller.headers,
    }
    requests: list[tuple[str, dict[str, str]]] = []
    for headers in tokens.values():
        for deal_id in (mine, theirs, str(uuid.uuid4()), "not-a-uuid", mine.upper(), "%00"):
            requests.append((f"/deals/v1/deals/{deal_id}", headers))
        for query in (
            "",
            "?page=1",
            "?page=2&pageSize=1",
            "?page=0",
            "?page=x",
            "?pageSize=101",
            "?pageSize=0",
            "?page=1000001",
            "?page=&pageSize=",
            "?page=1&page=2",
            "?other=1",
            "?page=-3&pageSize=abc",
            "?page=" + "9" * 5000,
            "?pageSize=1.5",
        ):
            requests.append((f"/deals/v1/deals{query}", headers))
        for tag in (None, etag, '"stale"', "*", f"W/{etag}"):
            requests.append(
                ("/deals/v1/lifecycle", {**headers, **({"If-None-Match": tag} if tag else {})})
            )
        requests.append(("/healthz", headers))

    async def answer(i: int, path: str, headers: dict[str, str]) -> tuple[httpx.Response, bool]:
        before = len(solver_calls)
        # The client's request id, the same in both runs: problem bodies carry it.
        response = await client.get(path, headers={**headers, "X-Request-Id": f"r{i}"})
        return response, len(solver_calls) > before

    direct = [await answer(i, path, headers) for i, (path, headers) in enumerate(requests)]
    statuses = {response.status_code for response, _ in direct}
    assert statuses >= {200, 304, 400, 401, 404}
    # FastAPI's solver for a request whose parameters fail validation, and for no other (page
    # parameters never do: they are read as the nearest valid page).
    invalid = ("not-a-uuid", "%00")
    for (path, _), (response, solver) in zip(requests, direct, strict=True):
        assert solver == any(bad in path for bad in invalid), (path, response.status_code)
    with fastapi_handlers(app):
        by_fastapi = [await answer(i, path, headers) for i, (path, headers) in enumerate(requests)]
    assert all(solver for _, solver in by_fastapi)  # the comparison is with FastAPI's handler
    for (path, headers), (one, _), (two, _) in zip(requests, direct, by_fastapi, strict=True):
        assert _comparable(one) == _comparable(two), (path, headers)


def _bodies() -> list[tuple[str, bytes]]:
    """Create bodies, each with the content type it is sent with: valid and not, JSON that
    Python's decoder reads and others do not (a number past 64 bits, ``NaN``, a lone
    surrogate), and bodies that are not JSON at all."""
    good = {"name": "Road bike", "price": 4500.5, "seller": SELLER, "packageType": "Large"}
    json_bodies = [
        json.dumps(good).encode(),
        b"{}",
        json.dumps({"images": ["https://cdn.example.com/1.jpg"], "seller": {**SELLER}}).encode(),
        b'{"name": "Lamp", "name": "Chair"}',
        b'{"price": 123456789012345678901234567890}',
        b'{"price": 1e400}',
        b'{"price": NaN}',
        b'{"price": "12.5"}',
        b'{"price": 12.345}',
        b'{"name": "\\ud800"}',
        b'{"name": "a\\u0000b"}',
        b'{"name": "' + b"x" * 300 + b'"}',
        b'{"packageType": "Huge"}',
        b'{"images": ["ftp://example.com/1.jpg"]}',
        b'{"seller": {"email": "not an address"}}',
        b'{"unknown": 1}',
        b"\xef\xbb\xbf{}",
        b'{"name": "\xff"}',
        b"[]",
        b"null",
        b"{",
        b"",
        b"   ",
    ]
    sent = [("application/json", body) for body in json_bodies]
    for content_type in ("application/json; charset=utf-8", "text/plain", ""):
        sent += [(content_type, json_bodies[0]), (content_type, b"{")]
    return sent


async def test_a_direct_route_takes_a_body_as_fastapi_does(
    client, app, caller, other, solver_calls, frozen_clock
):
    """The create, the status change and the carrier event sent the same requests, answered
    directly for one integration and by FastAPI's handler for another (each with a deal of its
    own, so a change made in one run is made in the other): the same status, body and headers,
    the new deals' ids and links aside. A valid body declared ``application/json`` never
    reaches FastAPI's solver; any other is FastAPI's from the start."""
    tokens = {"none": {}, "wrong": {"Authorization": "Bearer nope"}}
    requests: list[tuple[str, str, dict[str, str], bytes, bool]] = []
    for i, (content_type, body) in enumerate(_bodies()):
        typed = {"Content-Type": content_type} if content_type else {}
        direct = content_type == "application/json" and body.strip() != b""
        requests.append(("/deals/v1/deals", "good", typed, body, direct))
        if i < 3:
            for token in tokens:
                requests.append(("/deals/v1/deals", token, typed, body, direct))
            key = {"Idempotency-Key": f"key-{i}"}
            for _ in range(2):  # the second is the first's answer, replayed
                requests.append(("/deals/v1/deals", "good", {**typed, **key}, body, direct))
    as_json = {"Content-Type": "application/json"}
    for body in (b'{"status": "Shipping_Pending"}', b'{"status": "Nope"}', b'{"status": 1}'):
        for path in ("/deals/v1/deals/{deal}/status", "/deals/{deal}/status"):
            requests.append((path, "good", as_json, body, True))
        requests.append(("/deals/v1/deals/not-a-uuid/status", "good", as_json, body, False))
    event = {"type": "delivered", "carrier": "Posten", "occurredAt": 1795000000000}
    for body in (json.dumps(event).encode(), b'{"type": "lost"}'):
        requests.append(("/deals/v1/deals/{deal}/shipment-events", "good", as_json, body, True))
    requests.append(
        ("/deals/v1/deals/{deal}/status", "good", as_json, b'{"status": "Cancelled"}', True)
    )
    requests.append(
        ("/deals/v1/deals/{deal}/status", "good", as_json, b'{"status": "Cancelled"}', True)
    )

    async def run(who) -> list[tuple[httpx.Response, bool, list[str]]]:
        deal = (await create_deal(client, who, name="Lamp"))["id"]
        answers = []
        for i, (path, token, headers, body, _) in enumerate(requests):
            sent = {**(who.headers if token == "good" else tokens[token]), **headers}
            before = len(solver_calls)
            response = await client.post(
                path.format(deal=deal), content=body, headers={**sent, "X-Request-Id": f"r{i}"}
            )
            answers.append((response, len(solver_calls) > before, [deal]))
        return answers

    direct = await run(caller)
    with fastapi_handlers(app):
        by_fastapi = await run(other)
    statuses = {response.status_code for response, _, _ in direct}
    # Create deal answers every body that is not JSON with its 405 "Invalid input" (the
    # interface lists no 400 or 415 for it).
    assert statuses >= {200, 201, 400, 401, 405, 409}, statuses
    assert not any(
        r.status_code in (400, 415)
        for (path, *_), (r, _, _) in zip(requests, direct, strict=True)
        if path == "/deals/v1/deals"
    )
    for request, (one, solver, _), (two, fastapis, _) in zip(
        requests, direct, by_fastapi, strict=True
    ):
        # The comparison is with FastAPI's handler (which reads a body before its solver).
        assert fastapis or two.status_code in (400, 405), request
        if request[4] and one.status_code not in (400, 405):
            assert not solver, (request, one.status_code)
        assert _normalised(one, direct) == _normalised(two, by_fastapi), request


def _normalised(response: httpx.Response, run: list) -> tuple[int, bytes, dict[str, str]]:
    """``_comparable``, with the ids and management links of the run's deals as placeholders."""
    status, content, headers = _comparable(response)
    varying = {deal for _, _, deals in run for deal in deals}
    if status == 201:
        created = json.loads(content)
        varying |= {created["id"], created["url"]}
    text = content.decode("utf-8", "replace")
    for value in sorted(varying, key=len, reverse=True):
        text = text.replace(value, "<varies>")
        headers = {k: v.replace(value, "<varies>") for k, v in headers.items()}
    text = re.sub(r"/d/<varies>/[\w-]+", "/d/<varies>/<signed>", text)  # a deal's link
    headers.pop("content-length", None)
    return status, text.encode(), headers


async def test_a_request_that_fails_validation_is_counted_once(db_url, engine, sessionmaker):
    """A request whose parameters do not validate is handed to FastAPI's handler before any
    dependency ran: the token check counts it against the rate limit once, not twice."""
    app = create_app(make_settings(db_url, rate_limit_requests_per_minute=3), engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            caller = await make_caller(client, sessionmaker)
            statuses = [
                (await client.get("/deals/v1/deals/nope", headers=caller.headers)).status_code
                for _ in range(3)
            ]
            assert statuses == [400, 400, 400]
            refused = await client.get("/deals/v1/deals", headers=caller.headers)
            assert refused.status_code == 429
