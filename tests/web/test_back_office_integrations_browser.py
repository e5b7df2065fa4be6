"""The back office's integrations and deal search in a real headless Chromium, in Swedish on a
phone (390 px) and in Norwegian Bokmål on a desktop (1280 px): an admin registers an
integration and sees its secrets once (they work against the token endpoint), rotates its
client secret (the old one stops) and its webhook secret, disables it (no more tokens), finds
the deal it created by the seller's e-mail, and sees each action in the audit trail.

The real ``dealbroker serve`` runs (plus a ``dealbroker worker`` on PostgreSQL). Every page
state is checked with axe-core, must fit the window, and is screenshotted (to
``docs/screenshots/back-office-integrations-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``).
"""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser import WINDOWS, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.processes import cli
from tests.web.walks import login_path

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server
FORM = {"grant_type": "client_credentials"}


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The running server and its database (the operator's commands need it)."""
    yield from serve_module(request, tmp_path_factory, "back-office-integrations")


async def token_status(api: httpx.AsyncClient, client_id: str, secret: str) -> int:
    answer = await api.post("/oauth2/token", data=FORM, auth=(client_id, secret))
    return answer.status_code


@pytest.mark.parametrize(("device", "language", "name"), WINDOWS)
async def test_an_admin_manages_an_integration_and_finds_its_deal(
    served: tuple[LiveServer, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    name: str,
) -> None:
    live, db_url = served
    email = f"{name}@operators.example.com"
    added = cli(db_url, "operators", "add", email, "--role", "support", "--role", "admin")
    assert added.returncode == 0, added.stderr
    person = await Person.open(browser, shots, device, language=language)
    page = person.page
    shot = f"back-office-integrations-{name}"
    try:
        async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
            await person.goto(live.base + login_path(db_url, email))
            await person.press("Log in")
            nav = page.locator("nav.back-office")
            async with page.expect_navigation():
                await nav.get_by_role("link", name=person.t("Integrations")).click()
            assert page.url == f"{live.base}/back-office/integrations"
            await person.audit()

            marketplace = f"Loppis {name}"
            await person.label("The marketplace's name").fill(marketplace)
            await person.press("Register the integration")
            await expect(page.locator("[data-secrets] h1")).to_have_text(marketplace)
            client_id = await page.locator("[data-client-id]").inner_text()
            secret = await page.locator("[data-client-secret]").inner_text()
            assert await page.locator("[data-webhook-secret]").count() == 1
            await person.shot(f"{shot}-1-secrets")
            got = await api.post("/oauth2/token", data=FORM, auth=(client_id, secret))
            assert got.status_code == 200, got.text
            seller = f"{name}.seller@example.com"
            created = await api.post(
                "/deals/v1/deals",
                json={"name": "Sykkel", "price": 1200, "seller": {"email": seller}},
                headers={"Authorization": f"Bearer {got.json()['access_token']}"},
            )
            assert created.status_code == 201, created.text
            deal_id = created.json()["id"]

            async with page.expect_navigation():
                await page.get_by_role("link", name=person.t("Back to the integrations")).click()
            section = f'[data-integration="{client_id}"]'
            await expect(page.locator(section)).to_have_attribute("data-active", "true")
            assert secret not in await page.content()  # shown once
            await person.shot(f"{shot}-2-list")

            await person.press("New client secret (the old one stops now)", within=section)
            rotated = await page.locator("[data-client-secret]").inner_text()
            assert rotated != secret
            assert await token_status(api, client_id, secret) == 401
            assert await token_status(api, client_id, rotated) == 200
            await person.shot(f"{shot}-3-client-secret")

            await person.goto(f"{live.base}/back-office/integrations")
            await person.press("New webhook secret", within=section)
            assert await page.locator("[data-webhook-secret]").count() == 1
            await person.shot(f"{shot}-4-webhook-secret")

            await person.goto(f"{live.base}/back-office/integrations")
            disable = person.t("Disable %(name)s", name=marketplace)
            async with page.expect_navigation():
                await page.locator(section).get_by_role("button", name=disable).click()
            assert page.url.endswith("/back-office/integrations?done=integration-disabled")
            await expect(page.locator(section)).to_have_attribute("data-active", "false")
            await person.audit()
            await person.shot(f"{shot}-5-disabled")
            assert await token_status(api, client_id, rotated) == 401

        async with page.expect_navigation():
            await nav.get_by_role("link", name=person.t("Deals")).click()
        await person.label("Deal id, or the seller's or buyer's e-mail address").fill(
            seller.upper()
        )
        await person.press("Search")
        link = page.locator(f'[data-deal="{deal_id}"] a')
        await expect(link).to_have_attribute("href", f"/back-office/deals/{deal_id}")
        await expect(page.locator("[data-deal]")).to_have_count(1)
        await person.shot(f"{shot}-6-deals")

        await person.goto(f"{live.base}/back-office/audit")
        mine = page.locator(f'tr[data-action^="integration."]:has-text("{client_id}")')
        await expect(mine).to_have_count(4)
        actions = [await row.get_attribute("data-action") for row in await mine.all()]
        assert actions == [
            "integration.disable",
            "integration.rotate_webhook_secret",
            "integration.rotate_secret",
            "integration.create",
        ]
        assert rotated not in await page.content()
        await person.shot(f"{shot}-7-audit")
        assert not person.errors, person.errors
    finally:
        await person.context.close()
