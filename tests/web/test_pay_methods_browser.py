"""The buyer's ways to pay, walked in Chromium: the Signed page of a NOK sandbox offers Vipps then
cards, each a button with its mark and its name, reached by the keyboard with a visible focus
ring; axe-core finds nothing serious; pressing Vipps opens the test checkout, which names the
method it simulates; with JavaScript off the same buttons pay. In Norwegian and Swedish, at
390 and 1280 px (screenshots ``methods-WIDTH-LANGUAGE-*.png`` with
``DEALBROKER_TEST_SCREENSHOTS=1``)."""

from pathlib import Path
from typing import Any

import pytest

from tests.browser import DESKTOP, PHONE, Integration, LiveServer, screenshots
from tests.web.english import english_in
from tests.web.test_browser_exceptions import (
    BUYER_EMAIL,
    BUYER_NAME,
    Walker,
    _approve,
    _buyer_signs,
    _deal,
    _offer,
)

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

WALKS = [("nb", 390), ("nb", 1280), ("sv", 390), ("sv", 1280)]
BUTTONS = ["Pay with Vipps", "Pay by card"]  # NOK's order


@pytest.mark.parametrize(("language", "width"), WALKS, ids=[f"{lang}-{w}" for lang, w in WALKS])
async def test_the_buyer_chooses_how_to_pay(
    browser: "Browser",
    integration: Integration,
    live: LiveServer,
    language: str,
    width: int,
    tmp_path: Path,
) -> None:
    shots = screenshots(tmp_path)
    device = DESKTOP if width == 1280 else PHONE
    seller = await Walker.open(browser, tmp_path, DESKTOP, language=language)
    buyer = await Walker.open(browser, shots, device, language=language)
    try:
        deal, url = await _deal(integration, f"Sykkel {language} {width}")
        await _offer(buyer, url, "Pickup", BUYER_NAME, BUYER_EMAIL)
        await _approve(seller, deal, BUYER_NAME)
        await _buyer_signs(buyer, url, "Pickup")  # audited by axe on the way

        page = buyer.page
        methods = page.locator("form[data-methods] button")
        await expect(methods).to_have_count(2)
        # Each button's accessible name is its words (the mark is hidden from it), in order.
        for i, words in enumerate(BUTTONS):
            button = page.get_by_role("button", name=buyer.t(words), exact=True)
            await expect(button).to_be_visible()
            assert await methods.nth(i).get_attribute("value") == ("vipps", "card")[i]
            assert await button.locator("svg").get_attribute("aria-hidden") == "true"
        # The marks carry the methods' names as text.
        assert await methods.nth(0).locator("svg text").text_content() == "Vipps"
        # Full width, and tall enough to tap.
        box = await methods.nth(0).bounding_box()
        assert box is not None
        assert box["height"] >= 44
        # The keyboard reaches the first method, and the focus shows.
        for _ in range(60):
            await page.keyboard.press("Tab")
            if await page.evaluate("document.activeElement.dataset.method") == "vipps":
                break
        else:
            raise AssertionError("Tab never reached the Vipps button")
        outline = await page.evaluate(
            "(() => { const s = getComputedStyle(document.activeElement);"
            " return [s.outlineStyle, s.outlineWidth]; })()"
        )
        assert outline == ["solid", "3px"], outline
        await buyer.audit()
        assert not english_in(await page.content()), english_in(await page.content())
        await buyer.shot(f"methods-{width}-{language}-buyer-pay")

        await buyer.press(BUTTONS[0])
        assert "/pay/" in page.url
        await expect(page.locator("[data-simulated-method]")).to_have_attribute(
            "data-simulated-method", "vipps"
        )
        await expect(page.locator("[data-simulated-method] span span")).to_have_text(
            "Vipps MobilePay"
        )
        assert not english_in(await page.content()), english_in(await page.content())
        await buyer.shot(f"methods-{width}-{language}-checkout")
        assert not buyer.errors, buyer.errors
    finally:
        await seller.context.close()
        await buyer.context.close()


async def test_the_methods_pay_with_javascript_off(
    browser: "Browser", integration: Integration, live: LiveServer, tmp_path: Path
) -> None:
    seller = await Walker.open(browser, tmp_path, DESKTOP, language="nb")
    buyer = await Walker.open(browser, tmp_path, PHONE, language="nb")
    try:
        deal, url = await _deal(integration, "Sykkel uten skript")
        await _offer(buyer, url, "Pickup", BUYER_NAME, BUYER_EMAIL)
        await _approve(seller, deal, BUYER_NAME)
        await _buyer_signs(buyer, url, "Pickup")
        offline: Any = await browser.new_context(java_script_enabled=False, locale="nb-NO", **PHONE)
        try:
            page = await offline.new_page()
            await page.goto(buyer.page.url)
            async with page.expect_navigation():
                await page.get_by_role("button", name=buyer.t("Pay by card"), exact=True).click()
            assert "/pay/" in page.url
            await expect(page.locator("[data-simulated-method]")).to_have_attribute(
                "data-simulated-method", "card"
            )
            async with page.expect_navigation():
                await page.locator("button[value=succeeded]").click()
            await expect(page.locator("[data-status]")).to_have_attribute(
                "data-status", "Pickup_Pending"
            )
        finally:
            await offline.close()
    finally:
        await seller.context.close()
        await buyer.context.close()
