"""A parcel we book at the carrier, clicked through in a real headless Chromium, in Norwegian
Bokmål and in Swedish, on a phone (390 px) and a desktop (1280 px): the seller chooses a
delivery and books, the page makes the label (the parcel job books it in the server's worker)
and shows the label PDF, the QR code and the tracking; the sandbox carrier's buttons hand the
parcel in, carry it and make it ready for pickup; the buyer's page lists the carrier's events
and says where to collect it; the tracking link leads to the sandbox carrier's page.

The real ``dealbroker serve`` runs with ``DEALBROKER_CARRIER=simulated`` (plus a ``dealbroker
worker`` on PostgreSQL); the deal is taken to ``Shipping_Pending`` through the pages and the
simulated checkout. Every page state is checked with axe-core, must fit the window, and is
screenshotted (``docs/screenshots/parcel-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``), as in
``tests/browser.py``. The label PDF is rendered to PNG beside the screenshots, to be looked at.
"""

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pypdfium2
import pytest

from dealbroker.parcels.service import SIMULATED_POINT
from tests.browser import DESKTOP, FLOW_SECONDS, PHONE, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.web.walks import SIMULATED_CARRIER, label_shown, shipping_pending

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """The running server, with the sandbox's simulated carrier."""
    for server, _ in serve_module(request, tmp_path_factory, "parcels", SIMULATED_CARRIER):
        yield server


def render_label(pdf: bytes, to: Path) -> None:
    """The label's one page as a PNG at 200 dpi (A6: about 830 x 1170 px)."""
    document = pypdfium2.PdfDocument(pdf)
    try:
        assert len(document) == 1
        document[0].render(scale=200 / 72).to_pil().save(to)
    finally:
        document.close()


@pytest.mark.parametrize("language", ["nb", "sv"])
@pytest.mark.parametrize("device", ["phone", "desktop"])
async def test_the_seller_books_a_parcel_and_the_buyer_follows_it(
    browser: "Browser", live: LiveServer, shots: Path, language: str, device: str
) -> None:
    window: dict[str, Any] = PHONE if device == "phone" else DESKTOP
    width = window["viewport"]["width"]
    seller = await Person.open(browser, shots, window, language=language)
    buyer = await Person.open(browser, shots, window, language=language)
    name = f"parcel-{width}-{language}"
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            _, seller_url, buyer_url = await shipping_pending(live)
            # The ship-it step: size, deliveries, the deadline, and the button.
            await seller.goto(seller_url)
            await seller.sees("Shipping_Pending")
            step = seller.page.locator("[data-ship-it]")
            await expect(step.locator("[data-parcel-size]")).to_have_text(seller.t("Medium"))
            await expect(step.locator("[data-hand-in-by]")).to_be_visible()
            await expect(step.locator("input[name=delivery]")).to_have_count(3)
            await seller.shot(f"{name}-1-seller-ship-it")
            await seller.label("To a pickup point near the buyer").check()
            await seller.press("Book shipping")
            await seller.sees("Shipping_Pending", done="booking")
            await seller.shot(f"{name}-2-seller-booking")
            # The seller asks for the label until the worker has booked it.
            await label_shown(seller)
            await expect(step.locator("[data-qr] svg")).to_be_visible()
            code = await step.locator("[data-qr] figcaption strong").inner_text()
            assert code.startswith("SIM-")
            tracking = await step.locator("[data-tracking-number]").inner_text()
            await seller.shot(f"{name}-3-seller-label")
            # The label, as the link downloads it, rendered to be looked at.
            href = await step.locator("a[data-label]").get_attribute("href")
            assert href is not None
            label = await seller.page.request.get(live.base + href)
            assert label.status == 200
            assert label.headers["content-type"] == "application/pdf"
            assert label.headers["content-disposition"].startswith("attachment")
            pdf = await label.body()
            assert pdf.startswith(b"%PDF")
            render_label(pdf, shots / f"{name}-label.png")
            # The sandbox carrier moves the parcel, as the carrier's pushes would.
            await seller.press("Handed in")
            await seller.sees("Shipping_In_Progress", done="parcel-event")
            await seller.press("On its way")
            await seller.press("Ready for pickup")
            # At the pickup point, not yet with the buyer: the review starts when collected.
            await seller.sees("Shipping_In_Progress", done="parcel-event")
            log = seller.page.locator("[data-carrier-log]")
            await expect(log.locator("[data-carrier-event]")).to_have_count(4)
            await seller.shot(f"{name}-4-seller-ready")
            # The buyer reads the carrier's news, where to collect it and the tracking link.
            await buyer.goto(buyer_url)
            await buyer.sees("Shipping_In_Progress")
            await expect(buyer.page.locator("[data-collect-at]")).to_contain_text(SIMULATED_POINT)
            news = buyer.page.locator("[data-carrier-log] [data-carrier-event]")
            await expect(news).to_have_count(4)
            await expect(news.nth(0)).to_contain_text(
                buyer.t("The parcel is booked with %(carrier)s", carrier="Sandbox Post")
            )
            await expect(news.nth(3).locator("[data-pickup-point]")).to_contain_text(
                SIMULATED_POINT
            )
            await buyer.shot(f"{name}-5-buyer-collect")
            # The carrier's tracking page (the worker that booked the parcel wrote the link with
            # its own base URL: on PostgreSQL a separate process, on another port here).
            link = await buyer.page.locator("[data-tracking-link] a").get_attribute("href")
            assert link is not None
            assert link.endswith(f"/sandbox/parcels/{tracking}")
            await buyer.goto(live.base + link[link.index("/sandbox/") :])
            tracking_page = buyer.page.locator("[data-sandbox-tracking]")
            await expect(tracking_page).to_contain_text(tracking)
            await expect(tracking_page.locator("li")).to_have_count(4)
            await buyer.shot(f"{name}-6-tracking")
        assert buyer.errors == []
        assert seller.errors == []
    except BaseException:
        sys.stderr.write(f"--- server output ---\n{live.output()}\n")
        raise
    finally:
        await buyer.context.close()
        await seller.context.close()
