"""A parcel the carrier lost, in a real headless Chromium, in each of the back office's languages
on a phone (390 px) and a desktop (1280 px): the seller books it and hands it in, the sandbox
carrier reports it lost, which opens the dispute; a support operator finds it in the queue as
one the carrier lost and opens it: the dispute's card says the carrier opened it and holds the
claim to make at the carrier (the shipment, its tracking number, when it was booked and last
heard of, the value to claim).

The real ``dealbroker serve`` runs with the sandbox's simulated carrier (plus a ``dealbroker
worker`` on PostgreSQL); the deal is taken to ``Shipping_Pending`` through the pages and the
simulated checkout. Every page state is checked with axe-core, must fit the window, and is
screenshotted (``docs/screenshots/carrier-claim-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``),
as in ``tests/browser.py``.
"""

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from dealbroker.core.i18n import LOCALES
from tests.browser import DESKTOP, FLOW_SECONDS, PHONE, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.web.english import english_in
from tests.web.walks import SIMULATED_CARRIER, label_shown, operator, shipping_pending

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The running server with the simulated carrier, and its database (for the operator)."""
    yield from serve_module(request, tmp_path_factory, "carrier-claim", SIMULATED_CARRIER)


async def _lost(seller: Person, url: str) -> str:
    """The seller books the parcel and hands it in; the sandbox carrier loses it. Its
    tracking number, as the seller's page showed it."""
    await seller.goto(url)
    await seller.label("To a pickup point near the buyer").check()
    await seller.press("Book shipping")
    await label_shown(seller)
    tracking = await seller.page.locator("[data-tracking-number]").inner_text()
    await seller.press("Handed in")
    await seller.sees("Shipping_In_Progress", done="parcel-event")
    await seller.press("Lost")
    await seller.sees("Shipping_Review_Denied", done="parcel-event")
    # The carrier's loss, said as such: no party reported a problem.
    await expect(seller.page.locator("[data-next]")).to_contain_text(
        seller.t("The carrier lost the parcel; the money stays held.")
    )
    await expect(seller.page.locator("[data-lost]")).to_have_text(
        seller.t("The carrier lost the parcel.")
    )
    return tracking


@pytest.mark.parametrize("language", list(LOCALES))
@pytest.mark.parametrize(("device", "width"), [(PHONE, 390), (DESKTOP, 1280)])
async def test_an_operator_finds_the_claim_for_a_parcel_the_carrier_lost(
    served: tuple[LiveServer, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    width: int,
    language: str,
) -> None:
    live, db_url = served
    name = f"carrier-claim-{width}-{language}"
    seller = await Person.open(browser, shots, device, language=language)
    ops = None
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            deal, seller_url, _ = await shipping_pending(live)
            tracking = await _lost(seller, seller_url)
            await seller.shot(f"{name}-1-seller-lost")

            email = f"claims-{width}-{language}@ops.example.com"
            ops = await operator(browser, shots, device, language, db_url, live, email, "support")
            page = ops.page
            await ops.goto(f"{live.base}/back-office/disputes")
            row = page.locator(f'[data-dispute="{deal}"]')
            await expect(row).to_contain_text(ops.t("the carrier lost the parcel"))
            await ops.shot(f"{name}-2-queue")

            await row.locator("a").click()
            await page.wait_for_url(f"{live.base}/back-office/disputes/{deal}")
            await ops.audit()
            dispute = page.locator("[data-dispute]")
            await expect(dispute.locator('[data-opened-by="carrier"]')).to_have_text(
                ops.t("The carrier, who lost the parcel")
            )
            await expect(dispute.locator("[data-carrier-claim]")).to_have_text(
                ops.t(
                    "%(carrier)s lost the parcel. Claim the loss from %(carrier)s with these "
                    "details.",
                    carrier="Sandbox Post",
                )
            )
            await expect(dispute.locator("[data-claim-shipment]")).not_to_be_empty()
            await expect(dispute).to_contain_text(tracking)
            await expect(dispute.locator("[data-claim-value]")).to_have_text(ops.amount(450))
            if language != "en":
                assert english_in(await page.content()) == []
            await dispute.scroll_into_view_if_needed()
            await ops.shot(f"{name}-3-claim")
            assert not seller.errors, seller.errors
            assert not ops.errors, ops.errors
    finally:
        await seller.context.close()
        if ops is not None:
            await ops.context.close()
