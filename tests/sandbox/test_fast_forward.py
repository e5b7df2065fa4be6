"""Sandbox triggers always simulate: from every status that is not final, each trigger succeeds
(fast-forwarding the deal through the real lifecycle where its effect needs it) and the deal
ends where the trigger says, its events in the lifecycle's order; out of a final status the
trigger is refused with a code the interface lists for it, and nothing changes.

Every deal is arranged through the triggers themselves (``dealStatus``) and read back through
the deals API and the events API."""

from typing import Any

import pytest

from tests.conftest import row_counts
from tests.sandbox.calls import (
    assert_lifecycle_order,
    assert_problem,
    deal_events,
    deal_in,
    draft_deal,
    fire,
    get_deal,
    trigger,
)

NON_FINAL = [
    "Draft",
    "Ad",
    "Signed",
    "Shipping_Pending",
    "Shipping_In_Progress",
    "Shipping_Arrived",
    "Shipping_Review_Denied",
    "Pickup_Pending",
    "Pickup_Denied",
]
FINAL = ["Completed", "Refunded", "Cancelled"]
BEFORE_APPROVAL = {"Draft", "Ad"}
BEFORE_PAYMENT = {"Draft", "Ad", "Signed"}


# (trigger, body, where the deal ends from each non-final status, or None when refused there)
def _signature_end(start: str) -> str:
    return "Signed" if start in BEFORE_APPROVAL else start


def _paid_end(start: str) -> str:
    return "Shipping_Pending" if start in BEFORE_PAYMENT else start


def _offer_end(start: str) -> str | None:
    return start if start in BEFORE_APPROVAL else None


CASES: list[tuple[str, str, dict[str, Any], Any]] = [
    (
        "signatureStatus",
        "buyer-completed",
        {"status": "Completed", "signatureType": "Buyer"},
        _signature_end,
    ),
    ("signatureStatus", "no-type", {}, _signature_end),
    # The interface: the effect is Signed, whatever the status sent.
    ("signatureStatus", "initiated", {"status": "Initiated"}, _signature_end),
    ("signatureStatus", "failed", {"status": "Failed"}, _signature_end),
    (
        "signatureStatus",
        "seller-failed",
        {"status": "Failed", "signatureType": "Seller"},
        _signature_end,
    ),
    (
        "signatureStatus",
        "buyer-initiated",
        {"status": "Initiated", "signatureType": "Buyer"},
        _signature_end,
    ),
    ("dealOffer", "offer", {"price": 4000, "shippingType": "Pickup"}, _offer_end),
    ("dealOfferApproved", "approve", {}, _offer_end),
    ("dealOfferDenied", "deny", {}, _offer_end),
    ("paymentStatus", "paid", {"status": "Paid"}, _paid_end),
    ("paymentStatus", "paid-out", {"status": "PaidOut"}, lambda _: "Completed"),
    ("paymentStatus", "refunded", {"status": "Refunded"}, lambda _: "Refunded"),
    ("dealStatus", "completed", {"status": "Completed"}, lambda _: "Completed"),
    ("dealStatus", "refunded", {"status": "Refunded"}, lambda _: "Refunded"),
]
REFUSED = {"signatureStatus": 400, "dealOffer": 400}  # the others: 409 (codes not shown)


@pytest.mark.parametrize("start", NON_FINAL)
@pytest.mark.parametrize(
    ("name", "body", "ends"), [pytest.param(n, b, e, id=f"{n}-{c}") for n, c, b, e in CASES]
)
async def test_from_every_status_that_is_not_final(
    name, body, ends, start, client, caller, sessionmaker
):
    deal = await deal_in(client, caller, start)
    seen = await deal_events(client, caller, deal["id"])
    counts = await row_counts(sessionmaker)
    end = ends(start)

    headers = {"Prefer": "return=representation"} if name == "dealOffer" else {}
    response = await trigger(
        client, name, {"dealId": deal["id"], **body}, secret=caller.webhook_secret, headers=headers
    )

    if end is None:
        assert_problem(response, REFUSED.get(name, 409))
        assert await row_counts(sessionmaker) == counts
        assert (await get_deal(client, caller, deal["id"]))["status"] == start
        return
    assert response.status_code == 200, response.text
    answer = response.json()
    now = await get_deal(client, caller, deal["id"])
    assert now["status"] == end
    assert answer["deal"] == now
    emitted = (await deal_events(client, caller, deal["id"]))[len(seen) :]
    assert answer["events"] == emitted
    assert_lifecycle_order(start, emitted)
    moves = [e["data"]["status"] for e in emitted if e["event"] == "deal.status"]
    assert moves[-1:] == ([] if end == start else [end])
    if name == "signatureStatus":
        signatures = [e["data"] for e in emitted if e["event"] == "signature.status"]
        sent = body.get("status", "Completed")
        if start not in BEFORE_APPROVAL:
            # Past the signature: its event, as asked, again; nothing else.
            assert [e["event"] for e in emitted] == ["signature.status"]
            assert signatures[0]["status"] == sent
        else:
            # The last signature is the buyer's completed one, which makes the deal Signed...
            assert (signatures[-1]["signatureType"], signatures[-1]["status"]) == (
                "Buyer",
                "Completed",
            )
            # ...and the status sent is in the events, for the party it names.
            party = body.get("signatureType")
            assert any(
                s["status"] == sent and party in (None, s["signatureType"]) for s in signatures
            )
    elif name == "dealOffer":
        assert [e["event"] for e in emitted] == ["deal.offer"]
        assert emitted[0]["data"]["price"] == 4000
    elif name in ("dealOfferApproved", "dealOfferDenied"):
        kind = "deal.offerApproved" if name == "dealOfferApproved" else "deal.offerDenied"
        assert [e["event"] for e in emitted] == ["deal.offer", kind]
        assert emitted[0]["data"]["buyerEmail"] == "buyer@sandbox.example.com"
    elif name == "paymentStatus":
        assert now["paymentStatus"] == body["status"]
        payments = [e["data"]["status"] for e in emitted if e["event"] == "payment.status"]
        assert payments[-1] == body["status"]
        if end == start:  # paid already: the payment's event again, nothing else
            assert [e["event"] for e in emitted] == ["payment.status"]


@pytest.mark.parametrize("start", FINAL)
@pytest.mark.parametrize(
    ("name", "body", "ends"), [pytest.param(n, b, e, id=f"{n}-{c}") for n, c, b, e in CASES]
)
async def test_out_of_a_final_status_is_refused(
    name, body, ends, start, client, caller, sessionmaker
):
    deal = await deal_in(client, caller, start)
    before = await get_deal(client, caller, deal["id"])
    if (name, body.get("status"), start) in {
        ("paymentStatus", "PaidOut", "Completed"),  # the effect needs no move: the payout
        ("paymentStatus", "Refunded", "Refunded"),  # and the refund of a closed deal
    }:
        answer = await fire(client, caller, name, {"dealId": deal["id"], **body})
        assert (answer["deal"]["status"], answer["deal"]["paymentStatus"]) == (
            start,
            body["status"],
        )
        return
    counts = await row_counts(sessionmaker)
    response = await trigger(
        client, name, {"dealId": deal["id"], **body}, secret=caller.webhook_secret
    )
    problem = assert_problem(response, REFUSED.get(name, 409))
    assert problem["currentStatus"] == start
    assert await row_counts(sessionmaker) == counts
    assert await get_deal(client, caller, deal["id"]) == before


async def test_a_signature_already_past_is_reported_again(client, caller):
    deal = await deal_in(client, caller, "Shipping_In_Progress")
    signed = await deal_events(client, caller, deal["id"], "signature.status")
    buyer = next(s for s in signed if s["data"]["signatureType"] == "Buyer")
    answer = await fire(client, caller, "signatureStatus", {"dealId": deal["id"]})
    assert answer["deal"]["status"] == "Shipping_In_Progress"
    assert [e["event"] for e in answer["events"]] == ["signature.status"]
    data = answer["events"][0]["data"]
    assert (data["userId"], data["signatureType"], data["status"]) == (
        buyer["data"]["userId"],
        "Buyer",
        "Completed",
    )


async def test_pickup_statuses_make_a_pickup_offer(client, caller):
    deal = await deal_in(client, caller, "Pickup_Pending")
    offers = await deal_events(client, caller, deal["id"], "deal.offer")
    assert [o["data"]["shippingType"] for o in offers] == ["Pickup"]


async def test_a_pending_offer_of_the_needed_shipping_type_is_approved(client, caller):
    """The seller's choice is made as a seller would: the deal's own pending offer of the
    shipping type the path needs, not a new sandbox one."""
    deal = await draft_deal(client, caller)
    await fire(client, caller, "dealOffer", {"dealId": deal["id"], "shippingType": "Carrier"})
    await fire(
        client,
        caller,
        "dealOffer",
        {"dealId": deal["id"], "shippingType": "Pickup", "buyer": {"email": "ola@example.com"}},
    )
    offers = await deal_events(client, caller, deal["id"], "deal.offer")
    answer = await fire(
        client, caller, "dealStatus", {"dealId": deal["id"], "status": "Pickup_Pending"}
    )
    decided = [(e["event"], e["data"]["id"]) for e in answer["events"] if "offer" in e["event"]]
    assert decided == [
        ("deal.offerApproved", offers[1]["data"]["id"]),
        ("deal.offerDenied", offers[0]["data"]["id"]),
    ]


async def test_an_agreed_carrier_deal_cannot_reach_a_pickup_status(client, caller, sessionmaker):
    deal = await deal_in(client, caller, "Signed")  # a Carrier offer was approved
    counts = await row_counts(sessionmaker)
    response = await trigger(
        client,
        "dealStatus",
        {"dealId": deal["id"], "status": "Pickup_Pending"},
        secret=caller.webhook_secret,
    )
    problem = assert_problem(response, 409)
    assert "Pickup_Pending" not in problem["allowedStatuses"]
    assert "Shipping_Pending" in problem["allowedStatuses"]
    assert await row_counts(sessionmaker) == counts


async def test_a_deal_without_seller_or_price_is_completed_by_the_sandbox(client, caller):
    created = await client.post("/deals/v1/deals", json={}, headers=caller.headers)
    deal = created.json()
    answer = await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Signed"})
    assert answer["deal"]["seller"]["email"] == "seller@sandbox.example.com"
    offer = next(e["data"] for e in answer["events"] if e["event"] == "deal.offer")
    assert (offer["price"], offer["buyerEmail"]) == (100, "buyer@sandbox.example.com")
    assert answer["deal"]["price"] == 100


async def test_deal_offer_answers_204_unless_asked_for_the_events(client, caller):
    deal = await draft_deal(client, caller)
    plain = await trigger(client, "dealOffer", {"dealId": deal["id"]}, secret=caller.webhook_secret)
    assert (plain.status_code, plain.content) == (204, b"")
    asked = await trigger(
        client,
        "dealOffer",
        {"dealId": deal["id"]},
        secret=caller.webhook_secret,
        headers={"Prefer": "return=representation"},
    )
    assert asked.status_code == 200
    assert [e["event"] for e in asked.json()["events"]] == ["deal.offer"]
    assert asked.json()["deal"] == await get_deal(client, caller, deal["id"])
