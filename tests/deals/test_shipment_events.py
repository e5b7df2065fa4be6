"""POST /deals/v1/deals/{dealId}/shipment-events: the carrier's word on the parcel, from the
integration that books the shipment. Every event is recorded, shown to both parties and
emitted (``deal.shipment``); ``picked_up`` (while pending), ``delivered`` and ``returned`` move
the deal through the lifecycle; an event that makes no sense for the status is 409."""

import html
import time
import uuid

import pytest
from sqlalchemy import select

from dealbroker.deals.models import DealTimer
from tests.conftest import create_deal, make_caller, row_counts
from tests.lifecycle_helpers import run_provider_calls
from tests.sandbox.calls import deal_events, fire, get_deal
from tests.web.pages import path

DAY_MS = 24 * 3600 * 1000


def url(deal_id: str) -> str:
    return f"/deals/v1/deals/{deal_id}/shipment-events"


def event(kind: str, **fields: object) -> dict:
    return {
        "type": kind,
        "carrier": "Posten",
        "trackingNumber": "370712345678",
        "occurredAt": int(time.time() * 1000) - 60_000,
        **fields,
    }


async def deal_in(client, caller, status: str) -> dict:
    deal = await create_deal(client, caller)
    await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": status})
    assert (await get_deal(client, caller, deal["id"]))["status"] == status
    return deal


async def report(client, caller, deal: dict, body: dict, **headers: str):
    return await client.post(url(deal["id"]), json=body, headers={**caller.headers, **headers})


async def shipment_events(client, caller, deal: dict) -> list[dict]:
    return [e["data"] for e in await deal_events(client, caller, deal["id"], "deal.shipment")]


async def timers(sessionmaker, deal: dict) -> list[str]:
    async with sessionmaker() as session:
        rows = await session.scalars(
            select(DealTimer.trigger).where(
                DealTimer.deal_id == uuid.UUID(deal["id"]), DealTimer.fired_at.is_(None)
            )
        )
        return sorted(rows)


async def test_picked_up_is_the_hand_over_of_a_pending_deal(client, caller, sessionmaker):
    deal = await deal_in(client, caller, "Shipping_Pending")
    body = event("picked_up")
    answer = await report(client, caller, deal, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "Shipping_In_Progress"
    assert await shipment_events(client, caller, deal) == [{"dealId": deal["id"], **body}]
    # The carrier's news first, then the status change it caused, in the deal's order.
    kinds = [
        (e["event"], e["data"].get("status")) for e in await deal_events(client, caller, deal["id"])
    ]
    assert kinds[-2:] == [("deal.shipment", None), ("deal.status", "Shipping_In_Progress")]
    assert "transit_expired" in await timers(sessionmaker, deal)


async def test_in_transit_and_picked_up_are_recorded_while_in_transit(client, caller):
    deal = await deal_in(client, caller, "Shipping_In_Progress")
    first = event("picked_up", occurredAt=int(time.time() * 1000) - 3_600_000)
    second = event("in_transit", carrier="PostNord")
    for body in (first, second):
        answer = await report(client, caller, deal, body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "Shipping_In_Progress"
    emitted = await shipment_events(client, caller, deal)
    assert [e["type"] for e in emitted] == ["picked_up", "in_transit"]
    assert emitted[1]["carrier"] == "PostNord"
    # The seller's page lists them, with their times (the buyer's: tests/web/test_transit.py).
    shown = html.unescape((await client.get(path(deal["url"]))).text)
    assert "data-carrier-log" in shown
    assert "Posten picked the parcel up" in shown
    assert "The parcel is on its way with PostNord" in shown


async def test_delivered_starts_the_review(client, caller, sessionmaker):
    deal = await deal_in(client, caller, "Shipping_In_Progress")
    answer = await report(client, caller, deal, event("delivered"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "Shipping_Arrived"
    assert "review_period_ended" in await timers(sessionmaker, deal)
    statuses = [
        e["data"]["status"] for e in await deal_events(client, caller, deal["id"], "deal.status")
    ]
    assert statuses[-1] == "Shipping_Arrived"


async def test_returned_refunds_the_whole_amount(client, caller, sessionmaker):
    deal = await deal_in(client, caller, "Shipping_In_Progress")
    answer = await report(client, caller, deal, event("returned"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "Refunded"
    await run_provider_calls(sessionmaker)  # the worker's job sends the refund
    assert (await get_deal(client, caller, deal["id"]))["paymentStatus"] == "Refunded"
    payments = [e["data"] for e in await deal_events(client, caller, deal["id"], "payment.status")]
    assert payments[-1]["status"] == "Refunded"
    paid = next(p for p in payments if p["status"] == "Paid")
    assert payments[-1]["amount"] == paid["amount"]  # refund = amount


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("Signed", "picked_up"),
        ("Shipping_Pending", "in_transit"),
        ("Shipping_Pending", "delivered"),
        ("Shipping_Pending", "returned"),
        ("Shipping_Arrived", "delivered"),
        ("Shipping_Arrived", "picked_up"),
        ("Completed", "returned"),
    ],
)
async def test_an_event_that_makes_no_sense_for_the_status_is_409(
    client, caller, sessionmaker, status, kind
):
    deal = await deal_in(client, caller, status)
    before = await row_counts(sessionmaker)
    answer = await report(client, caller, deal, event(kind))
    assert answer.status_code == 409, answer.text
    problem = answer.json()
    assert answer.headers["content-type"] == "application/problem+json"
    assert problem["currentStatus"] == status
    assert await row_counts(sessionmaker) == before
    assert (await get_deal(client, caller, deal["id"]))["status"] == status


async def test_retries_change_nothing(client, caller):
    deal = await deal_in(client, caller, "Shipping_In_Progress")
    body = event("in_transit")
    first = await report(client, caller, deal, body, **{"Idempotency-Key": "scan-1"})
    again = await report(client, caller, deal, body, **{"Idempotency-Key": "scan-1"})
    assert again.status_code == 200
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()
    reused = await report(client, caller, deal, event("delivered"), **{"Idempotency-Key": "scan-1"})
    assert reused.status_code == 422
    # The same event again without a key (the carrier's own retry): taken once.
    assert (await report(client, caller, deal, body)).status_code == 200
    assert len(await shipment_events(client, caller, deal)) == 1


NOW_MS = int(time.time() * 1000)


@pytest.mark.parametrize(
    "body",
    [
        event("delivered", carrier="x" * 101),
        event("delivered", carrier=""),
        event("delivered", carrier="Posten\nInjected"),
        event("delivered", trackingNumber="1" * 101),
        event("delivered", trackingNumber="<script>"),
        event("delivered", occurredAt=NOW_MS + 2 * 3600 * 1000),  # from the future
        event("delivered", occurredAt=NOW_MS - 91 * DAY_MS),  # long before
        event("delivered", occurredAt=-1),
        event("lost"),
        {**event("delivered"), "extra": 1},
        {k: v for k, v in event("delivered").items() if k != "trackingNumber"},
    ],
    ids=[
        "carrier-long",
        "carrier-empty",
        "carrier-newline",
        "tracking-long",
        "tracking-chars",
        "future",
        "past",
        "negative",
        "unknown-type",
        "unknown-field",
        "missing-field",
    ],
)
async def test_every_field_is_bounded(client, caller, sessionmaker, body):
    deal = await deal_in(client, caller, "Shipping_In_Progress")
    before = await row_counts(sessionmaker)
    answer = await report(client, caller, deal, body)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert await row_counts(sessionmaker) == before


async def test_authenticated_and_scoped(client, caller, other, sessionmaker):
    deal = await deal_in(client, caller, "Shipping_In_Progress")
    body = event("delivered")
    assert (await client.post(url(deal["id"]), json=body)).status_code == 401
    reader = await make_caller(client, sessionmaker, "Reader", ["deals:read"])
    forbidden = await client.post(url(deal["id"]), json=body, headers=reader.headers)
    assert forbidden.status_code == 403
    foreign = await client.post(url(deal["id"]), json=body, headers=other.headers)
    assert foreign.status_code == 404
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Shipping_In_Progress"


async def test_documented_in_openapi(client):
    spec = (await client.get("/openapi.json")).json()
    operation = spec["paths"]["/deals/v1/deals/{dealId}/shipment-events"]["post"]
    assert operation["operationId"] == "report_shipment_event"
    assert set(operation["responses"]) >= {"200", "400", "401", "403", "404", "409", "422"}
    problem = operation["responses"]["409"]["content"]["application/problem+json"]
    assert problem["schema"] == {"$ref": "#/components/schemas/Problem"}
    content = operation["requestBody"]["content"]["application/json"]
    assert content["examples"]["delivered"]["value"]["type"] == "delivered"
    assert {"deal.shipment"} <= set(spec["webhooks"])
