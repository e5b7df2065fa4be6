"""The Vipps MobilePay checkout walked in Chromium, as a Norwegian and a Swedish buyer see it (at
390 and 1280 px), against the real ``dealbroker serve`` configured for Vipps and the Vipps
emulator (its own process on loopback, ``tests/payments/vipps_emulator.py``):

- Vipps cannot start the payment just now (the emulator answers 503): our page says so, in the
  buyer's language, with the way back to the deal;
- the buyer presses "Pay with Vipps", is sent on to Vipps's landing page (by our hand-off
  page, which moves on by itself) and rejects there: back on the deal's page, which says the
  payment did not go through and offers the ways to pay again;
- the buyer pays with Vipps again and approves: back on the deal's page, paid
  (``Pickup_Pending``);
- the old checkout address, opened again, says the payment can no longer be made.

Our pages are checked with axe-core and for English, and screenshotted
(``vipps-WIDTH-LANGUAGE-*.png`` in ``docs/screenshots/`` with ``DEALBROKER_TEST_SCREENSHOTS=1``);
the emulator's landing page is Vipps's, not ours, and is neither audited nor kept. With
JavaScript off the same walk works (every step is a form, a redirect or the hand-off page's
refresh).

These contexts bypass the pages' Content-Security-Policy (to inject axe-core).
``test_the_pages_policy_lets_the_buyer_reach_vipps`` walks with it enforced, as in a buyer's
browser: a redirect from the pay form to Vipps would be blocked by ``form-action 'self'``, which
is why the checkout hands off through a page of ours.
"""

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser import BUYER_EMAIL, BUYER_NAME, DESKTOP, PHONE, Integration, screenshots
from tests.conftest import BACKENDS, database_url
from tests.payments.vipps_process import VippsEmulator
from tests.processes import Server, Worker, free_port
from tests.web.test_browser_exceptions import Walker, _approve, _buyer_signs, _deal, _offer

try:
    from playwright.async_api import Browser, Page, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

WALKS = [("nb", 390), ("nb", 1280), ("sv", 390), ("sv", 1280)]
BUTTONS = ["Pay with Vipps", "Pay by card"]  # NOK's order
CHECKOUT = re.compile(r"/pay/vipps/(?!return/)[^/?]+")


class VippsServer:
    """``serve`` whose Vipps payments go to the emulator (and a ``worker`` beside PostgreSQL).
    Its own port is known before it starts: the address Vipps sends the buyer back to is built
    from ``DEALBROKER_BASE_URL``."""

    def __init__(self, db_url: str, workdir: Path, emulator: VippsEmulator) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        settings = emulator.settings(DEALBROKER_BASE_URL=self.base)
        if not db_url.startswith("sqlite"):
            settings["DEALBROKER_EMBEDDED_WORKER"] = "off"
        self.server = Server(db_url, workdir, port=port, **settings)  # type: ignore[arg-type]
        self.worker = (
            None if db_url.startswith("sqlite") else Worker(db_url, workdir, **settings)  # type: ignore[arg-type]
        )
        if self.worker is not None:
            self.worker.wait_ready()
        emulator.webhook_to(f"{self.base}/payments/v1/vipps/webhook")

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
        self.server.stop()


@pytest.fixture(scope="module", params=BACKENDS)
def vipps_live(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    vipps_emulator: VippsEmulator,
) -> Iterator[VippsServer]:
    workdir = tmp_path_factory.mktemp(f"vipps-browser-{request.param}")
    if request.param == "sqlite":
        db_url = f"sqlite+aiosqlite:///{workdir / 'vipps.db'}"
    else:
        db_url = database_url(request.param, workdir, "vipps_browser")
    live = VippsServer(db_url, workdir, vipps_emulator)
    try:
        yield live
    finally:
        live.stop()
        (workdir / "serve.log").write_text(live.server.output())


@pytest.fixture
async def market(vipps_live: VippsServer) -> AsyncIterator[Integration]:
    """The sandbox's demo integration of the server, calling its API."""
    async with httpx.AsyncClient(base_url=vipps_live.base, timeout=10) as api:
        token = await api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(
                vipps_live.server.credential("client id"),
                vipps_live.server.credential("client secret"),
            ),
        )
        assert token.status_code == 200, token.text
        api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        yield Integration(api, vipps_live.server.credential("webhook secret"))


async def _walker(browser: "Browser", shots: Path, device: dict[str, Any], **how: Any) -> Walker:
    person = await Walker.open(browser, shots, device, **how)
    assert isinstance(person, Walker)
    return person


async def _to_vipps(page: "Page", words: str, emulator: VippsEmulator) -> str:
    """Press the Vipps button: our checkout creates the payment at Vipps and redirects to its
    landing page. The checkout address the button led to."""
    checkouts: list[str] = []
    page.on("request", lambda r: checkouts.append(r.url) if CHECKOUT.search(r.url) else None)
    await page.locator("main").get_by_role("button", name=words, exact=True).click()
    # Our hand-off page moves on to Vipps by itself (a redirect from the pay form could not
    # leave our origin under the page's form-action policy).
    await page.wait_for_url(f"{emulator.base}/landing/**")
    await page.wait_for_load_state()
    assert checkouts, "the button did not lead to our Vipps checkout"
    return checkouts[0]


async def _decide(page: "Page", action: str) -> None:
    """At Vipps's landing page: approve or reject; Vipps sends the buyer back to us, and our
    return page on to the deal's."""
    async with page.expect_navigation():
        await page.locator(f"button[value={action}]").click()
    await page.wait_for_load_state()


async def _signed_deal(
    browser: "Browser", market: Integration, language: str, name: str, tmp_path: Path
) -> str:
    """A pickup deal the seller approved and the buyer signed: its page's URL for the buyer."""
    seller = await _walker(browser, tmp_path, DESKTOP, language=language)
    buyer = await _walker(browser, tmp_path, DESKTOP, language=language)
    try:
        deal, url = await _deal(market, name)
        await _offer(buyer, url, "Pickup", BUYER_NAME, BUYER_EMAIL)
        await _approve(seller, deal, BUYER_NAME)
        await _buyer_signs(buyer, url, "Pickup")
        return re.sub(r"[?&]done=[^&]*", "", buyer.page.url)  # the page without the flash
    finally:
        await seller.context.close()
        await buyer.context.close()


async def _methods_offered(buyer: Walker) -> None:
    methods = buyer.page.locator("form[data-methods] button")
    await expect(methods).to_have_count(2)
    for i, words in enumerate(BUTTONS):
        assert await methods.nth(i).get_attribute("value") == ("vipps", "card")[i]
        await expect(methods.nth(i).locator("span")).to_have_text(buyer.t(words))


@pytest.mark.parametrize(("language", "width"), WALKS, ids=[f"{lang}-{w}" for lang, w in WALKS])
async def test_the_buyer_pays_with_vipps(
    browser: "Browser",
    market: Integration,
    vipps_live: VippsServer,
    vipps_emulator: VippsEmulator,
    language: str,
    width: int,
    tmp_path: Path,
) -> None:
    shots = screenshots(tmp_path)
    name = f"vipps-{width}-{language}"
    deal_url = await _signed_deal(browser, market, language, f"Sykkel {language} {width}", tmp_path)
    buyer = await _walker(browser, shots, DESKTOP if width == 1280 else PHONE, language=language)
    page = buyer.page
    try:
        await buyer.goto(deal_url)
        await buyer.sees("Signed")
        await _methods_offered(buyer)
        await buyer.step(f"{name}-pay")

        # Vipps cannot start the payment just now: our page says so and leads back.
        vipps_emulator.fail("503", count=1, path="/epayment/v1/payments")
        async with page.expect_navigation() as navigation:
            await page.get_by_role("button", name=buyer.t(BUTTONS[0]), exact=True).click()
        response = await navigation.value
        assert response is not None
        assert response.status == 503, response.status
        assert CHECKOUT.search(page.url), page.url
        # The message is shown twice (base.html's flash and vipps_pay.html's own): ``first``.
        await expect(page.locator("[role=alert]").first).to_have_text(
            buyer.t("Vipps could not start the payment just now. Try again in a moment.")
        )
        await buyer.audit()
        await buyer.step(f"{name}-unavailable")
        async with page.expect_navigation():
            await page.get_by_role("link", name=buyer.t("Back to the deal")).click()
        await buyer.sees("Signed")
        await buyer.audit()

        # At Vipps the buyer rejects: back on the deal, told, offered the methods again.
        await _to_vipps(page, buyer.t(BUTTONS[0]), vipps_emulator)
        await _decide(page, "reject")
        assert page.url.startswith(deal_url.split("?")[0]), page.url
        assert "done=payment-cancelled" in page.url, page.url
        await expect(page.locator("[data-status]")).to_have_attribute("data-status", "Signed")
        await expect(page.locator("[role=alert]")).to_have_text(
            buyer.t("The payment was cancelled. You can try again.")
        )
        await expect(
            page.get_by_text(buyer.t("Your last payment did not go through."), exact=True)
        ).to_be_visible()
        await _methods_offered(buyer)
        await buyer.audit()
        await buyer.step(f"{name}-cancelled")

        # Again, and approved: paid, waiting for the handover.
        checkout = await _to_vipps(page, buyer.t(BUTTONS[0]), vipps_emulator)
        await _decide(page, "approve")
        await buyer.sees("Pickup_Pending", done="paid")
        await expect(page.locator("form[data-methods]")).to_have_count(0)
        await buyer.audit()
        await buyer.step(f"{name}-paid")

        # The checkout's address again (the browser's history): nothing more to pay.
        closed = await page.goto(checkout)
        assert closed is not None
        assert closed.status == 409, closed.status
        await expect(page.locator("[role=alert]").first).to_have_text(
            buyer.t("This payment can no longer be made.")
        )
        await expect(page.locator("[data-payment-status]")).to_have_attribute(
            "data-payment-status", "Paid"
        )
        await buyer.audit()
        await buyer.step(f"{name}-closed")

        # Chromium logs the 503 and the 409 as failed loads; nothing else went wrong.
        assert len(buyer.errors) == 2, buyer.errors
        assert all(re.search(r"status of (503|409)", e) for e in buyer.errors), buyer.errors
    finally:
        await buyer.context.close()


async def test_vipps_works_with_javascript_off(
    browser: "Browser",
    market: Integration,
    vipps_live: VippsServer,
    vipps_emulator: VippsEmulator,
    tmp_path: Path,
) -> None:
    """Plain forms and redirects: rejected, then paid, no script run. (The context bypasses the
    pages' policy as the audited walks do; the policy itself: the next test.)"""
    deal_url = await _signed_deal(browser, market, "sv", "Cykel utan skript", tmp_path)
    offline: Any = await browser.new_context(
        java_script_enabled=False, bypass_csp=True, locale="sv-SE", **PHONE
    )
    buyer = Walker(offline, await offline.new_page(), tmp_path, audits=False, language="sv")
    page = buyer.page
    try:
        await page.goto(deal_url)
        await _to_vipps(page, buyer.t(BUTTONS[0]), vipps_emulator)
        await _decide(page, "reject")
        await expect(page.locator("[role=alert]")).to_have_text(
            buyer.t("The payment was cancelled. You can try again.")
        )
        await _methods_offered(buyer)
        await buyer.no_english()
        await _to_vipps(page, buyer.t(BUTTONS[0]), vipps_emulator)
        await _decide(page, "approve")
        await buyer.sees("Pickup_Pending", done="paid")
        await buyer.no_english()
    finally:
        await offline.close()


async def test_the_pages_policy_lets_the_buyer_reach_vipps(
    browser: "Browser",
    market: Integration,
    vipps_live: VippsServer,
    vipps_emulator: VippsEmulator,
    tmp_path: Path,
) -> None:
    """As a buyer's browser has it: the pages' Content-Security-Policy enforced."""
    deal_url = await _signed_deal(browser, market, "nb", "Sykkel med policy", tmp_path)
    buyer = await _walker(browser, tmp_path, PHONE, bypass_csp=False, language="nb")
    page = buyer.page
    try:
        await page.goto(deal_url)
        await _to_vipps(page, buyer.t(BUTTONS[0]), vipps_emulator)
        await _decide(page, "approve")
        await buyer.sees("Pickup_Pending", done="paid")
    finally:
        await buyer.context.close()
