"""The fast paths (``core.fastpath``, ``DEALBROKER_FAST_PATHS``) answer as plain FastAPI and
SQLAlchemy do: two apps on one database, one taking them and one not, sent the same requests,
valid and not, answer the same status, headers that matter and body, byte for byte. A create
makes a new deal each time: its body is held equal but for the deal's own id, link and times.
``scripts/test`` runs this file, and the other parity files, with the setting off as well."""

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from dealbroker.app import create_app
from tests.conftest import BASE_URL, SELLER, Caller, create_deal, make_settings


@pytest.fixture
async def plain(db_url: str, engine) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app with the fast paths off, on the test database."""
    app = create_app(make_settings(db_url, fast_paths=False), engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield client


async def test_the_plain_app_takes_no_fast_path(db_url: str, engine) -> None:
    app = create_app(make_settings(db_url, fast_paths=False), engine)
    async with app.router.lifespan_context(app):
        assert app.state.fast_paths is False
        assert app.state.driver_statements.on_driver is False


KEPT_HEADERS = ("content-type", "cache-control", "etag", "www-authenticate", "retry-after")


def _answer(response: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    """What is compared: the status, the headers that matter and the body, each request's own
    id (in a problem's body) left out."""
    headers = {h: response.headers[h] for h in KEPT_HEADERS if h in response.headers}
    request_id = response.headers.get("x-request-id", "")
    body = (
        response.content.replace(request_id.encode(), b"<id>") if request_id else response.content
    )
    return response.status_code, headers, body


async def _both(
    fast: httpx.AsyncClient, plain: httpx.AsyncClient, method: str, path: str, **kwargs: object
) -> httpx.Response:
    answers = [await c.request(method, path, **kwargs) for c in (fast, plain)]  # type: ignore[arg-type]
    assert _answer(answers[0]) == _answer(answers[1]), (method, path)
    return answers[0]


async def test_reads_and_health_checks_answer_the_same(
    client: httpx.AsyncClient, plain: httpx.AsyncClient, caller: Caller, other: Caller
) -> None:
    deals = [await create_deal(client, caller, name=f"Deal {i}") for i in range(3)]
    await create_deal(client, caller, name="Bare", price=None, seller=None)
    theirs = await create_deal(client, other)
    auth = caller.headers
    await _both(client, plain, "GET", "/healthz")
    for path in ("/ping", "/readyz"):
        # A probe gives up after half a second (a 503): on a loaded machine, asked again.
        for _ in range(5):
            answers = [await c.get(path) for c in (client, plain)]
            if all(a.status_code == 200 for a in answers):
                break
        assert _answer(answers[0]) == _answer(answers[1]), path
    for query in ("", "?page=2&pageSize=2", "?page=99", "?page=abc&pageSize=0", "?pageSize=1000"):
        await _both(client, plain, "GET", f"/deals/v1/deals{query}", headers=auth)
    for deal_id in (deals[0]["id"], theirs["id"], str(uuid.uuid4()), "not-a-uuid"):
        await _both(client, plain, "GET", f"/deals/v1/deals/{deal_id}", headers=auth)
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
        await _both(client, plain, "GET", "/deals/v1/deals", headers=headers)
        await _both(client, plain, "GET", f"/deals/v1/deals/{deals[0]['id']}", headers=headers)
    await _both(client, plain, "GET", "/deals/v1/lifecycle", headers=auth)


async def test_refused_writes_answer_the_same(
    client: httpx.AsyncClient, plain: httpx.AsyncClient, caller: Caller
) -> None:
    deal = await create_deal(client, caller)
    auth = caller.headers
    as_json = {**auth, "Content-Type": "application/json"}
    for content, headers in (
        (b'{"name": 1}', as_json),
        (b'{"price": -5}', as_json),
        (b'{"packageType": "Huge"}', as_json),
        (b"{not json", as_json),
        (b"", as_json),
        (b'{"name": "x"}', {**auth, "Content-Type": "text/plain"}),
        (b'{"name": "x"}', {"Content-Type": "application/json"}),
        (b'{"name": "x"}', {**as_json, "Idempotency-Key": "\x01"}),
    ):
        await _both(client, plain, "POST", "/deals/v1/deals", content=content, headers=headers)
    status = f"/deals/v1/deals/{deal['id']}/status"
    for body in ({"status": "Completed"}, {"status": "Nope"}, {}):
        await _both(client, plain, "POST", status, json=body, headers=auth)


async def test_a_create_answers_the_same(
    client: httpx.AsyncClient, plain: httpx.AsyncClient, caller: Caller
) -> None:
    body = {"name": "Road bike", "price": 4500.5, "seller": SELLER, "images": []}
    made = []
    for c in (client, plain):
        response = await c.post("/deals/v1/deals", json=body, headers=caller.headers)
        assert response.status_code == 201, response.text
        made.append(response.json())
    own = ("id", "url", "createdAt", "updatedAt")
    fast, plain_deal = ({k: v for k, v in d.items() if k not in own} for d in made)
    assert fast == plain_deal
    assert list(made[0]) == list(made[1])
    # Each reads back the same through either app.
    for deal in made:
        await _both(client, plain, "GET", f"/deals/v1/deals/{deal['id']}", headers=caller.headers)
    # A retry with the same key is answered the same stored answer by both.
    keyed = {**caller.headers, "Idempotency-Key": "parity-1"}
    first = await client.post("/deals/v1/deals", json=body, headers=keyed)
    again = await plain.post("/deals/v1/deals", json=body, headers=keyed)
    assert (first.status_code, first.content) == (again.status_code, again.content)
