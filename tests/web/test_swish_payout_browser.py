"""The seller's payout page with Swish, in a real headless Chromium, in Swedish and Norwegian
Bokmål, on a phone (390 px) and a desktop (1280 px): a deployment in SEK that pays by Swish
offers two forms, Swish and bank account (no script needed to choose); a number that is not a
Swedish mobile number, and a personal identity number that does not check, are refused next to
their fields in the reader's language, the identity number never written back into the page;
a valid pair is saved and shown by its last digits.

The real ``dealbroker serve`` runs with Swish payouts against the emulator (plus a ``dealbroker
worker`` on PostgreSQL). Every page state is checked with axe-core, must fit the window, and is
screenshotted (``docs/screenshots/swish-payout-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``).
"""

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from tests.browser import DESKTOP, PHONE, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.web.pages import signed_deal

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def live(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    swish_payouts_emulator: Any,
) -> Iterator[LiveServer]:
    """The running server, paying sellers by Swish through the emulator, in SEK."""
    settings = swish_payouts_emulator.settings(DEALBROKER_SECRET_KEY="swish-walk-" + "k" * 32)
    for server, _ in serve_module(request, tmp_path_factory, "swish-payouts", settings):
        yield server


async def _signed(live: LiveServer) -> str:
    async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
        token = await api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(live.credential("client id"), live.credential("client secret")),
        )
        assert token.status_code == 200, token.text
        caller = SimpleNamespace(
            headers={"Authorization": f"Bearer {token.json()['access_token']}"}
        )
        _, seller, _ = await signed_deal(api, caller, "Pickup", price=450)
    return live.base + seller


async def _refused(seller: Person, field: str, message: str) -> None:
    form = seller.page.locator('[data-payout-form="swish"]')
    async with seller.page.expect_navigation() as navigation:
        await form.get_by_role("button", name=seller.t("Save payout account")).click()
    response = await navigation.value
    assert response is not None
    assert response.status == 400
    await expect(seller.page.locator(f'[data-field-error="{field}"]')).to_have_text(
        seller.t(message)
    )
    await seller.audit()


@pytest.mark.parametrize("language", ["sv", "nb"])
@pytest.mark.parametrize(("device", "width"), [(PHONE, 390), (DESKTOP, 1280)])
async def test_the_seller_gives_a_swish_number(
    live: LiveServer, browser: "Browser", shots: Path, language: str, device: Any, width: int
) -> None:
    seller = await Person.open(browser, shots, device, language=language)
    try:
        await seller.goto(await _signed(live))
        form = seller.page.locator('[data-payout-form="swish"]')
        await expect(form).to_be_visible()
        await expect(seller.page.locator('[data-payout-form="bank"]')).to_be_visible()
        await seller.shot(f"swish-payout-form-{language}-{width}")

        await form.get_by_label(seller.t("Name of the Swish number's owner")).fill("Karin Svensson")
        await form.get_by_label(seller.t("Swish number (mobile number)")).fill("08-123 456 78")
        await form.get_by_label(seller.t("Personal identity number (YYYYMMDD-NNNN)")).fill(
            "19811218-9876"
        )
        await _refused(
            seller,
            "swish",
            "Not a Swedish mobile number: give it as 07X XXX XX XX or +46 7X XXX XX XX.",
        )
        assert "9876" not in await form.locator("input[name=ssn]").input_value()
        await seller.shot(f"swish-payout-refused-{language}-{width}")

        form = seller.page.locator('[data-payout-form="swish"]')
        await form.get_by_label(seller.t("Swish number (mobile number)")).fill("070-123 45 67")
        await form.get_by_label(seller.t("Personal identity number (YYYYMMDD-NNNN)")).fill(
            "19811218-9875"
        )
        await _refused(
            seller, "ssn", "Not a valid Swedish personal identity number (YYYYMMDD-NNNN)."
        )

        form = seller.page.locator('[data-payout-form="swish"]')
        await form.get_by_label(seller.t("Personal identity number (YYYYMMDD-NNNN)")).fill(
            "19811218-9876"
        )
        await seller.press("Save payout account", within='[data-payout-form="swish"]')
        account = seller.page.locator('[data-payout-account="swish"]')
        await expect(account).to_contain_text("4567")
        await expect(account).to_contain_text("9876")
        assert "198112189876" not in await seller.page.content()
        await seller.shot(f"swish-payout-saved-{language}-{width}")
        # The two refusals are 400 answers, as they should be; nothing else went wrong.
        assert [e for e in seller.errors if "status of 400" not in e] == []
    finally:
        await seller.context.close()
