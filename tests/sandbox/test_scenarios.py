"""Sandbox scenarios: ``GET`` and ``POST /sandbox/v1/scenarios``.

Each scenario runs end to end on a new deal through the app, its webhooks delivered to a real
receiver on loopback, signed, in the order the events API lists them; and on deals of the
caller's at various points of the path."""

from typing import Any

import httpx
import pytest

from dealbroker.events.tasks import DeliveryJob
from tests.conftest import make_caller, row_counts
from tests.sandbox.calls import (
    assert_delivered,
    assert_envelope,
    assert_lifecycle_order,
    assert_problem,
    deal_events,
    deal_in,
    get_deal,
    register_endpoint,
)

PATH = "/sandbox/v1/scenarios"


def story(events: list[dict]) -> list[str]:
    """Each event as ``kind:telling values``, for readable comparisons."""
    out = []
    for e in events:
        data = e["data"]
        if e["event"] == "signature.status":
            out.append(f"signature:{data['signatureType']}:{data['status']}")
        elif e["event"] in ("deal.status", "payment.status"):
            out.append(f"{e['event'].split('.')[0]}:{data['status']}")
        else:
            out.append(e["event"])
    return out


SIGNED = [
    "deal:Draft",
    "signature:Seller:Initiated",
    "signature:Seller:Completed",
    "deal:Ad",
    "deal.offer",
    "deal.offerApproved",
    "signature:Buyer:Initiated",
    "signature:Buyer:Completed",
    "deal:Signed",
]
PAID = ["payment:Created", "payment:Processing", "payment:Paid"]
SHIPPING = [*SIGNED, *PAID, "deal:Shipping_Pending"]
PICKUP = [*SIGNED, *PAID, "deal:Pickup_Pending"]
# The simulated carrier reports as a real one does: its deal.shipment, then the status it causes.
ARRIVED = [*SHIPPING, "deal:Shipping_In_Progress", "deal.shipment", "deal:Shipping_Arrived"]
PAID_OUT = ["payment:PendingPayOut", "payment:PaidOut"]
REFUNDED = ["deal:Refunded", "payment:Refunded"]

# name: (final status, final payment status, the whole story of a new deal)
EXPECTED: dict[str, tuple[str, str | None, list[str]]] = {
    "carrier-completed": ("Completed", "PaidOut", [*ARRIVED, "deal:Completed", *PAID_OUT]),
    "carrier-review-period-ends": (
        "Completed",
        "PaidOut",
        [*ARRIVED, "deal:Completed", *PAID_OUT],
    ),
    "carrier-returned-refunded": (
        "Refunded",
        "Refunded",
        [
            *SHIPPING,
            "deal:Shipping_In_Progress",
            "deal.shipment",
            "deal:Shipping_Returned",
            *REFUNDED,
        ],
    ),
    "pickup-completed": ("Completed", "PaidOut", [*PICKUP, "deal:Completed", *PAID_OUT]),
    "pickup-expired-refunded": (
        "Refunded",
        "Refunded",
        [*PICKUP, "deal:Pickup_Expired", *REFUNDED],
    ),
    "review-denied-resolved-for-seller": (
        "Completed",
        "PaidOut",
        [*ARRIVED, "deal:Shipping_Review_Denied", "deal:Completed", *PAID_OUT],
    ),
    "review-denied-resolved-for-buyer": (
        "Refunded",
        "Refunded",
        [*ARRIVED, "deal:Shipping_Review_Denied", *REFUNDED],
    ),
    "payment-failed-then-paid": (
        "Shipping_Pending",
        "Paid",
        [
            *SIGNED,
            "payment:Created",
            "payment:Processing",
            "payment:PaymentFailed",
            *PAID,
            "deal:Shipping_Pending",
        ],
    ),
    "cancelled-with-pending-offer": (
        "Cancelled",
        None,
        ["deal:Draft", "deal.offer", "deal:Cancelled", "deal.offerDenied"],
    ),
}


async def run(client: httpx.AsyncClient, caller: Any, **body: Any) -> httpx.Response:
    return await client.post(PATH, json=body, headers={"webhook-secret": caller.webhook_secret})


async def deliver_in_order(sessionmaker: Any) -> int:
    """Deliver one at a time, oldest first, as a receiver that wants order would be served."""
    worker = DeliveryJob(sessionmaker, allow_private=True, batch_size=1)
    sent = 0
    try:
        while handled := await worker.run_once():
            sent += handled
    finally:
        await worker.aclose()
    return sent


async def test_scenarios_are_listed_with_a_description(client, caller):
    response = await client.get(PATH, headers={"webhook-secret": caller.webhook_secret})
    assert response.status_code == 200
    items = response.json()["items"]
    assert [i["name"] for i in items] == list(EXPECTED)
    for item in items:
        assert set(item) == {"name", "description", "shippingType", "startsFrom"}
        assert len(item["description"]) > 40


@pytest.mark.parametrize("name", list(EXPECTED))
async def test_scenario_end_to_end_with_its_webhooks_in_order(
    name,
    client,
    caller,
    sessionmaker,
    receiver,
):
    await register_endpoint(client, caller, receiver.url)
    status, payment, expected = EXPECTED[name]

    response = await run(client, caller, scenario=name)

    assert response.status_code == 200, response.text
    answer = response.json()
    deal = await get_deal(client, caller, answer["dealId"])
    assert (answer["scenario"], answer["status"], answer["paymentStatus"]) == (
        name,
        status,
        payment,
    )
    assert answer["deal"] == deal
    assert (deal["status"], deal["paymentStatus"]) == (status, payment)
    assert deal["seller"]["email"] == "seller@sandbox.example.com"
    events = answer["events"]
    assert events == await deal_events(client, caller, deal["id"])
    assert story(events) == expected
    assert_lifecycle_order("Draft", events[1:])
    for event in events:
        assert_envelope(event, event["event"])

    assert await deliver_in_order(sessionmaker) == len(events)
    received = [assert_delivered(r, caller, receiver.url) for r in receiver.requests]
    assert received == events


async def test_a_given_deal_goes_on_from_its_step(client, caller):
    deal = await deal_in(client, caller, "Shipping_In_Progress")
    response = await run(client, caller, scenario="carrier-completed", dealId=deal["id"])
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["dealId"] == deal["id"]
    assert story(answer["events"]) == [
        "deal.shipment",
        "deal:Shipping_Arrived",
        "deal:Completed",
        *PAID_OUT,
    ]


async def test_a_given_draft_is_fast_forwarded_to_the_start(client, caller):
    deal = await deal_in(client, caller, "Draft")
    response = await run(client, caller, scenario="pickup-expired-refunded", dealId=deal["id"])
    assert response.status_code == 200, response.text
    assert story(response.json()["events"]) == [
        *PICKUP[1:],
        "deal:Pickup_Expired",
        *REFUNDED,
    ]
    offer = next(e for e in response.json()["events"] if e["event"] == "deal.offer")
    assert offer["data"]["shippingType"] == "Pickup"


async def test_time_passes_for_the_scenarios_deal_only(client, caller):
    other = await deal_in(client, caller, "Pickup_Pending")
    response = await run(client, caller, scenario="pickup-expired-refunded")
    assert response.json()["status"] == "Refunded"
    assert (await get_deal(client, caller, other["id"]))["status"] == "Pickup_Pending"


@pytest.mark.parametrize(
    ("start", "name"),
    [
        ("Pickup_Pending", "carrier-completed"),  # the agreed shipping type is Pickup
        ("Completed", "carrier-returned-refunded"),
        ("Signed", "cancelled-with-pending-offer"),  # no offers after the approved one
        ("Cancelled", "payment-failed-then-paid"),
    ],
)
async def test_a_path_the_deal_cannot_take_is_409_and_changes_nothing(
    start, name, client, caller, sessionmaker
):
    deal = await deal_in(client, caller, start)
    before = await get_deal(client, caller, deal["id"])
    counts = await row_counts(sessionmaker)
    response = await run(client, caller, scenario=name, dealId=deal["id"])
    problem = assert_problem(response, 409)
    assert problem["currentStatus"] == start
    assert await row_counts(sessionmaker) == counts
    assert await get_deal(client, caller, deal["id"]) == before


async def test_another_integrations_deal_is_404(client, caller, other, sessionmaker):
    theirs = await deal_in(client, other, "Draft")
    counts = await row_counts(sessionmaker)
    response = await run(client, caller, scenario="carrier-completed", dealId=theirs["id"])
    assert assert_problem(response, 404)["detail"] == f"No deal {theirs['id']}."
    assert await row_counts(sessionmaker) == counts


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        ({"scenario": "carrier-teleported"}, "scenario"),
        ({}, "scenario"),
        ({"scenario": "carrier-completed", "dealId": "deal-1"}, "dealId"),
        ({"scenario": "carrier-completed", "colour": "red"}, "colour"),
    ],
)
async def test_a_bad_body_is_405(body, field_name, client, caller, sessionmaker):
    counts = await row_counts(sessionmaker)
    response = await client.post(PATH, json=body, headers={"webhook-secret": caller.webhook_secret})
    problem = assert_problem(response, 405)
    assert [e["field"] for e in problem["errors"]] == [field_name]
    assert await row_counts(sessionmaker) == counts


@pytest.mark.parametrize("method", ["get", "post"])
async def test_authenticated_by_the_webhook_secret(method, client, sessionmaker):
    reader = await make_caller(client, sessionmaker, "Reader", ["deals:read"])
    body = {"json": {"scenario": "carrier-completed"}} if method == "post" else {}
    for headers, status in (
        ({}, 401),
        ({"webhook-secret": "whsec_wrong"}, 401),
        ({"webhook-secret": reader.webhook_secret}, 403),
    ):
        response = await client.request(method.upper(), PATH, headers=headers, **body)
        assert_problem(response, status)


@pytest.mark.parametrize("method", ["get", "post"])
async def test_production_has_no_scenarios(method, production_client, caller):
    response = await production_client.request(
        method.upper(),
        PATH,
        headers={"webhook-secret": caller.webhook_secret},
        **({"json": {"scenario": "carrier-completed"}} if method == "post" else {}),
    )
    assert_problem(response, 404)
