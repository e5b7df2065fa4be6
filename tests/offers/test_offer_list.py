"""Offers over the API: the link's reference is in each ``deal.offer`` event it produces, and
``GET /deals/v1/deals/{dealId}/offers`` lists a deal's offers, paged, only to its integration."""

import re
import uuid

from tests.conftest import create_deal
from tests.web.pages import forms, path, submit


async def _link(client, caller, deal: dict, **body: object) -> tuple[str, str]:
    """A new offer link on ``deal``: its page path and its ``offer`` reference."""
    response = await client.post(
        f"/deals/v1/deals/{deal['id']}/offer", json=body, headers=caller.headers
    )
    assert response.status_code == 201, response.text
    url = response.json()["url"]
    return path(url), url.rsplit("offer=", 1)[1]


async def _send(client, link: str, email: str, price: str = "10", shipping: str = "Pickup"):
    """The buyer sends an offer on the link's page."""
    sent = await submit(client, link, "offer", price=price, shippingType=shipping, email=email)
    assert sent.status_code == 303, sent.text


async def _offer_events(client, caller) -> list[dict]:
    response = await client.get(
        "/events/v1/events", params={"event": "deal.offer"}, headers=caller.headers
    )
    return [e["data"] for e in response.json()["items"]]


async def _offers(client, caller, deal_id: str, **params: object):
    return await client.get(
        f"/deals/v1/deals/{deal_id}/offers", params=params, headers=caller.headers
    )


async def test_the_offer_event_names_the_link_it_came_through(client, caller):
    deal = await create_deal(client, caller)
    first, first_ref = await _link(client, caller, deal, buyer={"email": "a@example.com"})
    second, second_ref = await _link(client, caller, deal)
    await _send(client, first, "a@example.com")
    await _send(client, second, "b@example.com", price="12", shipping="Carrier")
    by_email = {e["buyerEmail"]: e for e in await _offer_events(client, caller)}
    assert by_email["a@example.com"]["offerLinkId"] == first_ref
    assert by_email["b@example.com"]["offerLinkId"] == second_ref
    # The offer list says the same: each offer's id is its event's, with the link's reference.
    listed = {o["id"]: o for o in (await _offers(client, caller, deal["id"])).json()["items"]}
    for event in by_email.values():
        assert listed[event["id"]]["offerLinkId"] == event["offerLinkId"]


async def test_a_deals_offers_with_what_became_of_them(client, caller):
    deal = await create_deal(client, caller)
    first, first_ref = await _link(client, caller, deal)
    second, second_ref = await _link(client, caller, deal)
    await _send(client, first, "a@example.com", price="10", shipping="Pickup")
    await _send(client, second, "b@example.com", price="12.5", shipping="Carrier")
    response = await _offers(client, caller, deal["id"])
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["page"] == {"pageSize": 20, "pageNumber": 1, "totalPages": 1, "totalCount": 2}
    newest, oldest = body["items"]
    assert set(newest) == {
        "id",
        "dealId",
        "offerLinkId",
        "price",
        "shippingType",
        "buyerName",
        "buyerEmail",
        "status",
        "createdAt",
        "decidedAt",
    }
    assert (newest["offerLinkId"], newest["buyerEmail"]) == (second_ref, "b@example.com")
    assert (newest["price"], newest["shippingType"]) == (12.5, "Carrier")
    assert (oldest["offerLinkId"], oldest["price"], oldest["shippingType"]) == (
        first_ref,
        10,
        "Pickup",
    )
    assert {o["status"] for o in body["items"]} == {"Pending"}
    assert newest["decidedAt"] is oldest["decidedAt"] is None
    assert newest["dealId"] == deal["id"]

    # The seller approves the second: it is Approved, the first Denied, both decided.
    seller = path(deal["url"])
    await submit(client, seller, "approve", offer=newest["id"])
    after = {o["id"]: o for o in (await _offers(client, caller, deal["id"])).json()["items"]}
    assert after[newest["id"]]["status"] == "Approved"
    assert after[oldest["id"]]["status"] == "Denied"
    assert all(o["decidedAt"] is not None for o in after.values())


async def test_a_withdrawn_offer_shows_as_withdrawn(client, caller):
    """No event says so (the interface has no kind for it); the list does."""
    deal = await create_deal(client, caller)
    link, _ = await _link(client, caller, deal)
    await _send(client, link, "a@example.com")
    assert "withdraw" in forms((await client.get(link)).text)
    await submit(client, link, "withdraw")
    (offer,) = (await _offers(client, caller, deal["id"])).json()["items"]
    assert offer["status"] == "Withdrawn"


async def test_offers_are_paged_like_the_deal_list(client, caller):
    deal = await create_deal(client, caller)
    for i in range(3):
        link, _ = await _link(client, caller, deal)
        await _send(client, link, f"b{i}@example.com")
    all_items = (await _offers(client, caller, deal["id"])).json()["items"]
    assert [o["buyerEmail"] for o in all_items] == [
        "b2@example.com",
        "b1@example.com",
        "b0@example.com",
    ]
    page2 = (await _offers(client, caller, deal["id"], page=2, pageSize=2)).json()
    assert page2["page"] == {"pageSize": 2, "pageNumber": 2, "totalPages": 2, "totalCount": 3}
    assert page2["items"] == all_items[2:]
    past = (await _offers(client, caller, deal["id"], page=9, pageSize=2)).json()
    assert past["items"] == []
    assert past["page"]["totalCount"] == 3
    # Page parameters are read as the deal list reads them: the nearest valid value, never 400.
    for bad, used in (
        ({"pageSize": 101}, (100, 1, ["pageSize"])),
        ({"page": 0}, (20, 1, ["page"])),
        ({"pageSize": "x"}, (20, 1, ["pageSize"])),
    ):
        response = await _offers(client, caller, deal["id"], **bad)
        assert response.status_code == 200, bad
        got = response.json()["page"]
        assert (got["pageSize"], got["pageNumber"], got["adjusted"]) == used
        assert response.json()["items"] == all_items


async def test_a_deal_without_offers_has_an_empty_list(client, caller):
    deal = await create_deal(client, caller)
    assert (await _offers(client, caller, deal["id"])).json() == {
        "page": {"pageSize": 20, "pageNumber": 1, "totalPages": 0, "totalCount": 0},
        "items": [],
    }


async def test_another_integrations_deal_is_404(client, caller, other):
    deal = await create_deal(client, caller)
    link, _ = await _link(client, caller, deal)
    await _send(client, link, "a@example.com")
    foreign = await _offers(client, other, deal["id"])
    assert foreign.status_code == 404
    assert foreign.json()["detail"] == f"No deal {deal['id']}."
    unknown = await _offers(client, caller, str(uuid.uuid4()))
    assert unknown.status_code == 404
    assert (await _offers(client, caller, "not-a-uuid")).status_code == 400


async def test_needs_a_token_with_the_read_scope(client, caller):
    deal = await create_deal(client, caller)
    response = await client.get(f"/deals/v1/deals/{deal['id']}/offers")
    assert response.status_code == 401
    token = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials", "scope": "deals:write"},
        auth=(caller.client_id, caller.client_secret),
    )
    writer = {"Authorization": f"Bearer {token.json()['access_token']}"}
    response = await client.get(f"/deals/v1/deals/{deal['id']}/offers", headers=writer)
    assert response.status_code == 403


async def test_the_sandboxs_offer_has_no_link(client, caller):
    deal = await create_deal(client, caller)
    response = await client.post(
        "/webhooks/v1/dealOffer",
        json={"dealId": deal["id"], "price": 99},
        headers={"webhook-secret": caller.webhook_secret},
    )
    assert response.status_code == 204
    (event,) = await _offer_events(client, caller)
    assert event["offerLinkId"] is None
    (offer,) = (await _offers(client, caller, deal["id"])).json()["items"]
    assert (offer["id"], offer["offerLinkId"], offer["price"]) == (event["id"], None, 99)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", offer["createdAt"])
