"""The sandbox's simulated eID refuses a deal changed while the seller is on its page, as the
real issuer's flow does (the nonce of the deal's terms), walked in a real headless Chromium
against the real ``dealbroker serve`` with ``DEALBROKER_EID_ISSUER=simulated``: the seller
starts signing, the deal's price changes meanwhile, the seller confirms at the simulated eID
and reads the refusal (the production page, in Norwegian and Swedish at 390 and 1280 px), goes
back to the deal, which is still a draft, and signs the deal as it now is. axe-core on every
page; SQLite walks all four, PostgreSQL the first."""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import update

from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.deals.models import Deal
from tests.browser import DESKTOP, PHONE, Integration, LiveServer, Person, serve_module
from tests.conftest import BACKENDS, SELLER

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

WALKS = [(PHONE, "nb"), (DESKTOP, "sv"), (PHONE, "sv"), (DESKTOP, "nb")]
RUNS = [
    pytest.param(backend, device, language, id=f"{backend}-{language}-{width}")
    for backend in BACKENDS
    for device, language in (WALKS if backend == "sqlite" else WALKS[:1])
    for width in [device["viewport"]["width"]]
]


@pytest.fixture(scope="module")
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    yield from serve_module(
        request, tmp_path_factory, "eid-simulated", {"DEALBROKER_EID_ISSUER": "simulated"}
    )


@pytest.fixture(scope="module")
def live(served: tuple[LiveServer, str]) -> LiveServer:
    return served[0]


async def change_price(db_url: str, deal_id: str, price: int) -> None:
    """The deal's terms change while the seller is at the eID (another tab, an integrator)."""
    engine = create_engine(db_url, pool_size=1)
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            await session.execute(
                update(Deal).where(Deal.id == uuid.UUID(deal_id)).values(price_minor=price)
            )
    finally:
        await engine.dispose()


async def at_simulated_eid(seller: Person) -> None:
    page = seller.page
    await seller.page.locator("input[name=consent]").check()
    async with page.expect_navigation():
        await page.get_by_role("button", name=seller.t("Sign with eID")).click()
    await expect(page.locator("[data-eid-simulated]")).to_be_visible()
    await seller.audit()
    await seller.label("Name").fill("Kari Nordmann")
    await seller.label("Birth date (YYYY-MM-DD)").fill("1980-01-02")


@pytest.mark.parametrize(
    ("served", "device", "language"), RUNS, indirect=["served"], scope="module"
)
async def test_a_deal_changed_at_the_simulated_eid_is_not_signed(
    served: tuple[LiveServer, str],
    integration: Integration,
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
) -> None:
    live, db_url = served
    name = f"{language}-{device['viewport']['width']}"
    created = await integration.api.post(
        "/deals/v1/deals",
        json={"name": "Road bike", "price": 1000, "seller": {**SELLER, "email": "s@example.com"}},
    )
    assert created.status_code == 201, created.text
    deal = created.json()
    seller = await Person.open(browser, shots, device, language=language)
    page = seller.page
    try:
        await seller.goto(deal["url"])
        await seller.sees("Draft")
        await at_simulated_eid(seller)
        await seller.shot(f"eid-simulated-{name}-page")
        await change_price(db_url, deal["id"], 1200)
        async with page.expect_navigation() as answered:
            await page.get_by_role("button", name=seller.t("Confirm who I am")).click()
        response = await answered.value
        assert response is not None
        assert response.status == 400
        failed = page.locator("[data-eid-failed]")
        await expect(failed).to_contain_text(seller.t("The signature did not go through"))
        await expect(page.locator("html")).to_have_attribute("lang", language)
        await seller.audit()
        await seller.shot(f"eid-simulated-{name}-refused")
        async with page.expect_navigation():
            await page.get_by_role("link", name=seller.t("Back to the deal, to sign again")).click()
        await seller.sees("Draft")

        # Signed as the deal now is.
        await at_simulated_eid(seller)
        await seller.press("Confirm who I am")
        await seller.sees("Ad", done="signed")
    finally:
        await seller.context.close()
    # Chromium logs the refusal's 400 as a resource that failed to load; nothing else.
    assert [e for e in seller.errors if "status of 400" not in e] == []
