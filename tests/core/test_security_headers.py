"""Every response carries ``X-Content-Type-Options: nosniff``, whatever produced it: API answers,
pages, problem+json errors, 404s, the API docs, even an unhandled error's 500."""

from collections.abc import AsyncIterator

import httpx
import pytest

from dealbroker.app import create_app
from tests.conftest import BASE_URL, create_deal, make_settings


def assert_nosniff(response: httpx.Response) -> None:
    assert response.headers.get_list("x-content-type-options") == ["nosniff"], (
        response.status_code,
        response.request.url,
    )


async def test_api_answers_and_errors(client, caller):
    deal = await create_deal(client, caller)
    responses = [
        await client.get("/ping"),
        await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers),
        await client.get("/deals/v1/deals"),  # 401
        await client.post("/deals/v1/deals", content=b"{", headers=caller.headers),  # 405
        await client.post("/deals/v1/deals", json={"price": "x"}, headers=caller.headers),
        await client.get("/deals/v1/deals/not-a-uuid", headers=caller.headers),
        await client.delete("/ping"),  # 405
        await client.post("/deals/v1/deals", content=b"x" * 300_000),  # 413
        await client.post("/oauth2/token", data={"grant_type": "client_credentials"}),
        await client.get("/no/such/path"),  # 404
        await client.post("/webhooks/v1/dealStatus", json={}),  # sandbox trigger, 401
    ]
    assert {r.status_code for r in responses} >= {200, 400, 401, 404, 405, 413}
    for response in responses:
        assert_nosniff(response)


async def test_docs_and_schema(client):
    for url in ("/docs", "/openapi.json", "/docs/oauth2-redirect"):
        response = await client.get(url)
        assert response.status_code == 200
        assert_nosniff(response)


async def test_pages_redirects_and_page_errors(client, caller):
    deal = await create_deal(client, caller)
    seller = httpx.URL(deal["url"]).path
    page = await client.get(seller)
    assert page.status_code == 200
    posted = await client.post(f"{seller}/-/cancel", data={"csrf": "forged"})
    assert posted.status_code == 400
    for response in (
        page,
        posted,
        await client.get(f"/d/{deal['id']}/forged"),  # a page's 404
        await client.get("/o/unknown?offer=x"),
        await client.get("/pay/unknown"),
    ):
        assert_nosniff(response)


@pytest.fixture
async def failing_client(db_url, engine) -> AsyncIterator[httpx.AsyncClient]:
    """The app with one route that fails, as a bug would."""
    application = create_app(make_settings(db_url), engine)

    async def boom() -> None:
        raise RuntimeError("a bug")

    application.add_api_route("/boom", boom)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
            yield c


async def test_an_unhandled_error(failing_client):
    response = await failing_client.get("/boom")
    assert response.status_code == 500
    assert_nosniff(response)
