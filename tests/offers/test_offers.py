"""Offer links: POST /deals/v1/deals/{dealId}/offer and the page behind the link."""

import re
import uuid
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy import select

from dealbroker.offers.models import OfferLink
from tests.conftest import BASE_URL, create_deal, row_counts


async def _offer(client, caller, deal_id, body=None):
    return await client.post(
        f"/deals/v1/deals/{deal_id}/offer", json=body or {}, headers=caller.headers
    )


async def test_offer_link_is_created(client, caller, sessionmaker):
    deal = await create_deal(client, caller, price=4500)
    body = {
        "price": 4200.5,
        "buyer": {"name": "Ola Nordmann", "email": "ola@example.com"},
        "buyerRedirectUrl": "https://market.example.com/sent",
        "sellerRedirectUrl": "https://market.example.com/approved",
    }
    response = await _offer(client, caller, deal["id"], body)
    assert response.status_code == 201
    assert set(response.json()) == {"url"}
    url = response.json()["url"]
    parts = urlsplit(url)
    assert url.startswith(f"{BASE_URL}/o/")
    assert re.fullmatch(r"/o/[A-Za-z0-9_-]{43}", parts.path)
    query = parse_qsl(parts.query)
    assert query[-1][0] == "offer"  # the offer parameter comes last
    reference = uuid.UUID(query[-1][1])
    async with sessionmaker() as session:
        link = await session.scalar(select(OfferLink).where(OfferLink.id == reference))
    assert link is not None
    assert link.price_minor == 420050
    assert (link.buyer_name, link.buyer_email) == ("Ola Nordmann", "ola@example.com")
    assert link.buyer_redirect_url == body["buyerRedirectUrl"]
    assert link.seller_redirect_url == body["sellerRedirectUrl"]
    assert parts.path.removeprefix("/o/") not in (link.token_hash,)  # only the hash is stored


async def test_price_defaults_to_the_deals_price(client, caller, sessionmaker):
    deal = await create_deal(client, caller, price=999.9)
    url = (await _offer(client, caller, deal["id"])).json()["url"]
    reference = uuid.UUID(url.rsplit("offer=", 1)[1])
    async with sessionmaker() as session:
        link = await session.scalar(select(OfferLink).where(OfferLink.id == reference))
    assert link.price_minor == 99990
    assert link.buyer_name is link.buyer_email is None


async def test_explicit_nulls_are_accepted(client, caller):
    deal = await create_deal(client, caller)
    body = {"price": None, "buyer": None, "buyerRedirectUrl": None, "sellerRedirectUrl": None}
    assert (await _offer(client, caller, deal["id"], body)).status_code == 201


async def test_each_link_is_distinct(client, caller):
    deal = await create_deal(client, caller)
    urls = {(await _offer(client, caller, deal["id"])).json()["url"] for _ in range(3)}
    assert len(urls) == 3


async def test_deal_without_seller_is_400(client, caller, sessionmaker):
    deal = await create_deal(client, caller, seller=None)
    counts = await row_counts(sessionmaker)
    response = await _offer(client, caller, deal["id"])
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert "seller" in response.json()["detail"]
    assert await row_counts(sessionmaker) == counts


async def test_seller_without_email_is_400(client, caller):
    deal = await create_deal(client, caller, seller={"firstname": "Kari"})
    assert (await _offer(client, caller, deal["id"])).status_code == 400


async def test_cancelled_deal_takes_no_offers(client, caller):
    deal = await create_deal(client, caller)
    await client.post(
        f"/deals/v1/deals/{deal['id']}/status", json={"status": "Cancelled"}, headers=caller.headers
    )
    response = await _offer(client, caller, deal["id"])
    assert response.status_code == 400
    body = response.json()
    assert "no longer takes offers" in body["detail"]
    # The interface's 400 for a conflict of the deal's state: titled as its status, typed as
    # what it is, and quotable by its request id.
    assert body["title"] == "Bad Request"
    assert body["type"].endswith("/not-taking-offers")
    assert body["requestId"] == response.headers["x-request-id"]


async def test_unknown_deal_is_404(client, caller):
    assert (await _offer(client, caller, uuid.uuid4())).status_code == 404


async def test_invalid_input_is_405(client, caller, sessionmaker):
    deal = await create_deal(client, caller)
    counts = await row_counts(sessionmaker)
    response = await _offer(client, caller, deal["id"], {"buyerRedirectUrl": "javascript:alert(1)"})
    assert response.status_code == 405
    body = response.json()
    assert body["title"] == "Invalid input"
    assert body["status"] == 405
    assert body["errors"] == [
        {"field": "buyerRedirectUrl", "message": "Value error, must be an absolute http(s) URL"}
    ]
    assert await row_counts(sessionmaker) == counts


async def test_link_resolves_to_a_page_naming_the_deal(client, caller):
    deal = await create_deal(client, caller, name="Blue <b>sofa</b>")
    url = (await _offer(client, caller, deal["id"])).json()["url"]
    page = await client.get(url.removeprefix(BASE_URL))
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["referrer-policy"] == "no-referrer"
    assert deal["id"] in page.text
    assert "Blue &lt;b&gt;sofa&lt;/b&gt;" in page.text  # escaped


async def test_wrong_token_or_reference_is_404(client, caller):
    deal = await create_deal(client, caller)
    url = (await _offer(client, caller, deal["id"])).json()["url"].removeprefix(BASE_URL)
    path, _, reference = url.partition("?offer=")
    assert (await client.get(f"{path}x?offer={reference}")).status_code == 404
    assert (await client.get(f"{path}?offer={uuid.uuid4()}")).status_code == 404


async def test_seller_link_resolves_and_forged_one_does_not(client, caller):
    deal = await create_deal(client, caller)
    path = deal["url"].removeprefix(BASE_URL)
    page = await client.get(path)
    assert page.status_code == 200
    assert deal["id"] in page.text
    # One character of the signature changed (never to itself: a signature may end in "A").
    forged = path[:-1] + ("B" if path.endswith("A") else "A")
    assert (await client.get(forged)).status_code == 404
    other_id = (await create_deal(client, caller))["id"]
    assert (await client.get(path.replace(deal["id"], other_id))).status_code == 404
