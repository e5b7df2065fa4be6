"""Sandbox triggers: POST /webhooks/v1/{trigger} and the index's alias /webooks/v1/{trigger}.

Covers the events each trigger sends to a real HTTP receiver on loopback (envelope, data,
Standard Webhooks signature), the status codes and problem bodies, the effect on the deal read
back through the API, and Idempotency-Key replays.
"""

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from dealbroker.events.tasks import DeliveryJob
from tests.conftest import BASE_URL, make_caller, row_counts
from tests.sandbox.calls import (
    BUYER,
    NO_BODY,
    assert_delivered,
    assert_envelope,
    assert_problem,
    deal_events,
    deal_with_approved_offer,
    draft_deal,
    fire,
    get_deal,
    is_recent_millis,
    is_uuid,
    list_events,
    offer,
    register_endpoint,
    signed_deal,
    trigger,
)

PREFIXES = ("/webhooks/v1", "/webooks/v1")
TRIGGERS = (
    "signatureStatus",
    "dealOffer",
    "dealOfferApproved",
    "dealOfferDenied",
    "paymentStatus",
    "dealStatus",
)
KIND = {
    "signatureStatus": "signature.status",
    "dealOffer": "deal.offer",
    "dealOfferApproved": "deal.offerApproved",
    "dealOfferDenied": "deal.offerDenied",
    "paymentStatus": "payment.status",
    "dealStatus": "deal.status",
}


async def deliver(sessionmaker: Any) -> int:
    """Run a delivery worker until nothing is due; returns how many deliveries it sent."""
    worker = DeliveryJob(sessionmaker, allow_private=True)
    sent = 0
    try:
        while handled := await worker.run_once():
            sent += handled
    finally:
        await worker.aclose()
    return sent


# --- reading back through the API --------------------------------------------------------------


def summary(events: list[dict]) -> list[tuple[str, Any]]:
    """Each event as (kind, its most telling data value), for readable comparisons."""
    telling = {
        "deal.status": "status",
        "signature.status": "signatureType",
        "deal.offer": "id",
        "deal.offerApproved": "id",
        "deal.offerDenied": "id",
        "payment.status": "status",
    }
    return [(e["event"], e["data"][telling[e["event"]]]) for e in events]


# === 1. every trigger, end to end, to a real receiver ============================================


async def arrange(client: httpx.AsyncClient, caller: Any, name: str) -> tuple[dict, dict]:
    """A deal in the state ``name`` acts on, and the trigger body that applies to it."""
    if name == "signatureStatus":
        deal = await draft_deal(client, caller)
        body = {
            "dealId": deal["id"],
            "userId": str(uuid.uuid4()),
            "status": "Completed",
            "signatureType": "Seller",
            "signatureDate": 1795000000123,
        }
    elif name == "dealOffer":
        deal = await draft_deal(client, caller)
        body = {
            "dealId": deal["id"],
            "price": 4200.5,
            "shippingType": "Pickup",
            "buyer": BUYER,
            "buyerRedirectUrl": "https://market.example.com/sent",
            "sellerRedirectUrl": "https://market.example.com/approved",
        }
    elif name in {"dealOfferApproved", "dealOfferDenied"}:
        deal = await draft_deal(client, caller)
        pending = await offer(client, caller, deal["id"], price=4200.5, buyer=BUYER)
        body = {"dealId": deal["id"], "id": pending["id"]}
    elif name == "paymentStatus":
        deal = await signed_deal(client, caller, "Pickup")
        body = {"dealId": deal["id"], "status": "Paid"}
    else:  # dealStatus
        deal = await draft_deal(client, caller)
        body = {"dealId": deal["id"], "status": "Cancelled"}
    return deal, body


# What each trigger emits on the deal ``arrange`` prepares, in order; after its own event, the
# deal.status of the move it caused.
EMITS = {
    # The seller's signature signs the draft; then a sandbox buyer is approved and signs.
    "signatureStatus": [
        "signature.status",
        "deal.status",
        "deal.offer",
        "deal.offerApproved",
        "signature.status",
        "deal.status",
    ],
    "dealOffer": ["deal.offer"],
    "dealOfferApproved": ["deal.offerApproved"],
    "dealOfferDenied": ["deal.offerDenied"],
    # Paid walks the payment table as a real payment does: Created, Processing, Paid.
    "paymentStatus": ["payment.status", "payment.status", "payment.status", "deal.status"],
    "dealStatus": ["deal.status"],
}
MOVES_TO = {"signatureStatus": ["Ad", "Signed"], "paymentStatus": ["Pickup_Pending"]}


def expected_data(name: str, deal: dict, body: dict, data: dict) -> dict[str, Any]:
    """The exact data the trigger's own event must carry (timestamps and new ids from ``data``)."""
    deal_id = deal["id"]
    if name == "signatureStatus":
        # With a deal, the event names the deal's own party (the seller here), not the body's.
        assert is_uuid(data["userId"])
        return {**body, "dealId": deal_id, "userId": data["userId"]}
    if name == "dealOffer":
        return {
            "id": data["id"],
            "dealId": deal_id,
            "shippingType": "Pickup",
            "packageType": "Medium",
            "buyerName": "Ola Nordmann",
            "buyerEmail": "ola@example.com",
            "price": 4200.5,
            "buyerRedirectUrl": "https://market.example.com/sent",
            "sellerRedirectUrl": "https://market.example.com/approved",
            "date": data["date"],
            "offerLinkId": None,  # made by the trigger, through no offer link
        }
    if name in {"dealOfferApproved", "dealOfferDenied"}:
        return {"id": body["id"], "dealId": deal_id, "date": data["date"]}
    if name == "paymentStatus":
        return {
            "dealId": deal_id,
            "sellerUserId": data["sellerUserId"],
            "buyerUserId": data["buyerUserId"],
            "status": "Paid",
            "amount": "4200.50",
            "fee": "210.03",  # 5 % of 4200.50 = 210.025, rounded half-up
            "currency": "NOK",
        }
    return {"dealId": deal_id, "status": "Cancelled", "statusDate": data["statusDate"]}


@pytest.mark.parametrize("name", TRIGGERS)
async def test_trigger_with_a_deal_delivers_signed_events(
    name, client, caller, sessionmaker, receiver
):
    deal, body = await arrange(client, caller, name)
    before = await deal_events(client, caller, deal["id"])
    await register_endpoint(client, caller, receiver.url)

    response = await trigger(client, name, body, secret=caller.webhook_secret)
    assert response.status_code == (204 if name == "dealOffer" else 200), response.text
    emitted = (await deal_events(client, caller, deal["id"]))[len(before) :]
    if name != "dealOffer":
        assert response.json()["events"] == emitted

    assert await deliver(sessionmaker) == len(emitted)
    received = receiver.by_id()
    assert len(receiver.requests) == len(received) == len(emitted)
    assert [received[e["id"]].envelope for e in emitted] == emitted
    assert [e["event"] for e in emitted] == EMITS[name]
    for event in emitted:
        envelope = assert_delivered(received[event["id"]], caller, receiver.url)
        assert_envelope(envelope, event["event"])
        assert envelope["data"]["dealId"] == deal["id"]
    numbers = [e.get("deal_sequence") for e in emitted]
    if numbers and numbers[0] is not None:  # the trigger moved the stored deal: numbered on
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    if name == "paymentStatus":
        steps, own, moves = emitted[:2], emitted[2], emitted[3:]
        assert [e["data"]["status"] for e in steps] == ["Created", "Processing"]
    else:
        own, moves = emitted[0], emitted[1:]
    assert own["event"] == KIND[name]
    assert own["data"] == expected_data(name, deal, body, own["data"])
    moved = [e["data"]["status"] for e in moves if e["event"] == "deal.status"]
    assert moved == MOVES_TO.get(name, [])


DUMMY_DEFAULTS = {
    "signatureStatus": {"status": "Completed", "signatureType": "Seller"},
    "dealOffer": {
        "shippingType": "Carrier",
        "packageType": "Medium",
        "buyerName": "Sandbox Buyer",
        "buyerEmail": "buyer@sandbox.example.com",
        "price": 100,
        "buyerRedirectUrl": None,
        "sellerRedirectUrl": None,
        "offerLinkId": None,
    },
    "dealOfferApproved": {},
    "dealOfferDenied": {},
    "paymentStatus": {"status": "Paid", "amount": "100.00", "fee": "5.00", "currency": "NOK"},
    "dealStatus": {"status": "Draft"},
}


@pytest.mark.parametrize("name", TRIGGERS)
async def test_trigger_without_a_body_delivers_dummy_data(
    name, client, caller, sessionmaker, receiver
):
    await register_endpoint(client, caller, receiver.url)
    counts = await row_counts(sessionmaker)

    response = await trigger(client, name, secret=caller.webhook_secret)

    events = await list_events(client, caller)
    assert len(events) == 1
    event = events[0]
    if name == "dealOffer":
        assert response.status_code == 204
        assert response.content == b""
    else:
        assert response.status_code == 200
        assert response.json() == {"events": [event], "deal": None}
    assert (await row_counts(sessionmaker))["deals"] == counts["deals"]  # no deal was touched

    assert await deliver(sessionmaker) == 1
    assert len(receiver.requests) == 1
    envelope = assert_delivered(receiver.requests[0], caller, receiver.url)
    assert envelope == event
    assert_envelope(envelope, KIND[name])
    data = envelope["data"]
    assert {k: data[k] for k in DUMMY_DEFAULTS[name]} == DUMMY_DEFAULTS[name]
    if name == "signatureStatus":
        assert is_recent_millis(data["signatureDate"])
    if name in {"dealOfferApproved", "dealOfferDenied"}:
        assert is_recent_millis(data["date"])


# === 2. status codes and problem bodies ==========================================================

ROUTES = [pytest.param(p, n, id=f"{p.split('/')[1]}-{n}") for p in PREFIXES for n in TRIGGERS]


def deal_body(name: str, deal_id: str) -> dict[str, Any]:
    """The smallest valid body of ``name`` that acts on a deal."""
    return {"dealId": deal_id, **({"status": "Cancelled"} if name == "dealStatus" else {})}


@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_success_answer(prefix, name, client, caller):
    response = await trigger(client, name, {}, secret=caller.webhook_secret, prefix=prefix)
    if name == "dealOffer":
        assert response.status_code == 204
        assert response.content == b""
        assert "content-type" not in response.headers
        return
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"events", "deal"}
    assert body["deal"] is None
    assert [e["event"] for e in body["events"]] == [KIND[name]]
    assert_envelope(body["events"][0], KIND[name])


@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_success_with_a_deal_answers_the_deal(prefix, name, client, caller):
    deal, body = await arrange(client, caller, name)
    response = await trigger(client, name, body, secret=caller.webhook_secret, prefix=prefix)
    if name == "dealOffer":
        assert response.status_code == 204
        assert response.content == b""
        return
    assert response.status_code == 200
    answer = response.json()
    assert answer["deal"] == await get_deal(client, caller, deal["id"])
    assert answer["events"][0]["event"] == KIND[name]


@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_malformed_json_is_400(prefix, name, client, caller, sessionmaker):
    counts = await row_counts(sessionmaker)
    response = await trigger(
        client,
        name,
        b'{"dealId": ',
        secret=caller.webhook_secret,
        prefix=prefix,
        headers={"content-type": "application/json"},
    )
    body = assert_problem(response, 400)
    assert body["detail"].startswith("Malformed JSON body")
    assert await row_counts(sessionmaker) == counts


REQUIRED = "The webhook-secret header is required."
NOT_VALID = "The webhook-secret is not valid."


@pytest.mark.parametrize(
    ("secret", "detail"),
    [
        pytest.param(None, REQUIRED, id="missing"),
        pytest.param("", REQUIRED, id="empty"),
        pytest.param("whsec_wrong", NOT_VALID, id="wrong"),
    ],
)
@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_missing_or_wrong_secret_is_401(
    prefix, name, secret, detail, client, caller, sessionmaker
):
    deal = await draft_deal(client, caller)
    counts = await row_counts(sessionmaker)
    response = await trigger(
        client, name, deal_body(name, deal["id"]), secret=secret, prefix=prefix
    )
    body = assert_problem(response, 401)
    assert (body["title"], body["detail"]) == ("Not Authorized", detail)
    assert await row_counts(sessionmaker) == counts


VARYING_HEADERS = {"x-request-id"}


@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_another_integrations_deal_answers_as_an_unknown_one(
    prefix, name, client, caller, other, sessionmaker
):
    """A trigger must not tell that a deal id exists at another integration: its answer is the
    unknown deal's (400, invalid input), byte for byte once the id is taken out."""
    foreign, _ = await arrange(client, other, name)
    missing = str(uuid.uuid4())
    before = await get_deal(client, other, foreign["id"])
    counts = await row_counts(sessionmaker)

    answers = {}
    for deal_id in (foreign["id"], missing):
        response = await trigger(
            client, name, deal_body(name, deal_id), secret=caller.webhook_secret, prefix=prefix
        )
        body = assert_problem(response, 400)
        assert body["detail"] == f"No deal {deal_id}."
        # Every header but the request id, new on each request (ids are all 36 characters);
        # the body carries that id too, as its requestId.
        assert body["requestId"] == response.headers["x-request-id"]
        shown = {k: v for k, v in response.headers.items() if k not in VARYING_HEADERS}
        text = response.text.replace(deal_id, "<id>").replace(body["requestId"], "<rid>")
        answers[deal_id] = (response.status_code, shown, text)
    assert answers[foreign["id"]] == answers[missing]

    assert await row_counts(sessionmaker) == counts
    assert await get_deal(client, other, foreign["id"]) == before
    response = await client.get(f"/deals/v1/deals/{foreign['id']}", headers=caller.headers)
    assert (response.status_code, response.json()["detail"]) == (404, f"No deal {foreign['id']}.")


@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_a_read_only_integrations_secret_is_403(prefix, name, client, sessionmaker):
    """The interface's 403: a valid secret without permission. Every trigger changes deals or
    emits events, which needs ``deals:write``; refused before the body is read."""
    reader = await make_caller(client, sessionmaker, "Reader", ["deals:read"])
    counts = await row_counts(sessionmaker)
    for body in ({}, b'{"dealId": '):
        response = await trigger(client, name, body, secret=reader.webhook_secret, prefix=prefix)
        problem = assert_problem(response, 403)
        assert problem["detail"] == "This integration lacks the scope deals:write."
    assert await row_counts(sessionmaker) == counts


@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_unknown_deal_is_invalid_input(prefix, name, client, caller, sessionmaker):
    """The interface lists 200/204, 400, 401, 403, 405 for signatureStatus and dealOffer: a
    ``dealId`` that names no deal is invalid input (400), not a 404 of the trigger's path; the
    other triggers, whose codes are not shown, answer the same for the same body field."""
    missing = str(uuid.uuid4())
    counts = await row_counts(sessionmaker)
    response = await trigger(
        client, name, deal_body(name, missing), secret=caller.webhook_secret, prefix=prefix
    )
    body = assert_problem(response, 400)
    assert (body["title"], body["type"]) == (
        "Invalid input",
        "https://dealbroker.dev/problems/unknown-reference",
    )
    assert body["detail"] == f"No deal {missing}."
    assert body["errors"] == [{"field": "dealId", "message": "names no deal of yours"}]
    assert await row_counts(sessionmaker) == counts


# (trigger, case, body, field named in the problem's errors)
VIOLATIONS = [
    ("signatureStatus", "bad enum", {"signatureType": "Notary"}, "signatureType"),
    ("signatureStatus", "bad status", {"status": "Done"}, "status"),
    ("signatureStatus", "wrong type", {"signatureDate": "today"}, "signatureDate"),
    ("signatureStatus", "bad uuid", {"userId": "ola"}, "userId"),
    ("dealOffer", "bad enum", {"shippingType": "Drone"}, "shippingType"),
    ("dealOffer", "wrong type", {"price": "4200"}, "price"),
    ("dealOffer", "bad email", {"buyer": {"email": "not-an-email"}}, "buyer.email"),
    ("dealOffer", "unknown buyer field", {"buyer": {"phone": "1"}}, "buyer.phone"),
    ("dealOffer", "bad url", {"buyerRedirectUrl": "ftp://x"}, "buyerRedirectUrl"),
    ("dealOfferApproved", "wrong type", {"date": "today"}, "date"),
    ("dealOfferApproved", "bad uuid", {"id": "first"}, "id"),
    ("dealOfferDenied", "wrong type", {"date": 1.5}, "date"),
    ("dealOfferDenied", "negative date", {"date": -1}, "date"),
    ("paymentStatus", "bad enum", {"status": "Settled"}, "status"),
    ("paymentStatus", "wrong type", {"amount": 100}, "amount"),
    ("paymentStatus", "bad money", {"fee": "5"}, "fee"),
    ("paymentStatus", "bad currency", {"currency": "nok"}, "currency"),
    ("dealStatus", "bad enum", {"status": "Sold"}, "status"),
    ("dealStatus", "wrong type", {"statusDate": "now"}, "statusDate"),
    *[(n, "unknown field", {"colour": "red"}, "colour") for n in TRIGGERS],
    *[(n, "bad deal id", {"dealId": "deal-1"}, "dealId") for n in TRIGGERS],
    *[(n, "deal id number", {"dealId": 42}, "dealId") for n in TRIGGERS],
]


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    ("name", "body", "field_name"),
    [pytest.param(n, b, f, id=f"{n}-{c}") for n, c, b, f in VIOLATIONS],
)
async def test_schema_violation_is_405(
    prefix, name, body, field_name, client, caller, sessionmaker
):
    counts = await row_counts(sessionmaker)
    response = await trigger(client, name, body, secret=caller.webhook_secret, prefix=prefix)
    problem = assert_problem(response, 405)
    assert problem["title"] == "Invalid input"
    assert [e["field"] for e in problem["errors"]] == [field_name]
    assert await row_counts(sessionmaker) == counts


@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_json_array_body_is_405(prefix, name, client, caller, sessionmaker):
    counts = await row_counts(sessionmaker)
    response = await trigger(
        client,
        name,
        b"[]",
        secret=caller.webhook_secret,
        prefix=prefix,
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 405)
    assert await row_counts(sessionmaker) == counts


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_non_json_content_type_is_400(
    prefix, name, content_type, client, caller, sessionmaker
):
    """The interface lists 400 "Invalid input" for signatureStatus and dealOffer, and no 415: a
    body not declared as JSON is its 400, as malformed JSON is (the other triggers alike)."""
    counts = await row_counts(sessionmaker)
    headers = {} if content_type is None else {"content-type": content_type}
    response = await trigger(
        client, name, b"{}", secret=caller.webhook_secret, prefix=prefix, headers=headers
    )
    body = assert_problem(response, 400)
    assert body["type"] == "https://dealbroker.dev/problems/unsupported-media-type"
    assert body["detail"] == (
        f"The body must be application/json, not {content_type or 'missing'}."
    )
    assert await row_counts(sessionmaker) == counts


@pytest.mark.parametrize("case", ["no body", "with a deal", "no secret", "text body"])
@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_production_has_no_triggers(
    prefix, name, case, production_client, client, caller, sessionmaker
):
    deal = await draft_deal(client, caller)
    counts = await row_counts(sessionmaker)
    secret: str | None = caller.webhook_secret
    headers: dict[str, str] = {}
    body: Any = NO_BODY
    if case == "with a deal":
        body = deal_body(name, deal["id"])
    elif case == "no secret":
        body, secret = {}, None
    elif case == "text body":
        body, headers = b"hello", {"content-type": "text/plain"}
    response = await trigger(
        production_client, name, body, secret=secret, prefix=prefix, headers=headers
    )
    problem = assert_problem(response, 404)
    assert problem["detail"] == "No such resource."  # not mounted outside the sandbox
    assert await row_counts(sessionmaker) == counts
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Draft"


@pytest.mark.parametrize(("prefix", "name"), ROUTES)
async def test_production_hides_triggers_from_malformed_json(
    prefix, name, production_client, caller
):
    response = await trigger(
        production_client,
        name,
        b'{"dealId": ',
        secret=caller.webhook_secret,
        prefix=prefix,
        headers={"content-type": "application/json"},
    )
    assert_problem(response, 404)


@pytest.fixture
async def lenient_client(app) -> AsyncIterator[httpx.AsyncClient]:
    """A client that receives the app's 500 answers instead of its exceptions."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


LAST_MILLISECOND = 253402300799999  # 9999-12-31T23:59:59.999Z, the last datetime Python has
FAR_FUTURE = 2**62  # within the schema's int64 bound, past year 9999


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("signatureStatus", {"signatureDate": LAST_MILLISECOND}),
        ("dealOfferApproved", {"date": LAST_MILLISECOND}),
        ("dealStatus", {"statusDate": LAST_MILLISECOND}),
        ("paymentStatus", {"amount": "10000000.00", "fee": "0.00"}),
    ],
)
async def test_largest_values_are_echoed(name, body, client, caller):
    answer = await fire(client, caller, name, body)
    data = answer["events"][0]["data"]
    assert {k: data[k] for k in body} == body


# (trigger, field, value, whether the body names a deal): valid by the schema, out of range
OUT_OF_RANGE = [
    ("signatureStatus", "signatureDate", FAR_FUTURE, False),
    ("signatureStatus", "signatureDate", FAR_FUTURE, True),
    ("dealOfferApproved", "date", FAR_FUTURE, False),
    ("dealOfferDenied", "date", FAR_FUTURE, False),
    ("dealStatus", "statusDate", FAR_FUTURE, False),
    ("paymentStatus", "amount", "20000000.00", False),
    ("paymentStatus", "fee", "20000000.00", False),
]


@pytest.mark.parametrize(
    ("name", "field_name", "value", "with_deal"),
    [
        pytest.param(n, f, v, d, id=f"{n}-{f}" + ("-deal" if d else ""))
        for n, f, v, d in OUT_OF_RANGE
    ],
)
async def test_out_of_range_values_are_405(
    name, field_name, value, with_deal, lenient_client, client, caller, sessionmaker
):
    body = {field_name: value}
    if with_deal:
        body["dealId"] = (await draft_deal(client, caller))["id"]
    counts = await row_counts(sessionmaker)
    response = await trigger(lenient_client, name, body, secret=caller.webhook_secret)
    problem = assert_problem(response, 405)
    assert [e["field"] for e in problem["errors"]] == [field_name]
    assert await row_counts(sessionmaker) == counts


# === 3. the effect on the deal ===================================================================


async def test_signature_on_a_draft_deal_signs_it_for_both_parties(client, caller):
    """The interface: the deal becomes Signed, always. A bare draft is fast-forwarded as a real
    deal goes: the seller signs (initiated, completed), a sandbox buyer's offer is made and
    approved, then the buyer's completed signature, the trigger's own event."""
    deal = await draft_deal(client, caller)
    seen = await deal_events(client, caller, deal["id"])

    answer = await fire(client, caller, "signatureStatus", {"dealId": deal["id"]})

    now = await get_deal(client, caller, deal["id"])
    assert now["status"] == "Signed"
    assert answer["deal"] == now
    new = (await deal_events(client, caller, deal["id"]))[len(seen) :]
    assert new == answer["events"]
    offer_id = new[3]["data"]["id"]
    assert summary(new) == [
        ("signature.status", "Seller"),
        ("signature.status", "Seller"),
        ("deal.status", "Ad"),
        ("deal.offer", offer_id),
        ("deal.offerApproved", offer_id),
        ("signature.status", "Buyer"),
        ("deal.status", "Signed"),
    ]
    signatures = [e["data"]["status"] for e in new if e["event"] == "signature.status"]
    assert signatures == ["Initiated", "Completed", "Completed"]
    # The buyer is the sandbox's, clearly marked, at the deal's price.
    offer = new[3]["data"]
    assert (offer["buyerName"], offer["buyerEmail"], offer["price"]) == (
        "Sandbox Buyer",
        "buyer@sandbox.example.com",
        deal["price"],
    )


async def test_signed_deal_reports_the_buyers_user_id(client, caller):
    """Once an offer is approved the buyer is a user; the signature event names them."""
    deal = await deal_with_approved_offer(client, caller)
    answer = await fire(client, caller, "signatureStatus", {"dealId": deal["id"]})
    signatures = [e["data"] for e in answer["events"] if e["event"] == "signature.status"]
    assert [s["signatureType"] for s in signatures] == ["Seller", "Seller", "Buyer"]
    assert all(is_uuid(s["userId"]) for s in signatures)
    assert signatures[0]["userId"] == signatures[1]["userId"] != signatures[2]["userId"]
    # The approved offer's buyer signs: no sandbox offer was needed.
    assert {e["event"] for e in answer["events"]} == {"signature.status", "deal.status"}


async def test_buyer_signature_without_a_buyer_names_the_sandbox_buyer(client, caller):
    deal = await draft_deal(client, caller)
    response = await trigger(
        client, "signatureStatus", {"dealId": deal["id"]}, secret=caller.webhook_secret
    )
    assert response.status_code == 200
    events = response.json()["events"]
    signatures = [e["data"] for e in events if e["event"] == "signature.status"]
    assert [s["signatureType"] for s in signatures] == ["Seller", "Seller", "Buyer"]
    assert all(is_uuid(s["userId"]) for s in signatures)


async def test_payment_without_a_buyer_names_the_sandbox_buyer(client, caller):
    deal = await draft_deal(client, caller)
    response = await trigger(
        client, "paymentStatus", {"dealId": deal["id"]}, secret=caller.webhook_secret
    )
    assert response.status_code == 200
    payments = [e["data"] for e in response.json()["events"] if e["event"] == "payment.status"]
    offer = next(e["data"] for e in response.json()["events"] if e["event"] == "deal.offer")
    assert offer["buyerEmail"] == "buyer@sandbox.example.com"
    assert {p["buyerUserId"] for p in payments} != {None}
    assert all(is_uuid(p["buyerUserId"]) for p in payments)


async def test_seller_signature_signs_a_draft_deal_through_the_real_steps(client, caller):
    """The interface: the deal becomes Signed, whatever the signature's type. The seller's
    signs the draft (Ad), then a sandbox buyer is approved and signs."""
    deal = await draft_deal(client, caller)
    answer = await fire(
        client, caller, "signatureStatus", {"dealId": deal["id"], "signatureType": "Seller"}
    )
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Signed"
    assert answer["deal"]["status"] == "Signed"
    offer_id = answer["events"][2]["data"]["id"]
    assert summary(answer["events"]) == [
        ("signature.status", "Seller"),
        ("deal.status", "Ad"),
        ("deal.offer", offer_id),
        ("deal.offerApproved", offer_id),
        ("signature.status", "Buyer"),
        ("deal.status", "Signed"),
    ]
    assert answer["events"] == (await deal_events(client, caller, deal["id"]))[-6:]


async def test_seller_signature_on_an_ad_deal_reports_it_and_signs_the_deal(client, caller):
    deal = await draft_deal(client, caller)
    await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Ad"})
    answer = await fire(
        client, caller, "signatureStatus", {"dealId": deal["id"], "signatureType": "Seller"}
    )
    assert answer["deal"]["status"] == "Signed"
    offer_id = answer["events"][1]["data"]["id"]
    assert summary(answer["events"]) == [
        ("signature.status", "Seller"),
        ("deal.offer", offer_id),
        ("deal.offerApproved", offer_id),
        ("signature.status", "Buyer"),
        ("deal.status", "Signed"),
    ]


async def test_buyer_signature_on_an_ad_deal_signs_it(client, caller):
    deal = await draft_deal(client, caller)
    await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Ad"})
    answer = await fire(client, caller, "signatureStatus", {"dealId": deal["id"]})
    assert answer["deal"]["status"] == "Signed"
    offer_id = answer["events"][0]["data"]["id"]
    assert summary(answer["events"]) == [
        ("deal.offer", offer_id),
        ("deal.offerApproved", offer_id),
        ("signature.status", "Buyer"),
        ("deal.status", "Signed"),
    ]


async def test_initiated_signature_is_sent_then_completed_and_the_deal_is_signed(client, caller):
    """The interface: the effect of signatureStatus is Signed, "Always (sandbox)", whatever the
    status sent. The event asked for is sent as asked (its date too), then the seller completes
    the signature, and the deal goes on to Signed through the real steps."""
    deal = await draft_deal(client, caller)
    answer = await fire(
        client,
        caller,
        "signatureStatus",
        {
            "dealId": deal["id"],
            "status": "Initiated",
            "signatureType": "Seller",
            "signatureDate": 1795000000123,
        },
    )
    assert answer["deal"]["status"] == "Signed"
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Signed"
    assert answer["events"] == (await deal_events(client, caller, deal["id"]))[1:]
    offer_id = answer["events"][3]["data"]["id"]
    assert [
        (e["event"], e["data"].get("signatureType"), e["data"].get("status", offer_id))
        for e in answer["events"]
    ] == [
        ("signature.status", "Seller", "Initiated"),
        ("signature.status", "Seller", "Completed"),
        ("deal.status", None, "Ad"),
        ("deal.offer", None, offer_id),
        ("deal.offerApproved", None, offer_id),
        ("signature.status", "Buyer", "Completed"),
        ("deal.status", None, "Signed"),
    ]
    assert answer["events"][0]["data"]["signatureDate"] == 1795000000123


@pytest.mark.parametrize("signature_type", ["Buyer", None])
async def test_failed_signature_is_sent_then_signed_again(signature_type, client, caller):
    """A failed signature is reported as sent; the party then starts again and completes it, as
    on their page, and the deal ends Signed. With no type on a draft it is the seller's (the
    signature a draft waits for)."""
    deal = await draft_deal(client, caller)
    body = {"dealId": deal["id"], "status": "Failed"}
    if signature_type:
        body["signatureType"] = signature_type
    answer = await fire(client, caller, "signatureStatus", body)
    assert answer["deal"]["status"] == "Signed"
    signatures = [
        (e["data"]["signatureType"], e["data"]["status"])
        for e in answer["events"]
        if e["event"] == "signature.status"
    ]
    if signature_type == "Buyer":
        # The seller's signature first (Initiated, Completed: the fast-forward), then the buyer's.
        assert signatures == [
            ("Seller", "Initiated"),
            ("Seller", "Completed"),
            ("Buyer", "Failed"),
            ("Buyer", "Initiated"),
            ("Buyer", "Completed"),
        ]
    else:
        assert signatures == [
            ("Seller", "Failed"),
            ("Seller", "Initiated"),
            ("Seller", "Completed"),
            ("Buyer", "Completed"),
        ]
    assert [e["data"]["status"] for e in answer["events"] if e["event"] == "deal.status"] == [
        "Ad",
        "Signed",
    ]


@pytest.mark.parametrize("status", ["Initiated", "Failed"])
async def test_unfinished_signature_on_a_signed_deal_is_reported_only(status, client, caller):
    """Past the signature the lifecycle cannot go back: the event is sent as asked, the deal
    stays Signed."""
    deal = await draft_deal(client, caller)
    await fire(client, caller, "signatureStatus", {"dealId": deal["id"]})
    answer = await fire(client, caller, "signatureStatus", {"dealId": deal["id"], "status": status})
    assert answer["deal"]["status"] == "Signed"
    assert [(e["event"], e["data"]["status"]) for e in answer["events"]] == [
        ("signature.status", status)
    ]


async def test_buyer_signature_on_a_draft_deal_fast_forwards_it(client, caller):
    """The issue's example: a Buyer signature on a Draft deal answered 409; the interface says
    the deal becomes Signed, always."""
    deal = await draft_deal(client, caller)
    answer = await fire(
        client,
        caller,
        "signatureStatus",
        {"dealId": deal["id"], "status": "Completed", "signatureType": "Buyer"},
    )
    assert answer["deal"]["status"] == "Signed"
    assert [e["event"] for e in answer["events"]] == [
        "signature.status",
        "signature.status",
        "deal.status",
        "deal.offer",
        "deal.offerApproved",
        "signature.status",
        "deal.status",
    ]
    own = answer["events"][-2]["data"]
    assert (own["signatureType"], own["status"]) == ("Buyer", "Completed")


async def test_deal_offer_creates_pending_offers(client, caller):
    deal = await draft_deal(client, caller, price=4500)
    first = await offer(client, caller, deal["id"], price=4000, buyer=BUYER)
    second = await offer(client, caller, deal["id"])

    offers = await deal_events(client, caller, deal["id"], "deal.offer")
    assert [e["data"] for e in offers] == [first, second]
    assert first["id"] != second["id"]
    assert (first["price"], first["shippingType"], first["buyerName"]) == (
        4000,
        "Carrier",
        "Ola Nordmann",
    )
    # Without price or buyer the deal's price and the sandbox buyer are used.
    assert (second["price"], second["buyerName"], second["buyerEmail"]) == (
        4500,
        "Sandbox Buyer",
        "buyer@sandbox.example.com",
    )
    after = await get_deal(client, caller, deal["id"])
    assert (after["status"], after["price"]) == ("Draft", 4500)


async def test_deal_offer_on_a_deal_without_price_needs_one(client, caller, sessionmaker):
    deal = await draft_deal(client, caller, price=None)
    counts = await row_counts(sessionmaker)
    response = await trigger(
        client, "dealOffer", {"dealId": deal["id"]}, secret=caller.webhook_secret
    )
    # The body is schema-valid: the deal refuses it (400, titled as its status), not the schema.
    body = assert_problem(response, 400)
    assert body["title"] == "Bad Request"
    assert body["errors"] == [{"field": "price", "message": "required when the deal has no price"}]
    assert await row_counts(sessionmaker) == counts


async def test_approval_takes_the_oldest_pending_offer_and_denies_the_others(client, caller):
    deal = await draft_deal(client, caller, price=4500)
    first = await offer(client, caller, deal["id"], price=4000, shippingType="Pickup")
    second = await offer(client, caller, deal["id"], price=4100)
    third = await offer(client, caller, deal["id"], price=4200)

    answer = await fire(client, caller, "dealOfferApproved", {"dealId": deal["id"]})

    assert summary(answer["events"]) == [
        ("deal.offerApproved", first["id"]),
        ("deal.offerDenied", second["id"]),
        ("deal.offerDenied", third["id"]),
    ]
    now = await get_deal(client, caller, deal["id"])
    assert answer["deal"] == now
    assert (now["price"], now["status"]) == (4000, "Draft")
    approvals = await deal_events(client, caller, deal["id"], "deal.offerApproved")
    assert [e["data"]["id"] for e in approvals] == [first["id"]]


async def test_approval_of_a_given_offer(client, caller):
    deal = await draft_deal(client, caller, price=4500)
    first = await offer(client, caller, deal["id"], price=4000)
    second = await offer(client, caller, deal["id"], price=4250.75)

    answer = await fire(
        client, caller, "dealOfferApproved", {"dealId": deal["id"], "id": second["id"]}
    )

    assert summary(answer["events"]) == [
        ("deal.offerApproved", second["id"]),
        ("deal.offerDenied", first["id"]),
    ]
    assert (await get_deal(client, caller, deal["id"]))["price"] == 4250.75


async def test_approved_deal_takes_no_more_offers(client, caller, sessionmaker):
    deal = await deal_with_approved_offer(client, caller)
    counts = await row_counts(sessionmaker)
    # dealOffer answers 400 as the interface lists for it (like the offer link); the others 409.
    for name, status in (("dealOffer", 400), ("dealOfferApproved", 409), ("dealOfferDenied", 409)):
        response = await trigger(client, name, {"dealId": deal["id"]}, secret=caller.webhook_secret)
        assert_problem(response, status)
    assert await row_counts(sessionmaker) == counts


async def test_denial_denies_the_oldest_pending_offer(client, caller):
    deal = await draft_deal(client, caller, price=4500)
    first = await offer(client, caller, deal["id"], price=4000)
    second = await offer(client, caller, deal["id"], price=4100)

    answer = await fire(client, caller, "dealOfferDenied", {"dealId": deal["id"]})

    assert summary(answer["events"]) == [("deal.offerDenied", first["id"])]
    assert (answer["deal"]["price"], answer["deal"]["status"]) == (4500, "Draft")
    # The other offer is still pending: approving now takes it.
    approved = await fire(client, caller, "dealOfferApproved", {"dealId": deal["id"]})
    assert summary(approved["events"]) == [("deal.offerApproved", second["id"])]
    assert approved["deal"]["price"] == 4100


async def test_denial_of_a_given_offer_and_of_a_decided_one(client, caller, sessionmaker):
    deal = await draft_deal(client, caller, price=4500)
    first = await offer(client, caller, deal["id"])
    second = await offer(client, caller, deal["id"])
    answer = await fire(
        client, caller, "dealOfferDenied", {"dealId": deal["id"], "id": second["id"]}
    )
    assert summary(answer["events"]) == [("deal.offerDenied", second["id"])]

    counts = await row_counts(sessionmaker)
    again = await trigger(
        client,
        "dealOfferDenied",
        {"dealId": deal["id"], "id": second["id"]},
        secret=caller.webhook_secret,
    )
    assert assert_problem(again, 409)["detail"] == f"Offer {second['id']} is Denied, not Pending."
    unknown = str(uuid.uuid4())
    missing = await trigger(
        client,
        "dealOfferDenied",
        {"dealId": deal["id"], "id": unknown},
        secret=caller.webhook_secret,
    )
    problem = assert_problem(missing, 400)
    assert problem["detail"] == f"No offer {unknown} on deal {deal['id']}."
    assert problem["errors"] == [{"field": "id", "message": "names no offer of this deal"}]
    assert await row_counts(sessionmaker) == counts
    assert [
        e["data"]["id"] for e in await deal_events(client, caller, deal["id"], "deal.offer")
    ] == [
        first["id"],
        second["id"],
    ]


@pytest.mark.parametrize(
    ("name", "kind", "price"),
    [
        ("dealOfferApproved", "deal.offerApproved", 4500.5),
        ("dealOfferDenied", "deal.offerDenied", None),
    ],
)
async def test_decision_without_a_pending_offer_makes_a_sandbox_one(
    name, kind, price, client, caller
):
    deal = await draft_deal(client, caller)
    answer = await fire(client, caller, name, {"dealId": deal["id"]})
    offer = answer["events"][0]["data"]
    assert summary(answer["events"]) == [("deal.offer", offer["id"]), (kind, offer["id"])]
    assert (offer["buyerName"], offer["buyerEmail"]) == (
        "Sandbox Buyer",
        "buyer@sandbox.example.com",
    )
    assert answer["deal"]["status"] == "Draft"
    assert answer["deal"]["price"] == 4500.5


async def test_decision_on_a_deal_past_its_offers_is_409(client, caller, sessionmaker):
    deal = await signed_deal(client, caller)
    counts = await row_counts(sessionmaker)
    for name in ("dealOfferApproved", "dealOfferDenied"):
        response = await trigger(client, name, {"dealId": deal["id"]}, secret=caller.webhook_secret)
        assert assert_problem(response, 409)["detail"] == f"Deal {deal['id']} has no pending offer."
    assert await row_counts(sessionmaker) == counts


@pytest.mark.parametrize(
    ("shipping", "target"), [("Pickup", "Pickup_Pending"), ("Carrier", "Shipping_Pending")]
)
async def test_payment_paid_on_a_signed_deal_moves_it_on(shipping, target, client, caller):
    deal = await signed_deal(client, caller, shipping)
    signatures = await deal_events(client, caller, deal["id"], "signature.status")

    answer = await fire(client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})

    now = await get_deal(client, caller, deal["id"])
    assert (now["status"], now["paymentStatus"]) == (target, "Paid")
    assert answer["deal"] == now
    assert summary(answer["events"]) == [
        ("payment.status", "Created"),
        ("payment.status", "Processing"),
        ("payment.status", "Paid"),
        ("deal.status", target),
    ]
    payment = answer["events"][2]["data"]
    users = {s["data"]["signatureType"]: s["data"]["userId"] for s in signatures}
    assert payment == {
        "dealId": deal["id"],
        "sellerUserId": users["Seller"],
        "buyerUserId": users["Buyer"],
        "status": "Paid",
        "amount": "4200.50",
        "fee": "210.03",
        "currency": "NOK",
    }


async def test_payment_status_defaults_to_paid(client, caller):
    deal = await signed_deal(client, caller, "Carrier")
    answer = await fire(client, caller, "paymentStatus", {"dealId": deal["id"]})
    assert answer["deal"]["paymentStatus"] == "Paid"
    assert answer["deal"]["status"] == "Shipping_Pending"


async def test_payment_other_than_paid_sets_only_the_payment_status(client, caller):
    deal = await signed_deal(client, caller)
    answer = await fire(
        client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Processing"}
    )
    now = await get_deal(client, caller, deal["id"])
    assert (now["status"], now["paymentStatus"]) == ("Signed", "Processing")
    assert summary(answer["events"]) == [
        ("payment.status", "Created"),
        ("payment.status", "Processing"),
    ]


PAYOUTS = ["PendingPayOut", "PaidOut", "PayoutFailed", "PayoutCancelled"]


async def paid_deal(client: httpx.AsyncClient, caller: Any) -> dict:
    """A deal whose buyer has paid: ``Pickup_Pending``, the money held."""
    deal = await signed_deal(client, caller, "Pickup")
    await fire(client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
    return deal


@pytest.mark.parametrize("status", PAYOUTS)
@pytest.mark.parametrize("paid", [False, True], ids=["signed", "paid"])
async def test_payout_status_fast_forwards_the_deal_to_completed(status, paid, client, caller):
    """Money never leaves escrow before ``Completed``, in the sandbox either: a payout status
    takes the deal there first, as the buyer's approval would, then walks the payment."""
    deal = await (paid_deal if paid else signed_deal)(client, caller)
    answer = await fire(client, caller, "paymentStatus", {"dealId": deal["id"], "status": status})
    now = await get_deal(client, caller, deal["id"])
    assert (now["status"], now["paymentStatus"]) == ("Completed", status)
    moves = [e["data"]["status"] for e in answer["events"] if e["event"] == "deal.status"]
    assert moves == ([] if paid else ["Pickup_Pending"]) + ["Completed"]
    payments = [e["data"]["status"] for e in answer["events"] if e["event"] == "payment.status"]
    walked = {
        "PendingPayOut": ["PendingPayOut", "PendingPayOut"],  # queued, then the trigger's own
        "PaidOut": ["PendingPayOut", "PaidOut"],
        "PayoutFailed": ["PendingPayOut", "PayoutFailed"],
        "PayoutCancelled": ["PendingPayOut", "PayoutCancelled"],
    }[status]
    assert payments == ([] if paid else ["Created", "Processing", "Paid"]) + walked


@pytest.mark.parametrize("paid", [False, True], ids=["signed", "paid"])
async def test_refund_status_fast_forwards_the_deal_to_refunded(paid, client, caller):
    deal = await (paid_deal if paid else signed_deal)(client, caller)
    answer = await fire(
        client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Refunded"}
    )
    now = await get_deal(client, caller, deal["id"])
    assert (now["status"], now["paymentStatus"]) == ("Refunded", "Refunded")
    moves = [e["data"]["status"] for e in answer["events"] if e["event"] == "deal.status"]
    assert moves == ([] if paid else ["Pickup_Pending"]) + ["Pickup_Expired", "Refunded"]
    payments = [e["data"]["status"] for e in answer["events"] if e["event"] == "payment.status"]
    assert payments == ([] if paid else ["Created", "Processing", "Paid"]) + ["Refunded"]


async def test_payout_statuses_on_a_completed_deal(client, caller):
    deal = await paid_deal(client, caller)
    moved = await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Completed"})
    assert (moved["deal"]["status"], moved["deal"]["paymentStatus"]) == (
        "Completed",
        "PendingPayOut",
    )
    answer = await fire(
        client, caller, "paymentStatus", {"dealId": deal["id"], "status": "PaidOut"}
    )
    assert (answer["deal"]["status"], answer["deal"]["paymentStatus"]) == ("Completed", "PaidOut")
    assert summary(answer["events"]) == [("payment.status", "PaidOut")]


async def test_refunded_on_a_refunded_deal(client, caller):
    deal = await paid_deal(client, caller)
    moved = await fire(
        client, caller, "dealStatus", {"dealId": deal["id"], "status": "Pickup_Expired"}
    )
    assert moved["deal"]["status"] == "Refunded"  # expiry goes on to Refunded at once
    answer = await fire(
        client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Refunded"}
    )
    assert (answer["deal"]["status"], answer["deal"]["paymentStatus"]) == ("Refunded", "Refunded")


async def test_fee_is_five_percent_rounded_half_up(client, caller):
    deal = await deal_with_approved_offer(client, caller, price=10.1)  # 5 % = 0.505
    answer = await fire(
        client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Created"}
    )
    data = next(e["data"] for e in answer["events"] if e["event"] == "payment.status")
    assert (data["amount"], data["fee"]) == ("10.10", "0.51")


async def test_deal_status_moves_along_a_legal_transition(client, caller):
    deal = await draft_deal(client, caller)
    answer = await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Ad"})
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Ad"
    # As a real deal reaches Ad: the seller signs.
    assert summary(answer["events"]) == [
        ("signature.status", "Seller"),
        ("signature.status", "Seller"),
        ("deal.status", "Ad"),
    ]
    answer = await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Cancelled"})
    assert answer["deal"]["status"] == "Cancelled"
    statuses = [
        e["data"]["status"] for e in await deal_events(client, caller, deal["id"], "deal.status")
    ]
    assert statuses == ["Draft", "Ad", "Cancelled"]


async def test_deal_status_walks_a_shipping_path(client, caller):
    deal = await signed_deal(client, caller, "Carrier")
    await fire(client, caller, "paymentStatus", {"dealId": deal["id"]})
    for status in ("Shipping_In_Progress", "Shipping_Arrived", "Completed"):
        answer = await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": status})
        assert answer["deal"]["status"] == status
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Completed"


REACHABLE_FROM_DRAFT = [
    "Ad",
    "Signed",
    "Cancelled",
    "Pickup_Pending",
    "Pickup_Expired",
    "Pickup_Denied",
    "Shipping_Pending",
    "Shipping_Expired",
    "Shipping_In_Progress",
    "Shipping_Arrived",
    "Shipping_Returned",
    "Shipping_Review_Denied",
    "Refunded",
    "Completed",
]


@pytest.mark.parametrize(
    ("setup", "target", "current", "allowed"),
    [
        ("draft", "Draft", "Draft", REACHABLE_FROM_DRAFT),
        ("cancelled", "Draft", "Cancelled", []),
        ("cancelled", "Completed", "Cancelled", []),
    ],
)
async def test_unreachable_deal_status_is_409_with_the_reachable_ones(
    setup, target, current, allowed, client, caller, sessionmaker
):
    deal = await draft_deal(client, caller)
    if setup == "cancelled":
        await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Cancelled"})
    counts = await row_counts(sessionmaker)

    response = await trigger(
        client, "dealStatus", {"dealId": deal["id"], "status": target}, secret=caller.webhook_secret
    )

    body = assert_problem(response, 409)
    assert body["currentStatus"] == current
    assert body["allowedStatuses"] == allowed
    assert await row_counts(sessionmaker) == counts
    assert (await get_deal(client, caller, deal["id"]))["status"] == current


async def test_deal_status_with_a_deal_needs_a_status(client, caller, sessionmaker):
    deal = await draft_deal(client, caller)
    counts = await row_counts(sessionmaker)
    response = await trigger(
        client, "dealStatus", {"dealId": deal["id"]}, secret=caller.webhook_secret
    )
    assert assert_problem(response, 405)["errors"] == [
        {"field": "status", "message": "field required"}
    ]
    assert await row_counts(sessionmaker) == counts


# === 4. Idempotency-Key ==========================================================================

REPLAY_BODIES = {
    "signatureStatus": ({"status": "Initiated"}, {"status": "Failed"}),
    "dealOffer": ({"price": 10}, {"price": 11}),
    "dealOfferApproved": ({}, {"date": 1795000000000}),
    "dealOfferDenied": ({}, {"date": 1795000000000}),
    "paymentStatus": ({"status": "Paid"}, {"status": "Refunded"}),
    "dealStatus": ({"status": "Ad"}, {"status": "Signed"}),
}


@pytest.mark.parametrize("name", TRIGGERS)
async def test_idempotency_key_replays_the_first_answer(name, client, caller):
    first_body, other_body = REPLAY_BODIES[name]
    key = {"Idempotency-Key": f"replay-{name}"}
    secret = caller.webhook_secret

    first = await trigger(client, name, first_body, secret=secret, headers=key)
    again = await trigger(client, name, first_body, secret=secret, headers=key)

    assert first.status_code == again.status_code == (204 if name == "dealOffer" else 200)
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert len(await list_events(client, caller)) == 1

    mismatch = await trigger(client, name, other_body, secret=secret, headers=key)
    problem = assert_problem(mismatch, 422)
    assert problem["title"] == "Idempotency key reused"
    assert len(await list_events(client, caller)) == 1


async def test_idempotency_key_on_a_trigger_with_a_deal(client, caller):
    deal = await draft_deal(client, caller)
    body = {"dealId": deal["id"], "status": "Cancelled"}
    key = {"Idempotency-Key": "cancel-once"}
    first = await trigger(client, "dealStatus", body, secret=caller.webhook_secret, headers=key)
    again = await trigger(client, "dealStatus", body, secret=caller.webhook_secret, headers=key)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    statuses = [e["data"]["status"] for e in await deal_events(client, caller, deal["id"])]
    assert statuses == ["Draft", "Cancelled"]
    # Without the key the same request is a new one, and now an illegal transition.
    fresh = await trigger(client, "dealStatus", body, secret=caller.webhook_secret)
    assert assert_problem(fresh, 409)["allowedStatuses"] == []


async def test_idempotency_keys_are_per_integration(client, caller, other):
    key = {"Idempotency-Key": "shared-key"}
    mine = await trigger(client, "dealStatus", {}, secret=caller.webhook_secret, headers=key)
    theirs = await trigger(client, "dealStatus", {}, secret=other.webhook_secret, headers=key)
    assert mine.status_code == theirs.status_code == 200
    assert "idempotent-replayed" not in theirs.headers
    assert mine.json()["events"][0]["id"] != theirs.json()["events"][0]["id"]


async def test_refused_trigger_leaves_its_idempotency_key_free(client, caller):
    deal = await draft_deal(client, caller)
    key = {"Idempotency-Key": "retry-me"}
    body = {"dealId": deal["id"], "status": "Draft"}
    refused = await trigger(client, "dealStatus", body, secret=caller.webhook_secret, headers=key)
    assert_problem(refused, 409)
    fixed = {"dealId": deal["id"], "status": "Ad"}
    retried = await trigger(client, "dealStatus", fixed, secret=caller.webhook_secret, headers=key)
    assert retried.status_code == 200
    assert retried.json()["deal"]["status"] == "Ad"


async def test_payment_on_a_draft_is_made_once_the_deal_is_signed(client, caller):
    """The issue's example: ``Paid`` on a ``Draft`` deal answered 409."""
    deal = await draft_deal(client, caller)
    answer = await fire(client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
    assert (answer["deal"]["status"], answer["deal"]["paymentStatus"]) == (
        "Shipping_Pending",
        "Paid",
    )
    kinds = [e["event"] for e in answer["events"]]
    assert kinds == [
        "signature.status",
        "signature.status",
        "deal.status",
        "deal.offer",
        "deal.offerApproved",
        "signature.status",
        "signature.status",
        "deal.status",
        "payment.status",
        "payment.status",
        "payment.status",
        "deal.status",
    ]


async def test_clock_advance_fires_due_deadlines(client, caller):
    deal = await signed_deal(client, caller, "Pickup")
    await fire(client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Pickup_Pending"
    headers = {"webhook-secret": caller.webhook_secret}
    early = await client.post(
        "/sandbox/v1/clock/advance", json={"seconds": 6 * 24 * 3600}, headers=headers
    )
    assert early.status_code == 200
    assert early.json() == {"clockOffsetSeconds": 6 * 24 * 3600, "timersMoved": 1, "timersFired": 0}
    due = await client.post(
        "/sandbox/v1/clock/advance", json={"seconds": 24 * 3600}, headers=headers
    )
    assert due.json() == {"clockOffsetSeconds": 7 * 24 * 3600, "timersMoved": 1, "timersFired": 1}
    now = await get_deal(client, caller, deal["id"])
    assert (now["status"], now["paymentStatus"]) == ("Refunded", "Refunded")
    statuses = [
        e["data"]["status"] for e in await deal_events(client, caller, deal["id"], "deal.status")
    ]
    assert statuses[-2:] == ["Pickup_Expired", "Refunded"]


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        ({"seconds": 0}, True, 405),
        ({"seconds": "1"}, True, 405),
        ({"seconds": 60, "x": 1}, True, 405),
        ({"seconds": 60}, False, 401),
    ],
)
async def test_clock_advance_refuses_bad_requests(client, caller, body, headers, status):
    sent = {"webhook-secret": caller.webhook_secret} if headers else {}
    response = await client.post("/sandbox/v1/clock/advance", json=body, headers=sent)
    assert_problem(response, status)


async def test_clock_moves_only_the_callers_timers(client, caller, other):
    mine = await signed_deal(client, caller, "Pickup")
    theirs = await signed_deal(client, other, "Pickup")
    for who, deal in ((caller, mine), (other, theirs)):
        await fire(client, who, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
    await client.post(
        "/sandbox/v1/clock/advance",
        json={"seconds": 8 * 24 * 3600},
        headers={"webhook-secret": caller.webhook_secret},
    )
    assert (await get_deal(client, caller, mine["id"]))["status"] == "Refunded"
    assert (await get_deal(client, other, theirs["id"]))["status"] == "Pickup_Pending"


async def test_clock_advance_needs_write_scope(client, sessionmaker):
    reader = await make_caller(client, sessionmaker, "Reader", ["deals:read"])
    response = await client.post(
        "/sandbox/v1/clock/advance",
        json={"seconds": 60},
        headers={"webhook-secret": reader.webhook_secret},
    )
    assert (
        assert_problem(response, 403)["detail"] == "This integration lacks the scope deals:write."
    )
