"""A parcel booked with Bring, whose QR code is Bring's own PNG, on the seller's page in a real
headless Chromium, in Norwegian Bokmål and in Swedish, on a phone (390 px) and a desktop
(1280 px): the seller books, the worker books at Bring (its emulator, on loopback) and stores
the label and the QR image Bring drew; the page shows the image inline, whole, within the phone's
width, with the label's download and the tracking number.

The real ``dealbroker serve`` runs with ``DEALBROKER_CARRIER=bring`` against the Bring emulator
(plus a ``dealbroker worker`` on PostgreSQL); the deal is taken to ``Shipping_Pending`` through
the pages and the simulated checkout. Every page state is checked with axe-core, must fit the
window, and is screenshotted (``docs/screenshots/parcel-bring-*.png`` with
``DEALBROKER_TEST_SCREENSHOTS=1``), as in ``tests/browser.py``.
"""

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import DESKTOP, FLOW_SECONDS, PHONE, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.web.english import english_in
from tests.web.walks import label_shown, shipping_pending

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

DATA_PNG = re.compile(r"^data:image/png;base64,[A-Za-z0-9+/=]+$")


@pytest.fixture(scope="module", params=BACKENDS)
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, bring_emulator: Any
) -> Iterator[LiveServer]:
    """The running server, shipping with Bring through its emulator."""
    for server, _ in serve_module(
        request, tmp_path_factory, "parcels-bring", bring_emulator.settings()
    ):
        yield server


@pytest.mark.parametrize("language", ["nb", "sv"])
@pytest.mark.parametrize("device", ["phone", "desktop"])
async def test_the_seller_sees_brings_qr_code_whole_on_the_page(
    browser: "Browser", live: LiveServer, shots: Path, language: str, device: str
) -> None:
    window: dict[str, Any] = PHONE if device == "phone" else DESKTOP
    width = window["viewport"]["width"]
    seller = await Person.open(browser, shots, window, language=language)
    name = f"parcel-bring-{width}-{language}"
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            _, seller_url, _ = await shipping_pending(live)
            await seller.goto(seller_url)
            await seller.sees("Shipping_Pending")
            await seller.label("To a pickup point near the buyer").check()
            await seller.press("Book shipping")
            await label_shown(seller)
            step = seller.page.locator("[data-ship-it]")
            await expect(step.locator("[data-parcel-booked]")).to_contain_text("Bring")
            await expect(step.locator("a[data-label]")).to_be_visible()
            await expect(step.locator("[data-tracking-number]")).not_to_be_empty()
            # Bring's PNG, inline (nothing fetched from the page), decoded and shown whole.
            image = step.locator("[data-qr] img.qr-code")
            await expect(image).to_have_attribute("src", DATA_PNG)
            await expect(image).to_have_attribute("alt", seller.t("QR code to show at the counter"))
            await image.scroll_into_view_if_needed()
            assert await image.evaluate("i => i.complete && i.naturalWidth > 0")
            box = await image.bounding_box()
            assert box is not None
            assert box["x"] >= 0
            assert box["x"] + box["width"] <= width
            assert box["width"] >= 150, box  # big enough for a counter's scanner
            if language != "en":
                assert english_in(await seller.page.content()) == []
            await seller.shot(f"{name}-seller-label")
        assert seller.errors == []
    finally:
        await seller.context.close()
