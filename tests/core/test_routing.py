"""The application's routes are its own, not included routers: each request is matched as a
bare FastAPI app matches (``core.routing``), the health checks first."""

import contextlib
import uuid
from collections.abc import Iterator

import fastapi.routing
import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute, request_response

from dealbroker.app import create_app
from dealbroker.core import routing
from tests.conftest import BASE_URL, create_deal, make_caller, make_settings


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
        routing.include(FastAPI(), outer)


# --- routes solved directly (``routing.DirectRoute``) ---------------------------------------

DIRECT = {
    ("GET", "/ping"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/deals/v1/deals"),
    ("GET", "/deals/v1/deals/{dealId}"),
    ("GET", "/deals/v1/lifecycle"),
}


def _direct(app: FastAPI) -> list[APIRoute]:
    return [
        r
        for r in app.router.routes
        if isinstance(r, routing.DirectRoute) and routing._steps(r.dependant) is not None
    ]


def test_the_health_checks_and_the_deal_reads_are_solved_directly(tmp_path):
    app = create_app(make_settings(f"sqlite+aiosqlite:///{tmp_path}/r.db"))
    solved = {(m, r.path) for r in _direct(app) for m in r.methods}
    assert solved == DIRECT
    # A route with a body is FastAPI's, whichever its route class.
    create = next(r for r in app.router.routes if getattr(r, "name", "") == "create_deal")
    assert isinstance(create, routing.DirectRoute)
    assert routing._steps(create.dependant) is None


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
    # FastAPI's solver for a request whose parameters fail validation, and for no other.
    invalid = ("not-a-uuid", "%00", "page=0", "page=x", "pageSize=0", "page=1000001", "page=&")
    for (path, _), (response, solver) in zip(requests, direct, strict=True):
        assert solver == any(bad in path for bad in invalid), (path, response.status_code)
    with fastapi_handlers(app):
        by_fastapi = [await answer(i, path, headers) for i, (path, headers) in enumerate(requests)]
    assert all(solver for _, solver in by_fastapi)  # the comparison is with FastAPI's handler
    for (path, headers), (one, _), (two, _) in zip(requests, direct, by_fastapi, strict=True):
        assert _comparable(one) == _comparable(two), (path, headers)


async def test_a_request_that_fails_validation_is_counted_once(db_url, engine, sessionmaker):
    """A request whose parameters do not validate is handed to FastAPI's handler before any
    dependency ran: the token check counts it against the rate limit once, not twice."""
    app = create_app(make_settings(db_url, rate_limit_requests_per_minute=3), engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            caller = await make_caller(client, sessionmaker)
            statuses = [
                (await client.get("/deals/v1/deals?page=0", headers=caller.headers)).status_code
                for _ in range(3)
            ]
            assert statuses == [400, 400, 400]
            refused = await client.get("/deals/v1/deals", headers=caller.headers)
            assert refused.status_code == 429
