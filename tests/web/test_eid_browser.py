"""A whole deal signed by both parties with eID, clicked through in Chromium: the real
``dealbroker serve`` with ``DEALBROKER_EID_*`` naming panva's ``oidc-provider`` on loopback,
playing an eID broker (``tests/operators/oidc_provider.mjs`` with "eid"), whose own page asks
which test person signs in. The seller signs in Norwegian at 1280 px; the buyer, in Swedish at
390 px, first cancels at the provider (the page that says nothing was signed), then signs.
Both backends; axe-core on our pages; screenshots ``eid-*.png``."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, SELLER
from tests.operators.test_oidc import Provider, secret
from tests.processes import free_port
from tests.web.test_browser import (  # noqa: F401 - the fixtures are used by name
    DESKTOP,
    PHONE,
    Integration,
    LiveServer,
    Person,
    browser,
    integration,
    serve_module,
    shots,
)

try:
    from playwright.async_api import Browser, expect
except ImportError:  # test_browser says what is missing
    pass

pytestmark = pytest.mark.server

ACR = "urn:eid:test:high"


@pytest.fixture(scope="module", params=BACKENDS)
def live_and_provider(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, Provider]]:
    port = free_port()
    settings = {
        "DEALBROKER_EID_ISSUER": f"http://127.0.0.1:{port}",
        "DEALBROKER_EID_CLIENT_ID": "dealbroker",
        "DEALBROKER_EID_CLIENT_SECRET": secret("dealbroker"),
        "DEALBROKER_EID_ACR_VALUES": ACR,
    }
    for server, _db_url in serve_module(request, tmp_path_factory, "eid", settings):
        provider = Provider(f"{server.base}/eid/callback", "eid", port)
        try:
            yield server, provider
        finally:
            provider.stop()


@pytest.fixture(scope="module")
def live(live_and_provider: tuple[LiveServer, Provider]) -> LiveServer:
    return live_and_provider[0]


async def at_provider(person: Person, who: str) -> None:
    """On the provider's own page: pick the test person (or cancel)."""
    await expect(person.page.get_by_role("heading", name="Test eID")).to_be_visible()
    async with person.page.expect_navigation():
        await person.page.get_by_role("link", name=who).click()


async def sign_with_eid(person: Person) -> None:
    await person.page.locator("input[name=consent]").check()
    async with person.page.expect_navigation():
        await person.page.get_by_role("button", name=person.t("Sign with eID")).click()


async def test_both_parties_sign_with_eid_in_a_browser(
    browser: "Browser",  # noqa: F811
    integration: Integration,  # noqa: F811
    live: LiveServer,
    shots: Path,  # noqa: F811
) -> None:
    api = integration.api
    created = await api.post(
        "/deals/v1/deals",
        json={"name": "Road bike", "price": 1000, "seller": {**SELLER, "email": "s@example.com"}},
    )
    assert created.status_code == 201, created.text
    deal = created.json()
    link = await api.post(f"/deals/v1/deals/{deal['id']}/offer", json={"price": 950})
    offer_url = link.json()["url"]
    seller = await Person.open(browser, shots, DESKTOP, language="nb")
    buyer = await Person.open(browser, shots, PHONE, language="sv")
    try:
        # The buyer's offer first, so the seller can approve it once signed.
        await buyer.goto(offer_url)
        await buyer.label("I pick it up").check()
        await buyer.label("Your name").fill("Bjørn")
        await buyer.label("Your email").fill("bjorn@example.com")
        await buyer.press("Send offer")
        await buyer.press("Yes, send the offer")
        await buyer.sees("Draft", done="offer")

        await seller.goto(deal["url"])
        await seller.sees("Draft")
        await expect(seller.label("Your full name")).to_have_count(0)
        await seller.shot("eid-1280-nb-seller-sign")
        await sign_with_eid(seller)
        await seller.page.screenshot(path=shots / "eid-1280-provider.png", full_page=True)
        await at_provider(seller, "Sigrid Selger")
        await seller.sees("Ad", done="signed")
        await seller.audit()
        await seller.shot("eid-1280-nb-seller-signed")
        await seller.press("Approve", within="[data-offer]")
        await seller.press("Yes, approve the offer")
        await seller.sees("Ad", done="approved")

        # The buyer cancels at the provider: nothing signed, and says so in Swedish.
        await buyer.goto(offer_url)
        await buyer.sees("Ad")
        await expect(buyer.page.locator("[data-seller-verified]")).to_contain_text("Sigrid Selger")
        await buyer.label("Your phone").fill("+47 400 00 001")
        await buyer.shot("eid-390-sv-buyer-sign")
        await sign_with_eid(buyer)
        await at_provider(buyer, "Cancel")
        failed = buyer.page.locator("[data-eid-failed]")
        await expect(failed).to_contain_text(buyer.t("The signature did not go through"))
        await buyer.audit()
        await buyer.shot("eid-390-sv-failed")
        async with buyer.page.expect_navigation():
            await buyer.page.get_by_role(
                "link", name=buyer.t("Back to the deal, to sign again")
            ).click()
        await buyer.sees("Ad")

        # Then signs.
        await buyer.label("Your phone").fill("+47 400 00 001")
        await sign_with_eid(buyer)
        await at_provider(buyer, "Bjørn Kjøper")
        await buyer.sees("Signed", done="signed")
        await seller.page.reload()
        await expect(seller.page.locator("[data-buyer-verified]")).to_contain_text("Bjørn Kjøper")
        await buyer.audit()
        await buyer.shot("eid-390-sv-buyer-signed")
        assert seller.errors == []
        assert [e for e in buyer.errors if "400" not in e] == []  # the refusal page is a 400
    except BaseException:
        sys.stderr.write(f"--- server output ---\n{live.output()}\n")
        raise
    finally:
        await seller.context.close()
        await buyer.context.close()
    status = await api.get(f"/deals/v1/deals/{deal['id']}")
    assert status.json()["status"] == "Signed"
