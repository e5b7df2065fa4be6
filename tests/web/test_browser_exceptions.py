"""The paths off the happy one, clicked through in a real headless Chromium: a parcel that does
not arrive (the buyer reports it once the usual delivery time has passed), a parcel the carrier
sends back (reported by the integration's carrier events), a pickup whose seller reports a
problem with the handover, and an approval that lapses because the approved buyer did not pay
in time.

Each path is walked by the seller and the buyer in Norwegian Bokmål and in Swedish, on a phone
(390 px) and a desktop (1280 px) window: every page state along it (before the action, the
form, the refusal of a bad input, the confirmation, after) is checked with axe-core, must fit
the window, must say in the page's language where the money is and what happens next, and must
hold no English. The server, the browser, the integration and the screenshots are those of
``tests/browser.py``: with ``DEALBROKER_TEST_SCREENSHOTS=1`` the Norwegian desktop walks and the
Swedish phone walks (``phone-`` names) are written to ``docs/screenshots/``, the other two to a
temporary directory.
"""

import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from dealbroker.core.settings import Settings
from dealbroker.web.render import LABELS
from tests.browser import (
    BUYER_EMAIL,
    BUYER_NAME,
    DESKTOP,
    FLOW_SECONDS,
    PHONE,
    SELLER_NAME,
    Integration,
    LiveServer,
    Person,
    screenshots,
)
from tests.conftest import SELLER
from tests.web.english import english_in

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

DAY = 24 * 3600
SETTINGS = Settings()
ASKING, OFFERED = 1000, 950
# (language, window): the first two are the ones docs/screenshots shows.
WALKS = [("nb", "desktop"), ("sv", "phone"), ("sv", "desktop"), ("nb", "phone")]
DEVICES = {"desktop": DESKTOP, "phone": PHONE}
IN_DOCS = {("nb", "desktop"), ("sv", "phone")}
WHO_US = "We (dealbroker)"
LAPSES = "The approval lapses and the deal takes offers again."
# Where the money is during a dispute, as each party reads it.
BUYER_WAITS = (
    "Held safely by dealbroker while we look into it; then refunded to you or paid to the seller."
)
SELLER_WAITS = (
    "Held safely by dealbroker while we look into it; then paid to you or refunded to the buyer."
)


@pytest.fixture(params=WALKS, ids=[f"{lang}-{window}" for lang, window in WALKS])
def walk(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str, Path]:
    """(language, window, where its screenshots go)."""
    language, window = request.param
    return language, window, screenshots(tmp_path, keep=(language, window) in IN_DOCS)


class Walker(Person):
    """A person whose every page is also read for English and screenshotted under the walk's
    naming (``phone-`` on a phone)."""

    window = "desktop"

    async def shot(self, name: str, overflows: bool = False) -> None:
        await super().shot(f"phone-{name}" if self.window == "phone" else name, overflows)

    async def no_english(self) -> None:
        found = english_in(await self.page.content())
        assert not found, f"English on {self.page.url}: {found}"

    async def step(self, name: str) -> None:
        """The page as it stands: no English, fits the window, screenshotted."""
        await self.no_english()
        await self.shot(name)

    def says(self, text: str, **values: object) -> str:
        """``text`` as the page shows it, whitespace folded."""
        return " ".join(self.t(text, **values).split())

    async def refused(self, button: str, within: str = "main") -> None:
        """Submit a form whose input is refused: the page answers 400 and says why."""
        async with self.page.expect_navigation() as navigation:
            await (
                self.page.locator(within)
                .get_by_role("button", name=self.t(button), exact=True)
                .click()
            )
        response = await navigation.value
        assert response is not None
        assert response.status == 400, response.status
        await self.audit()

    async def money_is(self, where: str) -> None:
        """The money's place on the page, in the page's words."""
        await expect(self.page.locator("[data-money-at]")).to_have_text(self.t(where))

    async def reload_until_status(self, status: str, timeout: float = 10.0) -> None:
        """Reload the page until the deal is in ``status`` (a deadline the worker fires)."""
        deadline = time.monotonic() + timeout
        marker = self.page.locator("[data-status]")
        while await marker.get_attribute("data-status") != status:
            assert time.monotonic() < deadline, f"the deal never became {status}"
            await asyncio.sleep(0.2)
            await self.page.reload()
        await self.audit()

    async def reload_until_money(self, where: str, timeout: float = 10.0) -> None:
        """Reload the page (as a person would) until the money is ``where`` (a refund is made
        by the worker, a moment after the status changed)."""
        deadline = time.monotonic() + timeout
        marker = self.page.locator("[data-money-at]")
        while (await marker.inner_text()).strip() != self.t(where):
            assert time.monotonic() < deadline, f"the money never was: {where}"
            await asyncio.sleep(0.2)
            await self.page.reload()
        await self.audit()


async def _people(browser: "Browser", walk: tuple[str, str, Path]) -> tuple[Walker, Walker]:
    language, window, shots = walk
    people = []
    for _ in range(2):
        person = await Walker.open(browser, shots, DEVICES[window], language=language)
        person.window = window
        people.append(person)
    return people[0], people[1]


async def _advance_clock(integration: Integration, seconds: int) -> dict[str, Any]:
    moved = await integration.api.post(
        "/sandbox/v1/clock/advance",
        json={"seconds": seconds},
        headers={"webhook-secret": integration.webhook_secret},
    )
    assert moved.status_code == 200, moved.text
    return moved.json()


def _millis() -> int:
    """Now, as the carrier events' ``occurredAt`` (a minute ago: the scan came before the report)."""
    return int(time.time() * 1000) - 60_000


async def _deal(integration: Integration, name: str) -> tuple[dict[str, Any], str]:
    """A deal of a seller of its own (a payout account saved elsewhere must not pay it out), and
    an offer link: (the deal, the link's URL)."""
    api = integration.api
    seller = {**SELLER, "email": f"kari.{uuid.uuid4().hex[:8]}@example.com"}
    created = await api.post(
        "/deals/v1/deals", json={"name": name, "price": ASKING, "seller": seller}
    )
    assert created.status_code == 201, created.text
    deal = created.json()
    link = await api.post(f"/deals/v1/deals/{deal['id']}/offer", json={"price": OFFERED})
    assert link.status_code == 201, link.text
    return deal, link.json()["url"]


async def _offer(buyer: Walker, url: str, shipping: str, name: str, email: str) -> None:
    await buyer.goto(url)
    await buyer.label("Send it with a carrier" if shipping == "Carrier" else "I pick it up").check()
    await buyer.label("Your name").fill(name)
    await buyer.label("Your email").fill(email)
    await buyer.press("Send offer")
    await buyer.press("Yes, send the offer")
    await buyer.sees("Draft", done="offer")


async def _approve(seller: Walker, deal: dict[str, Any], buyer_name: str) -> None:
    """The seller signs the deal (if not yet) and approves ``buyer_name``'s offer."""
    await seller.goto(deal["url"])
    if await seller.page.locator("input[name=consent]").count():
        await seller.sign(SELLER_NAME)
    row = seller.page.locator("[data-offer]", has_text=buyer_name)
    await row.get_by_role("button", name=seller.t("Approve"), exact=True).click()
    await seller.page.wait_for_load_state()
    await seller.press("Yes, approve the offer")
    await seller.sees("Ad", done="approved")


async def _buyer_signs(buyer: Walker, url: str, shipping: str) -> None:
    await buyer.goto(url)
    await buyer.label("Your phone").fill("+47 400 00 001")
    if shipping == "Carrier":
        await buyer.label("Delivery address").fill("Kongens gate 2")
        await buyer.label("Postcode").fill("7011")
        await buyer.label("Town").fill("Trondheim")
    await buyer.sign(BUYER_NAME)
    await buyer.sees("Signed", done="signed")


async def _paid(
    buyer: Walker, seller: Walker, integration: Integration, shipping: str, name: str
) -> tuple[dict[str, Any], str]:
    """A deal both signed and the buyer paid, all through the pages."""
    deal, url = await _deal(integration, name)
    await _offer(buyer, url, shipping, BUYER_NAME, BUYER_EMAIL)
    await _approve(seller, deal, BUYER_NAME)
    await _buyer_signs(buyer, url, shipping)
    await buyer.press("Pay by card")
    await buyer.press("Pay (succeeds)")
    pending = "Shipping_Pending" if shipping == "Carrier" else "Pickup_Pending"
    await buyer.sees(pending, done="paid")
    return deal, url


async def _payment(integration: Integration, deal: dict[str, Any]) -> dict[str, Any]:
    got = await integration.api.get(f"/deals/v1/deals/{deal['id']}")
    assert got.status_code == 200, got.text
    return got.json()


async def _run_walk(live: LiveServer, people: tuple[Walker, Walker], walk: Any) -> None:
    buyer, seller = people
    try:
        async with asyncio.timeout(3 * FLOW_SECONDS):
            await walk(buyer, seller)
    except BaseException:
        sys.stderr.write(f"--- server output ---\n{live.output()}\n")
        raise
    finally:
        await buyer.context.close()
        await seller.context.close()


def _only_refusals(person: Walker, refusals: int) -> None:
    """Chromium logs each refusal's 400 as a failed load; nothing else may have gone wrong."""
    assert len(person.errors) == refusals, person.errors
    assert all("status of 400" in e for e in person.errors), person.errors


# --- a parcel that does not arrive -------------------------------------------------------------


async def test_a_parcel_that_does_not_arrive(
    browser: "Browser", integration: Integration, live: LiveServer, walk: Any
) -> None:
    people = await _people(browser, walk)

    async def run(buyer: Walker, seller: Walker) -> None:
        deal, url = await _paid(buyer, seller, integration, "Carrier", "Road bike")
        await seller.goto(deal["url"])
        await seller.label("Carrier", exact=True).fill("Posten")
        await seller.label("Tracking number").fill("370712345678")
        await seller.press("I handed it to the carrier")
        await seller.sees("Shipping_In_Progress", done="handed", payment="Paid")
        # The integration reports the carrier's scan; both pages list it.
        scanned = await integration.api.post(
            f"/deals/v1/deals/{deal['id']}/shipment-events",
            json={
                "type": "in_transit",
                "carrier": "Posten",
                "trackingNumber": "370712345678",
                "occurredAt": _millis(),
            },
        )
        assert scanned.status_code == 200, scanned.text
        await seller.goto(deal["url"])
        log = seller.page.locator("[data-carrier-log]")
        await expect(log).to_contain_text(
            seller.t("The parcel is on its way with %(carrier)s", carrier="Posten")
        )
        await seller.money_is("Held safely by dealbroker until the item has changed hands.")
        await seller.step("13-seller-in-transit")

        # Before the usual delivery time: the buyer is told from when they can report it.
        await buyer.goto(url)
        await buyer.sees("Shipping_In_Progress")
        await expect(buyer.page.locator("[data-carrier-log]")).to_contain_text("Posten")
        early = buyer.page.locator("[data-not-received-from]")
        await expect(early).to_be_visible()
        await expect(early).to_contain_text(
            buyer.t(
                "If the parcel has not arrived by %(when)s, you can report it here.", when="@"
            ).split("@")[0]
        )
        await expect(buyer.page.locator("[data-not-received]")).to_have_count(0)
        next_card = buyer.page.locator("[data-next]")
        await expect(next_card.locator("[data-due]")).to_contain_text(
            buyer.t(
                "If it has not arrived by then, we look into it with you both; the money stays held."
            )
        )
        await buyer.money_is("Held safely by dealbroker until the item has changed hands.")
        await buyer.step("14-buyer-in-transit")

        # The usual delivery time passes (sandbox clock): now the buyer may report it.
        days = SETTINGS.not_received_after_days
        # (Deadlines of the walks before this one, on the same integration, may fall due too.)
        await _advance_clock(integration, days * DAY + 60)
        await buyer.goto(url)
        await expect(buyer.page.locator("[data-not-received-from]")).to_have_count(0)
        await buyer.step("15-buyer-not-received-button")
        await buyer.press("The parcel has not arrived")
        await expect(buyer.page.locator("[data-confirm]")).to_contain_text(
            buyer.says(
                "Report that the parcel has not arrived? The money stays held while we look "
                "into it with you, the seller and the carrier, and then either refund you or "
                "pay the seller."
            )
        )
        await buyer.step("16-buyer-confirm-not-received")
        await buyer.press("Yes, it has not arrived")
        await buyer.sees("Shipping_Review_Denied", done="not-received")
        await expect(buyer.page.locator("[data-dispute]")).to_contain_text(
            buyer.t("The parcel did not arrive.")
        )
        await expect(buyer.page.locator("[data-next]")).to_contain_text(
            buyer.t("You reported that the parcel has not arrived; the money stays held.")
        )
        await expect(buyer.page.locator("[data-next]")).to_contain_text(buyer.t(WHO_US))
        await expect(buyer.page.locator("[data-next]")).to_contain_text(
            buyer.t(
                "We look into it with you both and the carrier, then refund you or pay the seller."
            )
        )
        await buyer.money_is(BUYER_WAITS)
        await buyer.step("17-buyer-not-received-reported")

        await seller.goto(deal["url"])
        await seller.sees("Shipping_Review_Denied", payment="Paid")
        await expect(seller.page.locator("[data-dispute] h2")).to_have_text(
            seller.t("The parcel did not arrive")
        )
        await expect(seller.page.locator("[data-next]")).to_contain_text(
            seller.t("The buyer reported that the parcel has not arrived; the money stays held.")
        )
        await expect(
            seller.page.get_by_role("heading", name=seller.t("Sandbox carrier"))
        ).to_have_count(0)
        await seller.money_is(SELLER_WAITS)
        await seller.step("18-seller-parcel-not-arrived")
        # The money is where the pages say: paid and held, nothing refunded or paid out.
        got = await _payment(integration, deal)
        assert got["status"] == "Shipping_Review_Denied"
        assert buyer.errors == []
        assert seller.errors == []

    await _run_walk(live, people, run)


async def test_a_parcel_the_carrier_returns(
    browser: "Browser", integration: Integration, live: LiveServer, walk: Any
) -> None:
    people = await _people(browser, walk)

    async def run(buyer: Walker, seller: Walker) -> None:
        deal, url = await _paid(buyer, seller, integration, "Carrier", "Armchair")
        await seller.goto(deal["url"])
        await seller.label("Carrier", exact=True).fill("Bring")
        await seller.label("Tracking number").fill("70730259304981")
        await seller.press("I handed it to the carrier")
        await seller.sees("Shipping_In_Progress", done="handed", payment="Paid")
        returned = await integration.api.post(
            f"/deals/v1/deals/{deal['id']}/shipment-events",
            json={
                "type": "returned",
                "carrier": "Bring",
                "trackingNumber": "70730259304981",
                "occurredAt": _millis(),
            },
        )
        assert returned.status_code == 200, returned.text
        # The buyer's page: refunded in full, and why.
        await buyer.goto(url)
        await buyer.sees("Refunded")
        await expect(buyer.page.locator("[data-carrier-log]")).to_contain_text(
            buyer.t("%(carrier)s returned the parcel to the seller", carrier="Bring")
        )
        shown = buyer.page.locator("[data-next]")
        await expect(shown).to_contain_text(
            buyer.t("The carrier sent the item back to the seller.")
        )
        await expect(shown).to_contain_text(buyer.t("Your payment is refunded in full."))
        await buyer.reload_until_money("Refunded to you in full.")
        await buyer.step("19-buyer-parcel-returned")
        # The seller's: the refund, the amount, and no payout.
        await seller.goto(deal["url"])
        await seller.reload_until_money("Refunded to the buyer: you receive nothing for this deal.")
        await seller.sees("Refunded", payment="Refunded")
        await expect(seller.page.locator("[data-refunded]")).to_have_text(seller.amount(OFFERED))
        await expect(seller.page.locator("[data-payout]")).to_have_count(0)
        await seller.money_is("Refunded to the buyer: you receive nothing for this deal.")
        await seller.step("20-seller-parcel-returned")
        assert buyer.errors == []
        assert seller.errors == []

    await _run_walk(live, people, run)


# --- a pickup whose seller reports a problem ---------------------------------------------------


async def test_a_pickup_whose_seller_reports_a_problem(
    browser: "Browser", integration: Integration, live: LiveServer, walk: Any
) -> None:
    people = await _people(browser, walk)

    async def run(buyer: Walker, seller: Walker) -> None:
        deal, url = await _paid(buyer, seller, integration, "Pickup", "Lawn mower")
        await seller.goto(deal["url"])
        await seller.sees("Pickup_Pending", payment="Paid")
        await expect(seller.page.locator("[data-code-first]")).to_contain_text(
            seller.t("Do not hand the item over before the buyer's code is accepted here.")
        )
        await expect(seller.page.locator("[data-next] [data-due]")).to_be_visible()
        await seller.money_is("Held safely by dealbroker until the item has changed hands.")
        await seller.step("21-seller-pickup-warning")

        # The form, opened; "something else" without the seller's words is refused.
        await seller.page.locator("[data-pickup-problem] summary").click()
        await seller.label("Something else (say what below)").check()
        await seller.step("22-seller-pickup-problem-form")
        await seller.refused("Report the problem", within="[data-pickup-problem]")
        reason = seller.label("What happened, in your words")
        await expect(reason).to_have_attribute("aria-invalid", "true")
        await expect(reason).to_have_accessible_description(
            seller.t("Say what happened, so we can look into it.")
        )
        await expect(seller.page.locator("[data-pickup-problem]")).to_have_attribute("open", "")
        await seller.step("23-seller-pickup-problem-refused")

        said = {
            "nb": "Han betalte og sendte broren sin, som ikke hadde koden.",
            "sv": "Han betalade och skickade sin bror, som inte hade koden.",
        }[seller.language]
        await seller.label("What happened, in your words").fill(said)
        await seller.press("Report the problem", within="[data-pickup-problem]")
        await expect(seller.page.locator("[data-confirm]")).to_contain_text(
            seller.says(
                "Report a problem with the handover? The deal goes to us to decide: the money "
                "stays held, and you can no longer confirm the handover with the code."
            )
        )
        await seller.step("24-seller-confirm-pickup-problem")
        await seller.press("Report the problem")
        await seller.sees("Pickup_Denied", done="problem-reported", payment="Paid")
        await expect(seller.page.locator("[data-dispute]")).to_contain_text(f"“{said}”")
        await expect(seller.page.locator("[data-next]")).to_contain_text(
            seller.t("You reported a problem with the handover; the money stays held.")
        )
        await expect(seller.page.locator("[data-pickup-problem]")).to_have_count(0)
        await seller.money_is(SELLER_WAITS)
        await seller.step("25-seller-pickup-problem-reported")

        await buyer.goto(url)
        await buyer.sees("Pickup_Denied")
        await expect(buyer.page.locator("[data-dispute]")).to_contain_text(
            buyer.t("The seller reported a problem with the handover: “%(reason)s”.", reason=said)
        )
        await expect(buyer.page.locator("[data-next]")).to_contain_text(
            buyer.t("The seller reported a problem with the handover; the money stays held.")
        )
        await expect(buyer.page.locator("[data-handover-code]")).to_have_count(0)
        # No meeting to go to any more: the seller's contact card is gone with the handover.
        await expect(buyer.page.locator("[data-seller-contact]")).to_have_count(0)
        await expect(buyer.page.locator("[data-next]")).to_contain_text(
            buyer.t("We look into it with you both, then refund you or pay the seller.")
        )
        await buyer.money_is(BUYER_WAITS)
        await buyer.step("26-buyer-seller-reported-problem")
        _only_refusals(seller, 1)
        assert buyer.errors == []

    await _run_walk(live, people, run)


# --- an approval that lapses -------------------------------------------------------------------


async def test_an_approval_that_lapses(
    browser: "Browser", integration: Integration, live: LiveServer, walk: Any
) -> None:
    language, window, shots = walk
    people = await _people(browser, walk)
    other = await Walker.open(browser, shots, DEVICES[window], language=language)
    other.window = window

    async def run(buyer: Walker, seller: Walker) -> None:
        deal, url = await _deal(integration, "Bookshelf")
        second = await integration.api.post(
            f"/deals/v1/deals/{deal['id']}/offer", json={"price": 900}
        )
        assert second.status_code == 201, second.text
        other_url = second.json()["url"]
        await _offer(buyer, url, "Pickup", BUYER_NAME, BUYER_EMAIL)
        await _offer(other, other_url, "Pickup", "Per Hansen", "per@example.com")
        await _approve(seller, deal, BUYER_NAME)
        await _buyer_signs(buyer, url, "Pickup")

        # Signed, not paid: the buyer is told the deadline and what happens after it.
        due = buyer.page.locator("[data-next] [data-due]")
        await expect(due).to_contain_text(
            buyer.t("If not: %(otherwise)s", otherwise=buyer.t(LAPSES))
        )
        await buyer.money_is("Not paid yet: no money has moved.")
        await buyer.step("27-buyer-pay-by-the-deadline")
        await seller.goto(deal["url"])
        await seller.sees("Signed", payment="Not paid yet")
        await expect(seller.page.locator("[data-next] [data-due]")).to_contain_text(
            seller.t(LAPSES)
        )
        await seller.step("28-seller-waiting-for-payment")

        # The deadline passes (sandbox clock): the approval lapses.
        hours = SETTINGS.approval_deadline_hours
        # (The clock's endpoint fires the deadline, or the embedded worker does first.)
        await _advance_clock(integration, hours * 3600 + 60)
        await buyer.goto(url)
        await buyer.reload_until_status("Ad")
        await buyer.sees("Ad")
        mine = buyer.page.locator("[data-offer-status]")
        await expect(mine).to_have_attribute("data-offer-status", "Lapsed")
        await expect(mine).to_contain_text(
            buyer.t("the seller approved it, but it lapsed: it was not signed and paid in time.")
        )
        await expect(mine).to_contain_text(buyer.t("You may make a new offer."))
        await expect(buyer.page.locator("[data-money-at]")).to_have_count(0)
        await buyer.step("29-buyer-approval-lapsed")
        # Their delivery, name and e-mail are kept for a new offer; a price that is no amount
        # is refused.
        await expect(buyer.label("I pick it up")).to_be_checked()
        await expect(buyer.label("Your name")).to_have_value(BUYER_NAME)
        await expect(buyer.label("Your email")).to_have_value(BUYER_EMAIL)
        await buyer.label("Your price (%(currency)s)", currency="NOK").fill("abc")
        await buyer.refused("Send offer")
        price = buyer.label("Your price (%(currency)s)", currency="NOK")
        await expect(price).to_have_attribute("aria-invalid", "true")
        await buyer.step("30-buyer-new-offer-refused")

        # The buyer whose offer was declined by the approval may offer again.
        await other.goto(other_url)
        await expect(other.page.locator("[data-offer-status]")).to_have_attribute(
            "data-offer-status", "Denied"
        )
        await expect(
            other.page.get_by_role("button", name=other.t("Send offer"), exact=True)
        ).to_be_visible()
        await other.step("31-other-buyer-may-offer-again")

        # The seller's page takes offers again, at the asking price, and says why.
        await seller.goto(deal["url"])
        await seller.sees("Ad", payment="Not paid yet")
        await expect(seller.page.locator("[data-next]")).to_contain_text(
            seller.t(
                "The approved offer lapsed: it was not signed and paid in time, so the deal "
                "takes offers again."
            )
        )
        await expect(seller.page.locator("[data-next]")).to_contain_text(
            seller.t(
                "Answer the offers as they come: the buyers who offered before have been "
                "told they may offer again."
            )
        )
        lapsed = seller.page.locator("[data-offer][data-offer-status=Lapsed]")
        await expect(lapsed).to_contain_text(seller.t(LABELS["Lapsed"]))
        await expect(seller.page.locator("main")).to_contain_text(
            f"{seller.t('Asking price')}{seller.amount(ASKING)}"
        )
        await seller.money_is("Not paid yet: no money has moved.")
        await seller.step("32-seller-approval-lapsed")
        got = await _payment(integration, deal)
        assert (got["status"], got["price"]) == ("Ad", ASKING)

        # The other buyer offers again and is approved: the lapsed buyer reads one story, that
        # the item went to another buyer, and nothing invites them to offer.
        await other.goto(other_url)
        await other.press("Send offer")  # the delivery, name and e-mail as they were
        await other.press("Yes, send the offer")
        await other.sees("Ad", done="offer")
        await _approve(seller, deal, "Per Hansen")
        await buyer.goto(url)
        await expect(buyer.page.locator("[data-next]")).to_contain_text(
            buyer.t("The item went to another buyer. Nothing more happens here.")
        )
        await expect(buyer.page.locator("main")).not_to_contain_text(
            buyer.t("You may make a new offer.")
        )
        await expect(
            buyer.page.get_by_role("button", name=buyer.t("Send offer"), exact=True)
        ).to_have_count(0)
        await buyer.step("33-buyer-lapsed-went-to-another")
        _only_refusals(buyer, 1)
        assert seller.errors == []
        assert other.errors == []

    try:
        await _run_walk(live, people, run)
    finally:
        await other.context.close()
