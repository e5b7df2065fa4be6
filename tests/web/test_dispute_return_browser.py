"""Return then refund clicked through in a real headless Chromium, in Norwegian Bokmål and in
Swedish, on a phone (390 px) and a desktop (1280 px): the buyer's page shows the seller's
return address and the deadline and takes the carrier and tracking number; the seller's page
then shows them and takes the confirmation of receipt (asked again), and the buyer is refunded.

The real ``dealbroker serve`` runs (plus a ``dealbroker worker`` on PostgreSQL); the deal is
taken to its dispute through the API and the sandbox, and decided with the operator's real
command (``dealbroker disputes resolve --return-then-refund``). Every page state is checked
with axe-core, must fit the window, and is screenshotted (to ``docs/screenshots/`` with
``DEALBROKER_TEST_SCREENSHOTS=1``), as in ``tests/browser.py``.
"""

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import DESKTOP, FLOW_SECONDS, PHONE, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.processes import cli
from tests.web.walks import disputed_with_return

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

ADDRESS = "Kari Nordmann, Storgata 1, 0155 Oslo"
CARRIER, TRACKING = "Posten", "RR123456785NO"


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The running server and its database (the operator's command needs it)."""
    yield from serve_module(request, tmp_path_factory, "returns")


# The operator's reasons, in the parties' language, with markup that must show as text.
REASONS = {
    "nb": "Bildene viser <b>sprekken</b> i rammen.",
    "sv": "Bilderna visar <b>sprickan</b> i ramen.",
}


def _decide(db_url: str, deal_id: str, reason: str) -> None:
    """The operator's decision, with the operator's command."""
    decided = cli(
        db_url,
        "disputes",
        "resolve",
        deal_id,
        "--return-then-refund",
        "--return-address",
        ADDRESS,
        "--reason",
        reason,
    )
    assert decided.returncode == 0, decided.stderr


@pytest.mark.parametrize("language", ["nb", "sv"])
@pytest.mark.parametrize("device", ["phone", "desktop"])
async def test_return_then_refund_in_a_browser(
    browser: "Browser",
    served: tuple[LiveServer, str],
    shots: Path,
    language: str,
    device: str,
) -> None:
    live, db_url = served
    window: dict[str, Any] = PHONE if device == "phone" else DESKTOP
    width = window["viewport"]["width"]
    buyer = await Person.open(browser, shots, window, language=language)
    seller = await Person.open(browser, shots, window, language=language)
    name = f"return-{language}-{width}"
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            deal_id, seller_url, buyer_url = await disputed_with_return(live, language)
            # Undecided: both pages say by when we decide.
            await buyer.goto(buyer_url)
            await buyer.sees("Pickup_Denied")
            await expect(buyer.page.locator("[data-decide-by]")).to_be_visible()
            await buyer.shot(f"{name}-0-buyer-decide-by")
            await seller.goto(seller_url)
            await expect(seller.page.locator("[data-decide-by]")).to_be_visible()
            reason = REASONS[language]
            _decide(db_url, deal_id, reason)
            # The buyer reads where to send it and by when, and gives carrier and tracking.
            await buyer.goto(buyer_url)
            await buyer.sees("Pickup_Denied")
            card = buyer.page.locator("[data-return]")
            await expect(card.locator("[data-return-address]")).to_contain_text(ADDRESS)
            await expect(card.locator("[data-return-send-by]")).to_be_visible()
            # Who pays the postage, and the operator's reasons, as they wrote them.
            await expect(card.locator("[data-return-postage]")).to_have_text(
                buyer.t(
                    "You pay the postage for sending it back: the refund is the price you "
                    "paid, without the postage."
                )
            )
            await expect(buyer.page.locator("[data-decision-reason]")).to_contain_text(reason)
            await buyer.shot(f"{name}-1-buyer-send")
            await seller.goto(seller_url)
            await expect(seller.page.locator("[data-return-postage]")).to_have_text(
                seller.t(
                    "The buyer pays the postage for sending it back; you pay nothing for the "
                    "return."
                )
            )
            await expect(seller.page.locator("[data-decision-reason]")).to_contain_text(reason)
            await seller.shot(f"{name}-1-seller-decided")
            await buyer.label("Carrier").fill(CARRIER)
            await buyer.label("Tracking number").fill(TRACKING)
            await buyer.press("I have sent it back")
            await buyer.sees("Pickup_Denied", done="return-sent")
            await expect(buyer.page.locator("[data-return-tracking]")).to_contain_text(TRACKING)
            await expect(buyer.page.locator("[data-return-confirm-by]")).to_be_visible()
            await buyer.shot(f"{name}-2-buyer-sent")
            # The seller sees the tracking number and confirms the receipt, asked again.
            await seller.goto(seller_url)
            await seller.sees("Pickup_Denied")
            await expect(seller.page.locator("[data-return-tracking]")).to_contain_text(TRACKING)
            await seller.shot(f"{name}-3-seller-confirm")
            await seller.press("I have received it back")
            await expect(seller.page.locator("[data-confirm]")).to_be_visible()
            await seller.shot(f"{name}-4-seller-asked")
            await seller.press("Yes, I have it back")
            await seller.sees("Refunded", done="return-received")
            await seller.reload_until_payment("Refunded")  # the refund made by the worker
            await expect(seller.page.locator("[data-decision-reason]")).to_contain_text(reason)
            await seller.shot(f"{name}-5-seller-refunded")
            await buyer.goto(buyer_url)
            await buyer.sees("Refunded")
            await expect(buyer.page.locator("[data-money-at]")).to_have_text(
                buyer.t("Refunded to you in full.")
            )
            await expect(buyer.page.locator("[data-decision-reason]")).to_contain_text(reason)
            await buyer.shot(f"{name}-6-buyer-refunded")
        assert buyer.errors == []
        assert seller.errors == []
    except BaseException:
        sys.stderr.write(f"--- server output ---\n{live.output()}\n")
        raise
    finally:
        await buyer.context.close()
        await seller.context.close()
