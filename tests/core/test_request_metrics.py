"""The request histogram's labels: a route's template, never its path; bounded label values."""

from collections.abc import AsyncIterator

import httpx
import pytest
from prometheus_client import REGISTRY

from dealbroker.app import create_app
from tests.conftest import BASE_URL, create_deal, make_caller, make_settings

NAME = "dealbroker_http_request_duration_seconds_count"


def count(method: str, route: str, status: int) -> float:
    labels = {"method": method, "route": route, "status": str(status)}
    return REGISTRY.get_sample_value(NAME, labels) or 0.0


def all_routes() -> set[str]:
    return {
        sample.labels["route"]
        for family in REGISTRY.collect()
        if family.name == "dealbroker_http_request_duration_seconds"
        for sample in family.samples
    }


@pytest.fixture
async def metered(db_url, engine) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(make_settings(db_url, metrics_bind="127.0.0.1:9100"), engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield client


async def test_requests_are_counted_by_route_template(metered, sessionmaker):
    caller = await make_caller(metered, sessionmaker)
    deal = await create_deal(metered, caller)
    before = count("GET", "/deals/v1/deals/{dealId}", 200)
    for _ in range(3):
        response = await metered.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)
        assert response.status_code == 200
    assert count("GET", "/deals/v1/deals/{dealId}", 200) == before + 3

    before_404 = count("GET", "/deals/v1/deals/{dealId}", 404)
    await metered.get(
        "/deals/v1/deals/00000000-0000-0000-0000-000000000000", headers=caller.headers
    )
    assert count("GET", "/deals/v1/deals/{dealId}", 404) == before_404 + 1


async def test_capability_links_and_unknown_paths_never_become_labels(metered, sessionmaker):
    caller = await make_caller(metered, sessionmaker)
    deal = await create_deal(metered, caller)
    seller_path = deal["url"].removeprefix(BASE_URL)
    before = {
        key: count(*key)
        for key in [
            ("GET", "/d/{deal_id}/{signature}", 200),
            ("GET", "unmatched", 404),
            ("other", "/ping", 405),
        ]
    }
    assert (await metered.get(seller_path)).status_code == 200
    assert (await metered.get(f"/unknown/{deal['id']}")).status_code == 404
    assert (await metered.request("BREW", "/ping")).status_code == 405
    assert (
        count("GET", "/d/{deal_id}/{signature}", 200)
        == before[("GET", "/d/{deal_id}/{signature}", 200)] + 1
    )
    assert count("GET", "unmatched", 404) == before[("GET", "unmatched", 404)] + 1
    assert count("other", "/ping", 405) == before[("other", "/ping", 405)] + 1
    assert not any(deal["id"] in route for route in all_routes())
    assert not any(seller_path.rsplit("/", 1)[1] in route for route in all_routes())


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/static/pages.css", "/static/{path}"),  # a mount
        ("/openapi.json", "/openapi.json"),  # a plain Starlette route
        ("/docs", "/docs"),
    ],
)
async def test_routes_outside_fastapis_own_have_their_template(metered, path, route):
    before = count("GET", route, 200)
    assert (await metered.get(path)).status_code == 200
    assert count("GET", route, 200) == before + 1


async def test_without_metrics_no_request_is_timed(client):
    before = count("GET", "/ping", 200)
    assert (await client.get("/ping")).status_code == 200
    assert count("GET", "/ping", 200) == before


@pytest.mark.parametrize("bind", ["9100", "localhost", ":9100", "127.0.0.1:0", "h:70000"])
def test_a_metrics_address_must_be_host_and_port(db_url, bind):
    with pytest.raises(ValueError, match="host:port"):
        make_settings(db_url, metrics_bind=bind)


def test_ipv6_metrics_address(db_url):
    assert make_settings(db_url, metrics_bind="[::1]:9100").metrics_address == ("::1", 9100)
