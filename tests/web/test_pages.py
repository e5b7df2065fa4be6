"""The seller's and buyer's pages, driven through their HTML forms as a browser would post them."""

import html
import re
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest

from dealbroker.app import create_app
from dealbroker.events.tasks import DeliveryJob
from tests.conftest import BASE_URL, SELLER, create_deal, make_caller, make_settings, row_counts
from tests.lifecycle_helpers import run_provider_calls

FORM = re.compile(r'<form method="post" action="([^"]+)"[^>]*>(.*?)</form>', re.S)
HIDDEN = re.compile(r'<input type="hidden" name="(\w+)" value="([^"]*)">')


def forms(page: str) -> dict[str, dict[str, str]]:
    """Every form on the page: its action's last part (e.g. ``sign``) -> its hidden fields."""
    found = {}
    for action, body in FORM.findall(page):
        name = html.unescape(action).split("/-/")[-1].split("?")[0] if "/-/" in action else "pay"
        fields = {k: html.unescape(v) for k, v in HIDDEN.findall(body)}
        found.setdefault(name, {"action": html.unescape(action), **fields})
    return found


async def submit(client, page_url: str, form_name: str, **data: str):
    """Load the page, then post its form ``form_name`` with ``data`` (plus its hidden fields)."""
    page = await client.get(page_url)
    assert page.status_code == 200, page.text
    form = forms(page.text)[form_name]
    action = form.pop("action")
    return await client.post(action, data={**form, **data})


def path(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


async def offer_link(client, caller, deal, **body):
    response = await client.post(
        f"/deals/v1/deals/{deal['id']}/offer", json=body, headers=caller.headers
    )
    assert response.status_code == 201
    return path(response.json()["url"])


async def status_of(client, caller, deal) -> tuple[str, str | None]:
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    return got["status"], got["paymentStatus"]


@pytest.mark.parametrize("shipping", ["Carrier", "Pickup"])
async def test_whole_deal_through_the_pages(client, caller, sessionmaker, shipping):
    deal = await create_deal(client, caller, price=1000, seller=SELLER)
    seller = path(deal["url"])
    buyer = await offer_link(
        client, caller, deal, buyer={"name": "Ola", "email": "ola@example.com"}
    )

    sent = await submit(
        client,
        buyer,
        "offer",
        price="950",
        shippingType=shipping,
        name="Ola",
        email="ola@example.com",
    )
    assert sent.status_code == 303
    assert "done=offer" in sent.headers["location"]
    assert "waiting for the seller" in (await client.get(sent.headers["location"])).text

    signed = await submit(client, seller, "sign", full_name="Kari Nordmann", consent="yes")
    assert signed.status_code == 303
    assert await status_of(client, caller, deal) == ("Ad", None)
    page = (await client.get(seller)).text
    offer_id = re.search(r'data-offer="([^"]+)"', page).group(1)
    approved = await submit(client, seller, "approve", offer=offer_id)
    assert approved.status_code == 303

    assert (
        await submit(client, buyer, "sign", full_name="Ola Nordmann", consent="yes")
    ).status_code == 303
    assert await status_of(client, caller, deal) == ("Signed", None)
    checkout = await submit(client, buyer, "pay")
    assert checkout.status_code == 303
    pay_page = path(checkout.headers["location"])
    assert pay_page.startswith("/pay/")
    paid = await submit(client, pay_page, "pay", outcome="succeeded")
    assert paid.status_code == 303
    assert "done=paid" in paid.headers["location"]
    assert await status_of(client, caller, deal) == (
        f"{'Shipping' if shipping == 'Carrier' else 'Pickup'}_Pending",
        "Paid",
    )

    if shipping == "Carrier":
        assert (await submit(client, seller, "handover")).status_code == 303
        assert (await submit(client, buyer, "arrived")).status_code == 303
    assert (await submit(client, buyer, "approve")).status_code == 303
    assert await status_of(client, caller, deal) == ("Completed", "PendingPayOut")
    account = await submit(
        client, seller, "account", holder="Kari Nordmann", account="NO93 8601 1117 947"
    )
    assert account.status_code == 303
    await run_provider_calls(sessionmaker)  # as the worker does
    assert await status_of(client, caller, deal) == ("Completed", "PaidOut")
    money = (await client.get(seller)).text
    assert "<dd>50.00 NOK</dd>" not in money  # the fee is of the agreed 950, not the asking 1000
    assert "<dd>47.50 NOK</dd>" in money  # 5 % of 950
    assert "<dd>902.50 NOK</dd>" in money  # the payout


async def test_form_without_a_valid_csrf_token_changes_nothing(client, caller, sessionmaker):
    deal = await create_deal(client, caller)
    seller = path(deal["url"])
    counts = await row_counts(sessionmaker)
    page = forms((await client.get(seller)).text)["cancel"]
    response = await client.post(
        page["action"], data={"csrf": "forged", "version": page["version"]}
    )
    assert response.status_code == 400
    assert "did not come from this page" in response.text
    assert await row_counts(sessionmaker) == counts
    assert await status_of(client, caller, deal) == ("Draft", None)


async def test_stale_page_and_double_submit_change_nothing(client, caller, sessionmaker):
    deal = await create_deal(client, caller)
    seller = path(deal["url"])
    stale = forms((await client.get(seller)).text)
    first = await client.post(stale["cancel"].pop("action"), data=stale["cancel"])
    assert first.status_code == 303
    counts = await row_counts(sessionmaker)
    again = await client.post(
        stale["details"].pop("action"), data={**stale["details"], "name": "Changed"}
    )
    assert again.status_code == 409
    assert "out of date" in again.text
    assert "Cancelled" in again.text  # the current state is shown
    assert await row_counts(sessionmaker) == counts


async def test_refused_action_shows_why_and_changes_nothing(client, caller, sessionmaker):
    deal = await create_deal(client, caller, name=None, seller=SELLER)
    seller = path(deal["url"])
    counts = await row_counts(sessionmaker)
    response = await submit(client, seller, "sign", full_name="Kari", consent="yes")
    assert response.status_code == 400
    assert "Complete the deal before signing: name missing" in response.text
    no_consent = await submit(client, seller, "sign", full_name="Kari")
    assert no_consent.status_code == 400
    assert await row_counts(sessionmaker) == counts


async def test_output_is_escaped(client, caller):
    deal = await create_deal(
        client, caller, name="<script>alert(1)</script>", description='"><img src=x>'
    )
    page = (await client.get(path(deal["url"]))).text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page
    assert "<img src=x>" not in page


async def test_redirect_urls_are_followed_after_offer_and_approval(client, caller):
    deal = await create_deal(client, caller)
    buyer = await offer_link(
        client,
        caller,
        deal,
        buyerRedirectUrl="https://market.example.com/sent",
        sellerRedirectUrl="https://market.example.com/approved",
    )
    sent = await submit(
        client, buyer, "offer", price="10", shippingType="Pickup", email="b@example.com"
    )
    assert sent.headers["location"] == "https://market.example.com/sent"
    seller = path(deal["url"])
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    approved = await submit(client, seller, "approve", offer=offer_id)
    assert approved.headers["location"] == "https://market.example.com/approved"


async def test_denied_buyer_sees_it_and_another_buyer_is_unaffected(client, caller):
    deal = await create_deal(client, caller)
    first = await offer_link(client, caller, deal)
    second = await offer_link(client, caller, deal)
    await submit(client, first, "offer", price="10", shippingType="Pickup", email="a@example.com")
    await submit(client, second, "offer", price="12", shippingType="Carrier", email="b@example.com")
    seller = path(deal["url"])
    page = (await client.get(seller)).text
    offer_ids = re.findall(r'data-offer="([^"]+)"', page)
    await submit(client, seller, "approve", offer=offer_ids[1])
    assert 'data-offer-status="Denied"' in (await client.get(first)).text
    assert 'data-offer-status="Approved"' in (await client.get(second)).text
    # The denied buyer cannot offer again: the deal has its buyer.
    assert "offer" not in forms((await client.get(first)).text)


async def test_failed_payment_lets_the_buyer_try_again(client, caller):
    deal = await create_deal(client, caller, price=10)
    buyer = await offer_link(client, caller, deal)
    seller = path(deal["url"])
    await submit(client, buyer, "offer", price="10", shippingType="Pickup", email="b@example.com")
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    await submit(client, seller, "approve", offer=offer_id)
    await submit(client, buyer, "sign", full_name="Ola", consent="yes")
    checkout = path((await submit(client, buyer, "pay")).headers["location"])
    failed = await submit(client, checkout, "pay", outcome="failed")
    assert "done=payment-failed" in failed.headers["location"]
    assert await status_of(client, caller, deal) == ("Signed", "PaymentFailed")
    again = path((await submit(client, buyer, "pay")).headers["location"])
    await submit(client, again, "pay", outcome="succeeded")
    assert await status_of(client, caller, deal) == ("Pickup_Pending", "Paid")
    # The first checkout page is closed now.
    closed = await client.get(checkout)
    assert closed.status_code in (200, 404)
    assert "Pay (succeeds)" not in closed.text


async def test_pages_emit_the_events_the_integration_receives(client, caller, sessionmaker):
    from tests.receiver import start_receiver

    receiver = start_receiver()
    try:
        await client.post(
            "/integrations/v1/webhook-endpoints", json={"url": receiver.url}, headers=caller.headers
        )
        deal = await create_deal(client, caller)
        buyer = await offer_link(client, caller, deal)
        await submit(
            client, buyer, "offer", price="10", shippingType="Pickup", email="b@example.com"
        )
        worker = DeliveryJob(sessionmaker, allow_private=True)
        while await worker.run_once():
            pass
        await worker.aclose()
        kinds = sorted(
            r.headers["webhook-id"] and __import__("json").loads(r.body)["event"]
            for r in receiver.requests
        )
        assert kinds == ["deal.offer", "deal.status"]
    finally:
        receiver.close()


async def test_unknown_or_forged_links_are_404(client, caller):
    deal = await create_deal(client, caller)
    assert (await client.get(f"/d/{deal['id']}/forged")).status_code == 404
    assert (await client.post(f"/d/{deal['id']}/forged/-/cancel", data={})).status_code == 404
    assert (await client.post(path(deal["url"]) + "/-/nonsense", data={})).status_code == 404
    assert (await client.get("/pay/nothing-here")).status_code == 404
    assert BASE_URL


async def test_mailbox_shows_the_messages_of_a_deal(client, caller, sessionmaker):
    deal = await create_deal(client, caller, price=10)
    buyer = await offer_link(client, caller, deal)
    seller = path(deal["url"])
    await submit(
        client,
        buyer,
        "offer",
        price="10",
        shippingType="Pickup",
        name="Ola",
        email="ola@example.com",
    )
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    await submit(client, seller, "approve", offer=offer_id)
    await submit(client, buyer, "sign", full_name="Ola", consent="yes")
    checkout = path((await submit(client, buyer, "pay")).headers["location"])
    await submit(client, checkout, "pay", outcome="succeeded")
    await submit(client, buyer, "approve")
    await submit(client, seller, "account", holder="Kari Nordmann", account="NO9386011117947")
    await run_provider_calls(sessionmaker)  # as the worker does

    mailbox = re.search(
        r'<a href="([^"]+)">Sandbox mailbox</a>', (await client.get(seller)).text
    ).group(1)
    assert mailbox == re.search(
        r'<a href="([^"]+)">Sandbox mailbox</a>', (await client.get(buyer)).text
    ).group(1)
    page = (await client.get(path(html.unescape(mailbox)))).text
    kinds = re.findall(r'data-message="(\w+)"', page)
    assert kinds == [
        "offer_received",
        "offer_approved",
        "please_pay",
        "payment_received",  # to the seller: hand it over by ...
        "payment_received",  # to the buyer: approve it at the handover by ...
        "deal_completed",  # to the buyer
        "deal_completed",  # to the seller: add a payout account
        "payout_sent",
    ]
    assert "To kari@example.com" in page
    assert "To ola@example.com" in page
    assert "9.50 NOK is on its way" in page  # 10.00 minus the 5 % fee
    forged = path(html.unescape(mailbox))[:-3] + "AAA"
    assert (await client.get(forged)).status_code == 404


async def signed_deal(client, caller, shipping: str = "Pickup") -> tuple[dict, str, str]:
    """A deal taken to ``Signed`` through the pages: ``(deal, seller page, buyer page)``."""
    deal = await create_deal(client, caller, price=10)
    buyer = await offer_link(client, caller, deal)
    seller = path(deal["url"])
    await submit(client, buyer, "offer", price="10", shippingType=shipping, email="b@example.com")
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    await submit(client, seller, "approve", offer=offer_id)
    await submit(client, buyer, "sign", full_name="Ola", consent="yes")
    assert await status_of(client, caller, deal) == ("Signed", None)
    return deal, seller, buyer


async def test_sandbox_carrier_delivers_and_returns(client, caller):
    for outcome, status in [("delivered", "Shipping_Arrived"), ("returned", "Refunded")]:
        deal, seller, buyer = await signed_deal(client, caller, "Carrier")
        checkout = path((await submit(client, buyer, "pay")).headers["location"])
        await submit(client, checkout, "pay", outcome="succeeded")
        await submit(client, seller, "handover")
        assert "Sandbox carrier" in (await client.get(seller)).text
        moved = await submit(client, seller, "carrier", outcome=outcome)
        assert moved.status_code == 303
        assert f"done={outcome}" in moved.headers["location"]
        assert (await status_of(client, caller, deal))[0] == status


@pytest.fixture
async def production_app(db_url, engine) -> AsyncIterator[object]:
    """The app as production builds it, on the same database as ``client``'s sandbox app."""
    settings = make_settings(db_url, environment="production", secret_key="p" * 40)
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def production_client(production_app) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=production_app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


async def test_production_refuses_the_simulated_payment(production_client, sessionmaker):
    caller = await make_caller(production_client, sessionmaker)
    deal, _, buyer = await signed_deal(production_client, caller)
    counts = await row_counts(sessionmaker)
    refused = await submit(production_client, buyer, "pay")
    assert refused.status_code == 503
    assert (
        "Payments are not available: no payment provider is configured for production."
        in html.unescape(refused.text)
    )
    assert await row_counts(sessionmaker) == counts  # no payment row, no event
    assert await status_of(production_client, caller, deal) == ("Signed", None)
    assert "Sandbox mailbox" not in (await production_client.get(buyer)).text


async def test_production_has_no_checkout_carrier_or_mailbox(
    client, caller, production_app, production_client
):
    # A deal paid and handed to the carrier in the sandbox, then seen by the production app.
    deal, seller, buyer = await signed_deal(client, caller, "Carrier")
    checkout = path((await submit(client, buyer, "pay")).headers["location"])
    await submit(client, checkout, "pay", outcome="succeeded")
    await submit(client, seller, "handover")
    assert "Sandbox carrier" in (await client.get(seller)).text
    links = production_app.state.links
    deal_id = uuid.UUID(deal["id"])
    page = path(links.deal_url(deal_id))
    shown = await production_client.get(page)
    assert shown.status_code == 200
    assert "Sandbox carrier" not in shown.text
    assert "/-/carrier" not in shown.text
    assert "Sandbox mailbox" not in shown.text

    token = path(checkout).split("?")[0]
    assert (await production_client.get(checkout)).status_code == 404
    assert (await production_client.post(token, data={"outcome": "succeeded"})).status_code == 404
    assert (await production_client.get("/pay/anything")).status_code == 404
    assert (await production_client.post("/pay/anything", data={})).status_code == 404
    form = next(iter(forms(shown.text).values()))
    carrier = await production_client.post(
        f"{page}/-/carrier",
        data={"csrf": form["csrf"], "version": form["version"], "outcome": "delivered"},
    )
    assert carrier.status_code == 404
    assert (await production_client.get(path(links.mailbox_url(deal_id)))).status_code == 404
    assert await status_of(client, caller, deal) == ("Shipping_In_Progress", "Paid")


# --- U+0000 in a form: the database cannot store it, so the page refuses it -----------------

NUL = "\u0000"
SELLER_NUL_POSTS = [
    ("details", {"name": "Road" + NUL + "bike"}),
    ("details", {"description": NUL}),
    ("details", {"price": "45" + NUL}),
    ("details", {"packageType": "Small" + NUL}),
    *[("details", {k: "x" + NUL}) for k in SELLER],
    ("sign", {"full_name": "Kari" + NUL, "consent": "yes"}),
    ("sign", {"full_name": "Kari", "consent": "yes" + NUL}),
    ("account", {"holder": "Kari" + NUL, "account": "NO9386011117947"}),
    ("account", {"holder": "Kari", "account": "NO93" + NUL}),
    ("approve", {"offer": NUL}),
    ("cancel", {"reason" + NUL: "sold"}),  # in a field's name too, even one no action reads
]
BUYER_NUL_POSTS = [
    ("offer", {"price": "10", "shippingType": "Pickup", "email": "b@example.com", **poisoned})
    for poisoned in (
        {"price": "1" + NUL},
        {"shippingType": "Pickup" + NUL},
        {"email": "b" + NUL + "@example.com"},
        {"name": "Ola" + NUL},
    )
] + [("sign", {"full_name": "Ola" + NUL, "consent": "yes"})]


async def post_action(client, page_url: str, action: str, data: dict[str, str]):
    """Post ``action`` of the page with the page's CSRF token and version (whatever forms it
    shows now) and ``data``: the NUL check comes before any action's own checks."""
    page = await client.get(page_url)
    hidden = next(iter(forms(page.text).values()))
    page_path = page_url.split("?")[0]
    return await client.post(
        f"{page_path}/-/{action}{page_url[len(page_path) :]}",
        data={"csrf": hidden["csrf"], "version": hidden["version"], **data},
    )


def assert_refused_nul(response) -> None:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "a character that cannot be saved" in response.text
    assert "Road bike" in response.text  # the page itself, re-rendered with the message


@pytest.mark.parametrize(
    ("side", "action", "data"),
    [("seller", a, d) for a, d in SELLER_NUL_POSTS] + [("buyer", a, d) for a, d in BUYER_NUL_POSTS],
    ids=lambda v: v if isinstance(v, str) else next(k for k, x in v.items() if NUL in k + x),
)
async def test_nul_in_a_form_is_refused_and_changes_nothing(
    client, caller, sessionmaker, side, action, data
):
    deal = await create_deal(client, caller, price=10, seller=SELLER)
    page_url = path(deal["url"]) if side == "seller" else await offer_link(client, caller, deal)
    before = await row_counts(sessionmaker)

    response = await post_action(client, page_url, action, data)

    assert_refused_nul(response)
    assert await row_counts(sessionmaker) == before
    unchanged = await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)
    assert unchanged.json() == deal


async def test_nul_on_the_payment_page_is_refused_and_changes_nothing(client, caller, sessionmaker):
    deal = await create_deal(client, caller, price=10)
    buyer = await offer_link(client, caller, deal)
    seller = path(deal["url"])
    await submit(client, buyer, "offer", price="10", shippingType="Pickup", email="b@example.com")
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    await submit(client, seller, "approve", offer=offer_id)
    await submit(client, buyer, "sign", full_name="Ola", consent="yes")
    checkout = path((await submit(client, buyer, "pay")).headers["location"])
    before = (await row_counts(sessionmaker), await status_of(client, caller, deal))

    response = await submit(client, checkout, "pay", outcome="succeeded" + NUL)

    assert_refused_nul(response)
    assert (await row_counts(sessionmaker), await status_of(client, caller, deal)) == before


async def test_the_approved_offer_fixes_price_and_terms(client, caller, sessionmaker):
    """A seller approved 2000 on a draft, then edited the price to 5000 and signed: the buyer
    was asked to pay 5000. What the buyer signs and pays is exactly the approved offer."""
    deal = await create_deal(client, caller, price=3000, seller=SELLER)
    seller, buyer = path(deal["url"]), await offer_link(client, caller, deal)
    await submit(client, buyer, "offer", price="2000", shippingType="Pickup", email="b@example.com")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    assert (await submit(client, seller, "approve", offer=offer_id)).status_code == 303

    page = (await client.get(seller)).text
    assert "data-terms-frozen" in page
    assert "/-/details" not in page
    before = await row_counts(sessionmaker)
    form = forms(page)["sign"]
    edited = await client.post(
        f"{seller}/-/details",
        data={"csrf": form["csrf"], "version": form["version"], "price": "5000"},
    )
    assert edited.status_code == 409
    assert "can no longer be changed" in edited.text
    assert await row_counts(sessionmaker) == before

    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    await submit(client, buyer, "sign", full_name="Ola", consent="yes")
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    assert (got["price"], got["status"]) == (2000, "Signed")
    checkout = path((await submit(client, buyer, "pay")).headers["location"])
    assert "2000.00 NOK" in (await client.get(checkout)).text
