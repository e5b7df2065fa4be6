"""The whole happy path, Carrier and Pickup, clicked through in a real headless Chromium.

The real ``dealbroker serve`` runs on a loopback port with a fresh database (plus a
``dealbroker worker`` on PostgreSQL, where the server embeds none). The integration uses the
demo credentials from the server's banner: OAuth2 token, a webhook endpoint pointing at a
loopback receiver, a deal and an offer link by API. Buyer and seller then do everything else
in the browser, each in a browser context of their own, and the test checks what each page
shows after every step. At the end every webhook must have arrived, verify with the
Standard Webhooks library, and tell the lifecycle in order.

Every page state the tests visit, at both widths, is checked with axe-core and screenshotted,
as every browser walk's (``tests/browser.py``); the one test that checks the pages'
Content-Security-Policy opens its context without bypassing it, so without the audit.
"""

import asyncio
import http.server
import re
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

from dealbroker.core import money
from dealbroker.web.render import LABELS
from tests.browser import (
    BUYER_EMAIL,
    BUYER_NAME,
    DESKTOP,
    FLOW_SECONDS,
    PHONE,
    SELLER_NAME,
    TTFB,
    Integration,
    LiveServer,
    Person,
)
from tests.conftest import SELLER
from tests.receiver import Received, Receiver, start_receiver

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

ASKING, OFFERED = 1000, 950
IBAN = "NO93 8601 1117 947"
DEAL_STATUSES = {
    "Carrier": [
        "Draft",
        "Ad",
        "Signed",
        "Shipping_Pending",
        "Shipping_In_Progress",
        "Shipping_Arrived",
        "Completed",
    ],
    "Pickup": ["Draft", "Ad", "Signed", "Pickup_Pending", "Completed"],
}
PAYMENT_STATUSES = ["Created", "Processing", "Paid", "PendingPayOut", "PaidOut"]
SIGNATURE_STATUSES = ["Initiated", "Completed"]


# --- the server -----------------------------------------------------------------------------


# --- the browser ----------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _report_time_to_first_byte() -> Iterator[None]:
    yield
    if TTFB:
        lines = [
            f"{statistics.median(v):7.1f} ms  {k} (n={len(v)})" for k, v in sorted(TTFB.items())
        ]
        everything = statistics.median([ms for v in TTFB.values() for ms in v])
        report = "\n".join(["median time to first byte per page state:", *lines])
        sys.__stderr__.write(f"\n{report}\nall page loads: {everything:.1f} ms\n")


# --- the integration's side -----------------------------------------------------------------


@pytest.fixture
async def receiver(integration: Integration) -> AsyncIterator[Receiver]:
    """A loopback receiver, registered as a webhook endpoint for every kind of event."""
    hooks = start_receiver()
    api = integration.api
    endpoint = await api.post(
        "/integrations/v1/webhook-endpoints", json={"url": hooks.url, "description": "browser"}
    )
    assert endpoint.status_code == 201, endpoint.text
    try:
        yield hooks
    finally:
        await api.delete(f"/integrations/v1/webhook-endpoints/{endpoint.json()['id']}")
        hooks.close()


def verified(requests: list[Received], secret: str, deal_id: str) -> list[dict[str, Any]]:
    """The deal's events, each signature verified, each event once (delivery is at least once)."""
    events: dict[str, dict[str, Any]] = {}
    for request in list(requests):
        event = Webhook(secret).verify(request.body, request.headers)
        assert event["id"] == request.headers["webhook-id"]
        assert event["api_version"] == "v1"
        if event["data"].get("dealId") == deal_id:
            assert events.setdefault(event["id"], event) == event  # a redelivery is identical
    return list(events.values())


def key(event: dict[str, Any]) -> tuple[str, str]:
    data = event["data"]
    if event["event"] == "signature.status":
        return event["event"], f"{data['signatureType']}:{data['status']}"
    return event["event"], data["status"] if "status" in data else data["id"]


def in_order(events: list[dict[str, Any]], kind: str, order: list[str], field: str) -> list:
    """Events of ``kind``, by ``created`` and then (within one millisecond) by ``order``."""
    chosen = [e for e in events if e["event"] == kind]
    chosen.sort(key=lambda e: (e["created"], order.index(e["data"][field])))
    return chosen


async def all_events(
    hooks: Receiver, secret: str, deal_id: str, expected: set[tuple[str, str]]
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        events = verified(hooks.requests, secret, deal_id)
        missing = expected - {key(e) for e in events}
        if not missing:
            return events
        assert time.monotonic() < deadline, f"webhooks not delivered: {sorted(missing)}"
        await asyncio.sleep(0.1)


# --- the flows ------------------------------------------------------------------------------


# The Carrier flow at desktop width by Norwegian readers, the Pickup flow on a phone by Swedish
# ones: every word, amount and date on the way in their language.
@pytest.mark.parametrize(("shipping", "language"), [("Carrier", "nb"), ("Pickup", "sv")])
async def test_whole_deal_in_a_browser(
    browser: "Browser",
    integration: Integration,
    receiver: Receiver,
    live: LiveServer,
    shots: Path,
    shipping: str,
    language: str,
) -> None:
    device = DESKTOP if shipping == "Carrier" else PHONE
    buyer = await Person.open(browser, shots, device, language=language)
    seller = await Person.open(browser, shots, device, language=language)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            deal_id, offer_id = await _flow(integration, buyer, seller, shipping)
            await _check_webhooks(integration, receiver, deal_id, offer_id, shipping)
        assert buyer.errors == []
        assert seller.errors == []
    except BaseException:
        sys.stderr.write(f"--- server output ---\n{live.output()}\n")
        raise
    finally:
        await buyer.context.close()
        await seller.context.close()


async def _flow(
    integration: Integration, buyer: Person, seller: Person, shipping: str
) -> tuple[str, str]:
    api = integration.api
    created = await api.post(
        "/deals/v1/deals",
        json={
            "name": "Road bike",
            "description": "Steel frame, 56 cm, new tyres.",
            "price": ASKING,
            # A seller of their own per flow: a payout account registered in one flow would
            # otherwise pay the other flow's deal out at once.
            "seller": {**SELLER, "email": f"kari.{shipping.lower()}@example.com"},
        },
    )
    assert created.status_code == 201, created.text
    deal = created.json()
    link = await api.post(f"/deals/v1/deals/{deal['id']}/offer", json={"price": OFFERED})
    assert link.status_code == 201, link.text
    offer_url = link.json()["url"]
    carrier = shipping == "Carrier"

    async def shot(person: Person, name: str, phone: bool = False, overflows: bool = False) -> None:
        """Every page of the Carrier flow (desktop); the marked ones of Pickup (phone)."""
        if carrier:
            await person.shot(name)
        elif phone:
            await person.shot(f"phone-{name}", overflows)

    # The buyer opens the link and sends an offer at the prefilled price.
    await buyer.goto(offer_url)
    await buyer.sees("Draft")
    await expect(buyer.page.locator("html")).to_have_attribute("lang", buyer.language)
    await expect(buyer.label("Your price (%(currency)s)", currency="NOK")).to_have_value(
        money.to_input(OFFERED * 100, buyer.language)
    )
    await shot(buyer, "01-buyer-offer", phone=True)
    await buyer.label("Send it with a carrier" if carrier else "I pick it up").check()
    await buyer.label("Your name").fill(BUYER_NAME)
    await buyer.label("Your email").fill(BUYER_EMAIL)
    await buyer.press("Send offer")
    # The amount as it was understood, before anything is sent.
    await expect(buyer.page.locator("[data-confirm]")).to_contain_text(
        buyer.t(
            "You offer %(amount)s, %(delivery)s. Send the offer?",
            amount=buyer.amount(OFFERED),
            delivery=buyer.t("sent with a carrier" if carrier else "with pickup"),
        )
    )
    await shot(buyer, "01b-buyer-confirm-offer", phone=True)
    await buyer.press("Yes, send the offer")
    await buyer.sees("Draft", done="offer")
    mine = buyer.page.locator("[data-offer-status]")
    await expect(mine).to_have_attribute("data-offer-status", "Pending")
    await expect(mine).to_contain_text(
        f"{buyer.amount(OFFERED)}, {buyer.t(LABELS[shipping]).lower()}"
    )
    await expect(mine).to_contain_text(buyer.t("waiting for the seller's answer."))
    await expect(buyer.page.get_by_role("button", name=buyer.t("Send offer"))).to_have_count(0)
    await shot(buyer, "02-buyer-waiting")

    # The seller opens the deal, signs it (Draft -> Ad), and approves the offer.
    await seller.goto(deal["url"])
    await seller.sees("Draft", payment="Not paid yet")
    row = seller.page.locator("[data-offer]")
    await expect(row).to_have_count(1)
    offer_id = await row.get_attribute("data-offer")
    assert offer_id is not None
    await expect(row).to_contain_text(BUYER_NAME)
    await shot(seller, "03-seller-draft-sign")
    await seller.sign(SELLER_NAME)
    await seller.sees("Ad", done="signed")
    await expect(
        seller.page.get_by_role("heading", name=seller.t("Sign and publish"))
    ).to_have_count(0)
    await expect(row).to_have_attribute("data-offer-status", "Pending")
    await expect(row).to_contain_text(seller.t(LABELS["Pending"]))
    # On a phone the offers table is wider than the screen: test_offers_fit_a_phone_screen.
    await shot(seller, "04-seller-offer-pending", phone=True, overflows=True)
    await seller.press("Approve", within="[data-offer]")
    await expect(seller.page.get_by_role("heading", name=seller.t("Are you sure?"))).to_be_visible()
    await shot(seller, "04b-seller-confirm-approval", phone=True)
    await seller.press("Yes, approve the offer")
    await seller.sees("Ad", done="approved")
    await expect(row).to_have_attribute("data-offer-status", "Approved")
    await expect(row).to_contain_text(seller.t(LABELS["Approved"]))
    await expect(row.get_by_role("button")).to_have_count(0)
    delivery = seller.page.locator("[data-shipping]")
    await expect(delivery).to_have_attribute("data-shipping", shipping)
    await expect(delivery).to_have_text(seller.t(LABELS[shipping]))

    # The buyer sees the approval, signs (Ad -> Signed) and pays on the test payment page.
    await buyer.goto(offer_url)
    await buyer.sees("Ad")
    await expect(mine).to_have_attribute("data-offer-status", "Approved")
    await buyer.label("Your phone").fill("+47 400 00 001")
    if carrier:
        await buyer.label("Delivery address").fill("Kongens gate 2")
        await buyer.label("Postcode").fill("7011")
        await buyer.label("Town").fill("Trondheim")
    await shot(buyer, "05-buyer-sign")
    await buyer.sign(BUYER_NAME)
    await buyer.sees("Signed", done="signed")
    await expect(buyer.page.locator("main")).to_contain_text(
        buyer.t(
            "Pay %(price)s. The money is held safely until you approve the item.",
            price=buyer.amount(OFFERED),
        )
    )
    await shot(buyer, "06-buyer-pay")
    await buyer.press("Pay with Vipps")  # NOK: Vipps first, simulated here
    assert "/pay/" in buyer.page.url
    await expect(buyer.page.get_by_role("heading", name=buyer.t("Test payment"))).to_be_visible()
    await expect(buyer.page.locator("main")).to_contain_text(
        f"{buyer.t('Amount')}{buyer.amount(OFFERED)}"
    )
    await shot(buyer, "07-test-payment", phone=True)
    await buyer.press("Pay (succeeds)")
    assert buyer.page.url.startswith(offer_url)
    pending = "Shipping_Pending" if carrier else "Pickup_Pending"
    await buyer.sees(pending, done="paid")

    await seller.goto(deal["url"])
    await seller.sees(pending, payment="Paid")
    if carrier:
        # The seller ships; the buyer confirms the arrival (Shipping_In_Progress -> Arrived).
        await expect(
            seller.page.get_by_role("heading", name=seller.t("Ship the item"))
        ).to_be_visible()
        await expect(seller.page.locator("[data-ship-to]")).to_contain_text("7011 Trondheim")
        await seller.label("Carrier", exact=True).fill("Posten")
        await seller.label("Tracking number").fill("370712345678")
        await shot(seller, "08-seller-ship")
        await seller.press("I handed it to the carrier")
        await seller.sees("Shipping_In_Progress", done="handed", payment="Paid")
        await expect(
            seller.page.get_by_role("heading", name=seller.t("Sandbox carrier"))
        ).to_be_visible()
        await shot(seller, "09-seller-sandbox-carrier")
        await buyer.goto(offer_url)
        await buyer.sees("Shipping_In_Progress")
        await expect(buyer.page.get_by_role("heading", name=buyer.t("On its way"))).to_be_visible()
        await expect(buyer.page.locator("[data-tracking]")).to_contain_text("370712345678")
        await shot(buyer, "10-buyer-on-its-way")
        await buyer.press("The item has arrived")
        await buyer.sees("Shipping_Arrived", done="arrived")
        await expect(
            buyer.page.get_by_role("heading", name=buyer.t("Check the item"))
        ).to_be_visible()
        await shot(buyer, "11-buyer-approve")
    else:
        await expect(
            seller.page.get_by_role("heading", name=seller.t("Pickup"), exact=True)
        ).to_be_visible()
        await shot(seller, "08-seller-pickup", phone=True)
        await buyer.goto(offer_url)
        await buyer.sees(pending)
        await expect(
            buyer.page.get_by_role("heading", name=buyer.t("At the handover"))
        ).to_be_visible()
        await expect(buyer.page.locator("[data-handover-code]")).to_have_text(
            re.compile(r"^\d{6}$")
        )
        await expect(buyer.page.locator("[data-seller-contact]")).to_be_visible()
        await shot(buyer, "11-buyer-handover", phone=True)

    # The buyer approves the item: the deal is complete, the money waits for a payout account.
    await buyer.press("Approve the item")
    await buyer.press("Yes, the item is as agreed")
    await buyer.sees("Completed", done="item-approved")
    await expect(buyer.page.get_by_role("heading", name=buyer.t("Done"))).to_be_visible()

    await seller.goto(deal["url"])
    await seller.sees("Completed", payment="PendingPayOut")
    await seller.label("Account holder").fill(SELLER_NAME)
    await seller.label("IBAN or account number").fill(IBAN)
    await seller.press("Save payout account")
    await seller.sees("Completed", done="account")
    # The worker makes the payout after the account is saved; the seller looks again.
    await seller.reload_until_payment("PaidOut")
    await seller.sees("Completed", done="account", payment="PaidOut")
    on_page = seller.page.locator("main")
    await expect(on_page).to_contain_text(
        seller.t(
            "Paid to %(holder)s, %(kind)s ending %(last4)s.",
            holder=SELLER_NAME,
            kind=seller.t("IBAN"),
            last4="7947",
        )
    )
    await expect(on_page).to_contain_text(f"{seller.t('Amount')}{seller.amount(OFFERED)}")
    # 5 % of the agreed price, and the rest to the seller.
    await expect(on_page).to_contain_text(f"{seller.t('Our fee')}{seller.amount(47.5)}")
    await expect(on_page).to_contain_text(f"{seller.t('Your payout')}{seller.amount(902.5)}")
    history = await seller.page.locator("ol.history li").all_inner_texts()
    shown = [h.split(": ", 1)[1].split(" (")[0] for h in history]
    assert len(shown) == len(DEAL_STATUSES[shipping])
    assert shown[-1] == seller.t(LABELS["Completed"])
    await expect(on_page).to_contain_text(
        seller.t(
            "<strong>%(amount)s paid out</strong> (within 5 bank days).",
            amount=seller.amount(902.5),
        )
    )
    await shot(seller, "12-seller-paid-out", phone=True)
    return deal["id"], offer_id


async def _check_webhooks(
    integration: Integration, hooks: Receiver, deal_id: str, offer_id: str, shipping: str
) -> None:
    statuses = DEAL_STATUSES[shipping]
    expected = {
        ("deal.offer", offer_id),
        ("deal.offerApproved", offer_id),
        *(("deal.status", s) for s in statuses),
        *(("payment.status", s) for s in PAYMENT_STATUSES),
        *(
            ("signature.status", f"{who}:{s}")
            for who in ("Seller", "Buyer")
            for s in SIGNATURE_STATUSES
        ),
    }
    events = await all_events(hooks, integration.webhook_secret, deal_id, expected)
    assert {key(e) for e in events} == expected  # nothing more: no denial, no refund, ...

    deal_status = in_order(events, "deal.status", statuses, "status")
    assert [e["data"]["status"] for e in deal_status] == statuses
    dates = [e["data"]["statusDate"] for e in deal_status]
    assert dates == sorted(dates)

    payment = in_order(events, "payment.status", PAYMENT_STATUSES, "status")
    assert [e["data"]["status"] for e in payment] == PAYMENT_STATUSES
    last = payment[-1]["data"]
    assert (last["amount"], last["fee"], last["currency"]) == (f"{OFFERED}.00", "47.50", "NOK")
    users = {"Seller": last["sellerUserId"], "Buyer": last["buyerUserId"]}
    assert None not in users.values()

    signatures = in_order(events, "signature.status", SIGNATURE_STATUSES, "status")
    for who, user_id in users.items():
        mine = [e["data"] for e in signatures if e["data"]["signatureType"] == who]
        assert [s["status"] for s in mine] == SIGNATURE_STATUSES
        assert {s["userId"] for s in mine} == {user_id}

    (offer,) = (e["data"] for e in events if e["event"] == "deal.offer")
    assert (offer["shippingType"], offer["price"]) == (shipping, OFFERED)
    assert (offer["buyerName"], offer["buyerEmail"]) == (BUYER_NAME, BUYER_EMAIL)


async def test_offers_fit_a_phone_screen(
    browser: "Browser", integration: Integration, shots: Path
) -> None:
    api = integration.api
    created = await api.post(
        "/deals/v1/deals",
        json={
            "name": "Lamp",
            "price": 250,
            "seller": {**SELLER, "email": "kari.phone@example.com"},
        },
    )
    assert created.status_code == 201, created.text
    link = await api.post(f"/deals/v1/deals/{created.json()['id']}/offer", json={"price": 200})
    assert link.status_code == 201, link.text
    person = await Person.open(browser, shots, PHONE)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            await person.goto(link.json()["url"])
            await person.page.get_by_label("Your name").fill(BUYER_NAME)
            await person.page.get_by_label("Your email").fill(BUYER_EMAIL)
            await person.press("Send offer")
            await person.press("Yes, send the offer")
            await person.sees("Draft", done="offer")
            await person.goto(created.json()["url"])
            approve = person.page.get_by_role("button", name="Approve", exact=True)
            box = await approve.bounding_box()
            assert box is not None
            assert box["x"] + box["width"] <= PHONE["viewport"]["width"]
            assert await person.overflow() == 0
    finally:
        await person.context.close()


async def test_pages_cannot_be_framed_and_run_no_script(
    live: LiveServer, browser: "Browser", integration: Integration, shots: Path
) -> None:
    """Another site framing a page (to trick a click on a one-click action) gets an empty frame."""
    created = await integration.api.post(
        "/deals/v1/deals", json={"name": "Lamp", "price": 10, "seller": SELLER}
    )
    url = created.json()["url"]
    person = await Person.open(browser, shots, DESKTOP, bypass_csp=False)
    try:
        await person.goto(url)
        await expect(person.page.get_by_role("heading", name="Lamp")).to_be_visible()
        assert person.errors == []  # the stylesheet loads under the policy, nothing is refused
        await person.page.set_content(f'<iframe src="{url}" width="600" height="400"></iframe>')
        frame = person.page.frames[-1]
        await person.page.wait_for_timeout(500)
        shown = await frame.evaluate("document.body ? document.body.innerText : ''")
        assert "Lamp" not in shown  # Chromium shows its own "content is blocked" notice
        assert await frame.locator("form").count() == 0
        assert any("frame" in error.lower() for error in person.errors)
    finally:
        await person.context.close()


class _MarketplacePage(http.server.BaseHTTPRequestHandler):
    """The integration's own page that a redirect URL points at."""

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        body = b"<!doctype html><title>Marketplace</title><h1>Back at the marketplace</h1>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


async def test_forms_end_on_the_integrations_redirect_urls_under_the_pages_policy(
    browser: "Browser", integration: Integration, shots: Path
) -> None:
    """With the pages' Content-Security-Policy enforced (its form-action names only our origin
    and this deal's redirect URLs' origins), the buyer's offer and the seller's approval still
    end on the marketplace's pages."""
    market = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MarketplacePage)
    threading.Thread(target=market.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{market.server_address[1]}"
    api = integration.api
    created = await api.post(
        "/deals/v1/deals", json={"name": "Lamp", "price": 250, "seller": SELLER}
    )
    assert created.status_code == 201, created.text
    link = await api.post(
        f"/deals/v1/deals/{created.json()['id']}/offer",
        json={"buyerRedirectUrl": f"{base}/sent", "sellerRedirectUrl": f"{base}/approved"},
    )
    assert link.status_code == 201, link.text
    person = await Person.open(browser, shots, DESKTOP, bypass_csp=False)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            page = person.page
            await page.goto(link.json()["url"])
            await page.get_by_label("Your name").fill(BUYER_NAME)
            await page.get_by_label("Your email").fill(BUYER_EMAIL)
            await page.get_by_role("button", name="Send offer", exact=True).click()
            await page.get_by_role("button", name="Yes, send the offer", exact=True).click()
            await page.wait_for_url(f"{base}/sent")
            await expect(page.get_by_role("heading")).to_have_text("Back at the marketplace")
            await page.goto(created.json()["url"])
            await page.get_by_role("button", name="Approve", exact=True).click()
            await page.get_by_role("button", name="Yes, approve the offer", exact=True).click()
            await page.wait_for_url(f"{base}/approved")
            assert not [e for e in person.errors if "Content Security Policy" in e]
    finally:
        await person.context.close()
        market.shutdown()
        market.server_close()


async def test_a_refused_phone_is_shown_next_to_it_and_the_address_is_kept(
    browser: "Browser", integration: Integration, shots: Path
) -> None:
    """The buyer's sign form refused for its phone alone: the reason is next to the phone field,
    which is marked invalid and has the focus, and the address typed is still there."""
    api = integration.api
    created = await api.post(
        "/deals/v1/deals",
        json={"name": "Lamp", "price": 250, "seller": {**SELLER, "email": "kari.form@example.com"}},
    )
    assert created.status_code == 201, created.text
    deal = created.json()
    link = await api.post(f"/deals/v1/deals/{deal['id']}/offer", json={"price": 200})
    assert link.status_code == 201, link.text
    buyer = await Person.open(browser, shots, DESKTOP)
    seller = await Person.open(browser, shots, DESKTOP)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            await buyer.goto(link.json()["url"])
            await buyer.page.get_by_label("Your email").fill(BUYER_EMAIL)
            await buyer.press("Send offer")
            await buyer.press("Yes, send the offer")
            await seller.goto(deal["url"])
            await seller.sign(SELLER_NAME)
            await seller.press("Approve", within="[data-offer]")
            await seller.press("Yes, approve the offer")
            await buyer.goto(link.json()["url"])

            page = buyer.page
            # Blanks pass the browser's own check of a required field, not ours.
            await page.get_by_label("Your phone").fill("   ")
            await page.get_by_label("Delivery address").fill("Kongens gate 2")
            await page.get_by_label("Postcode").fill("7011")
            await page.get_by_label("Town").fill("Trondheim")
            await page.get_by_label("Your full name").fill(BUYER_NAME)
            await page.locator("input[name=consent]").check()
            async with page.expect_navigation() as navigation:
                await page.get_by_role("button", name="Sign the deal").click()
            response = await navigation.value
            assert response is not None
            assert response.status == 400
            await buyer.audit()
            phone = page.get_by_label("Your phone")
            await expect(phone).to_have_attribute("aria-invalid", "true")
            await expect(phone).to_have_accessible_description(
                "Give a phone number, so the seller can reach you for the handover."
            )
            await expect(phone).to_be_focused()
            await expect(page.locator(".flash.error")).to_have_count(0)
            await expect(page.get_by_label("Delivery address")).to_have_value("Kongens gate 2")
            await expect(page.get_by_label("Postcode")).to_have_value("7011")
            await expect(page.get_by_label("Town")).to_have_value("Trondheim")
            await expect(page.get_by_label("Your full name")).to_have_value(BUYER_NAME)
            await expect(page.locator("input[name=consent]")).to_be_checked()
            await buyer.shot("05b-buyer-sign-refused")

            await phone.fill("+47 400 00 001")
            await buyer.press("Sign the deal")
            await buyer.sees("Signed", done="signed")
        # Chromium logs the refusal's 400 as a failed load; nothing else went wrong.
        (refusal,) = buyer.errors
        assert "status of 400" in refusal
        assert "/-/sign" in refusal
        assert seller.errors == []
    finally:
        await buyer.context.close()
        await seller.context.close()
