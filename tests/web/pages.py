"""Driving the seller's and buyer's pages as a browser would post their HTML forms, and reading what
the pages show: shared by the page tests of every area."""

import html
import re
import uuid
from urllib.parse import urlsplit

from dealbroker.core.settings import Settings
from tests.conftest import create_deal

# What the winning buyer gives when signing (a phone; the address counts for Carrier deals),
# and what the seller gives when handing a package to the carrier.
BUYER_SIGNS = {
    "full_name": "Ola",
    "consent": "yes",
    "phone": "+47 400 00 001",
    "address": "Kongens gate 2",
    "postcode": "7011",
    "town": "Trondheim",
}


HANDOVER = {"carrier": "Posten", "tracking": "370712345678"}
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
    """Load the page, then post its form ``form_name`` with ``data`` (plus its hidden fields);
    where the page asks "Are you sure?" first, say yes, as the person means to."""
    page = await client.get(page_url)
    assert page.status_code == 200, page.text
    form = forms(page.text)[form_name]
    action = form.pop("action")
    response = await client.post(action, data={**form, **data})
    if response.status_code == 200 and "data-confirm" in response.text:
        again = forms(response.text)
        (confirm,) = again.values()
        response = await client.post(confirm.pop("action"), data={**confirm, **data})
    return response


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


async def approved_deal(
    client, caller, shipping: str = "Pickup", price: int = 10
) -> tuple[dict, str, str]:
    """A deal the seller signed, with its buyer's offer approved (the buyer signs next):
    ``(deal, seller page, buyer page)``. A parcel booked here needs a price above its
    shipping's."""
    deal = await create_deal(client, caller, price=price)
    buyer = await offer_link(client, caller, deal)
    seller = path(deal["url"])
    await submit(
        client, buyer, "offer", price=str(price), shippingType=shipping, email="b@example.com"
    )
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    await submit(client, seller, "approve", offer=offer_id)
    return deal, seller, buyer


async def signed_deal(
    client, caller, shipping: str = "Pickup", price: int = 10
) -> tuple[dict, str, str]:
    """A deal taken to ``Signed`` through the pages: ``(deal, seller page, buyer page)``."""
    deal, seller, buyer = await approved_deal(client, caller, shipping, price)
    await submit(client, buyer, "sign", **BUYER_SIGNS)
    assert await status_of(client, caller, deal) == ("Signed", None)
    return deal, seller, buyer


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


async def paid(client, seller: str, buyer: str) -> None:
    checkout = path((await submit(client, buyer, "pay", method="card")).headers["location"])
    assert (await submit(client, checkout, "pay", outcome="succeeded")).status_code == 303


def next_card(page_text: str) -> str:
    card = re.search(r"<div class=\"card next\".*?</div>", page_text, re.S)
    assert card, "the page has no next-step card"
    return html.unescape(re.sub(r"<[^>]+>", "", card.group(0)))


def money_at(page_text: str) -> str:
    return html.unescape(re.search(r"data-money-at>([^<]*)<", page_text).group(1))


def field_error(page_text: str, name: str) -> str | None:
    found = re.search(rf'data-field-error="{name}">(.*?)</p>', page_text, re.S)
    return html.unescape(found.group(1)) if found else None


def confirmation_question(page_text: str) -> str:
    found = re.search(r"<div class=\"card\" data-confirm>.*?<p>(.*?)</p>", page_text, re.S)
    assert found, "no confirmation asked"
    return found.group(1)


async def outbox_of(sessionmaker, deal) -> list:
    from dealbroker.notifications import service as notifications

    async with sessionmaker() as session:
        return await notifications.of_deal(session, uuid.UUID(deal["id"]))


HOURS = Settings().approval_deadline_hours


async def two_buyers_one_approved(client, caller) -> tuple[dict, str, str, str]:
    """(deal, seller page, the approved buyer's page, the declined buyer's page)."""
    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    first, second = await offer_link(client, caller, deal), await offer_link(client, caller, deal)
    await submit(client, first, "offer", price="90", shippingType="Pickup", email="a@example.com")
    await submit(client, second, "offer", price="80", shippingType="Pickup", email="b@example.com")
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    page = (await client.get(seller)).text
    offer_id = re.search(
        r'data-offer="([^"]+)" data-offer-status="Pending">\s*<div><div class="who">a@example.com',
        page,
    )
    assert offer_id is not None
    await submit(client, seller, "approve", offer=offer_id.group(1))
    await submit(client, first, "sign", **BUYER_SIGNS)
    assert await status_of(client, caller, deal) == ("Signed", None)
    return deal, seller, first, second
