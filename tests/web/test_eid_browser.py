"""A whole deal signed by both parties with eID, clicked through in Chromium: the real
``dealbroker serve`` with ``DEALBROKER_EID_*`` naming panva's ``oidc-provider`` on loopback,
playing an eID broker (``tests/operators/oidc_provider.mjs`` with "eid"), whose own page asks
which test person signs in. The seller signs; the buyer first cancels at the provider (the page
that says nothing was signed), then signs. Four walks, in which the two parties read different
languages at different widths, show every page in Norwegian and Swedish at 390 and 1280 px
(screenshots ``eid-WIDTH-LANGUAGE-*.png``); SQLite walks all four, PostgreSQL the first, so a
run of both backends walks five times. axe-core on our pages."""

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Integration, LiveServer, Person, screenshots, serve_module
from tests.conftest import BACKENDS, SELLER
from tests.oidc import Provider, secret
from tests.processes import cli, free_port
from tests.web.walks import login_path

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

ACR = "urn:eid:test:high"


@dataclass(frozen=True)
class Side:
    """How one party reads the pages: their language and their window."""

    language: str
    width: int

    @property
    def device(self) -> dict[str, Any]:
        return DESKTOP if self.width == DESKTOP["viewport"]["width"] else PHONE

    def __str__(self) -> str:
        return f"{self.language}-{self.width}"

    def shot(self, page: str) -> str:
        return f"eid-{self.width}-{self.language}-{page}"


# (seller, buyer): each page in each language at each width across the four.
WALKS = [
    (Side("nb", 1280), Side("sv", 390)),
    (Side("sv", 1280), Side("nb", 390)),
    (Side("nb", 390), Side("sv", 1280)),
    (Side("sv", 390), Side("nb", 1280)),
]
RUNS = [
    pytest.param(backend, (seller, buyer), id=f"{backend}-seller-{seller}-buyer-{buyer}")
    for backend in BACKENDS
    for seller, buyer in (WALKS if backend == "sqlite" else WALKS[:1])
]


@pytest.fixture(scope="module")
def live_and_provider(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, Provider, str]]:
    port = free_port()
    settings = {
        "DEALBROKER_EID_ISSUER": f"http://127.0.0.1:{port}",
        "DEALBROKER_EID_CLIENT_ID": "dealbroker",
        "DEALBROKER_EID_CLIENT_SECRET": secret("dealbroker"),
        "DEALBROKER_EID_ACR_VALUES": ACR,
    }
    for server, db_url in serve_module(request, tmp_path_factory, "eid", settings):
        provider = Provider(f"{server.base}/eid/callback", "eid", port)
        try:
            yield server, provider, db_url
        finally:
            provider.stop()


@pytest.fixture
def shots(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where this walk's screenshots go: the SQLite walks' are kept (with
    ``DEALBROKER_TEST_SCREENSHOTS=1``); the PostgreSQL walk's pages are the same, and go."""
    return screenshots(tmp_path, keep=request.node.callspec.params["live_and_provider"] == "sqlite")


@pytest.fixture(scope="module")
def live(live_and_provider: tuple[LiveServer, Provider, str]) -> LiveServer:
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


@pytest.mark.parametrize(
    ("live_and_provider", "walk"), RUNS, indirect=["live_and_provider"], scope="module"
)
async def test_both_parties_sign_with_eid_in_a_browser(
    walk: tuple[Side, Side],
    browser: "Browser",
    integration: Integration,
    live: LiveServer,
    live_and_provider: tuple[LiveServer, Provider, str],
    shots: Path,
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
    selling, buying = walk
    seller = await Person.open(browser, shots, selling.device, language=selling.language)
    buyer = await Person.open(browser, shots, buying.device, language=buying.language)
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
        await seller.shot(selling.shot("seller-sign"))
        await sign_with_eid(seller)
        await seller.page.screenshot(
            path=shots / f"eid-{selling.width}-provider.png", full_page=True
        )
        await at_provider(seller, "Sigrid Selger")
        await seller.sees("Ad", done="signed")
        await seller.audit()
        await seller.shot(selling.shot("seller-signed"))
        await seller.press("Approve", within="[data-offer]")
        await seller.press("Yes, approve the offer")
        await seller.sees("Ad", done="approved")

        # The buyer cancels at the provider: nothing signed, and says so in their language.
        await buyer.goto(offer_url)
        await buyer.sees("Ad")
        await expect(buyer.page.locator("[data-seller-verified]")).to_contain_text("Sigrid Selger")
        await buyer.label("Your phone").fill("+47 400 00 001")
        await buyer.shot(buying.shot("buyer-sign"))
        await sign_with_eid(buyer)
        await at_provider(buyer, "Cancel")
        failed = buyer.page.locator("[data-eid-failed]")
        await expect(failed).to_contain_text(buyer.t("The signature did not go through"))
        await buyer.audit()
        await buyer.shot(buying.shot("failed"))
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
        await buyer.shot(buying.shot("buyer-signed"))
        assert seller.errors == []
        assert [e for e in buyer.errors if "400" not in e] == []  # the refusal page is a 400

        # Support reads both signatures, and the buyer's cancelled one, in the deal's dossier.
        db_url = live_and_provider[2]
        email = f"support-{selling}@example.com"
        added = cli(db_url, "operators", "add", email, "--role", "support")
        assert added.returncode == 0, added.stderr
        operator = await Person.open(browser, shots, selling.device, language=selling.language)
        try:
            await operator.goto(live.base + login_path(db_url, email))
            await operator.press("Log in")
            await operator.goto(f"{live.base}/back-office/deals/{deal['id']}")
            flows = operator.page.locator("[data-identity] li")
            await expect(flows).to_have_count(3)
            await expect(flows.nth(0)).to_contain_text("Sigrid Selger")
            await expect(operator.page.locator("[data-eid-status=Failed]")).to_have_count(1)
            await operator.page.locator("[data-identity]").scroll_into_view_if_needed()
            await operator.audit()
            await operator.shot(selling.shot("back-office-identity"))
            assert operator.errors == []
        finally:
            await operator.context.close()
    except BaseException:
        sys.stderr.write(f"--- server output ---\n{live.output()}\n")
        raise
    finally:
        await seller.context.close()
        await buyer.context.close()
    status = await api.get(f"/deals/v1/deals/{deal['id']}")
    assert status.json()["status"] == "Signed"
