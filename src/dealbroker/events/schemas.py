"""Bodies of the webhook-endpoint and events APIs."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dealbroker.core.pagination import Page
from dealbroker.core.statuses import DealStatus, PaymentStatus
from dealbroker.core.validation import HttpUrl, Millis, RequestModel, examples
from dealbroker.events.envelope import INTERFACE_KINDS, OPT_IN_KINDS, TEST_MESSAGE, webhook_test
from dealbroker.events.models import DeliveryAttempt, WebhookEndpoint

Kind = Literal[
    "deal.status",
    "signature.status",
    "deal.offer",
    "deal.offerApproved",
    "deal.offerDenied",
    "payment.status",
    "deal.shipment",
    "deal.message",
]
# Every kind an endpoint may name: the interface's, and the opt-in ones (sent only to an
# endpoint that names them).
KINDS: tuple[str, ...] = Kind.__args__  # type: ignore[attr-defined]
assert set(KINDS) == {k.value for k in INTERFACE_KINDS} | {k.value for k in OPT_IN_KINDS}
EVENTS_DESCRIPTION = (
    "Kinds to receive; omit for every kind of the interface. Opt-in kinds (`deal.message`) are "
    "sent only to an endpoint that names them."
)
ENDPOINT_EXAMPLE: dict[str, Any] = {
    "url": "https://market.example.com/webhooks/dealbroker",
    "events": ["deal.status", "payment.status"],
    "description": "Production receiver",
}


class EndpointCreate(RequestModel):
    model_config = examples(ENDPOINT_EXAMPLE)

    url: HttpUrl
    events: list[Kind] | None = Field(
        default=None, min_length=1, max_length=len(KINDS), description=EVENTS_DESCRIPTION
    )
    description: str | None = Field(default=None, max_length=500)
    enabled: bool = True


class EndpointUpdate(RequestModel):
    """Fields to change; ``events: null`` subscribes to every kind of the interface again (and
    to no opt-in kind)."""

    model_config = examples({"events": None, "enabled": True})

    url: HttpUrl | None = None
    events: list[Kind] | None = Field(
        default=None, min_length=1, max_length=len(KINDS), description=EVENTS_DESCRIPTION
    )
    description: str | None = Field(default=None, max_length=500)
    enabled: bool | None = None


class EndpointOut(BaseModel):
    id: uuid.UUID
    url: str
    events: list[str] | None
    description: str | None
    enabled: bool
    disabledReason: str | None  # noqa: N815
    failingSince: datetime | None  # noqa: N815
    createdAt: datetime  # noqa: N815
    updatedAt: datetime  # noqa: N815


class EndpointList(BaseModel):
    items: list[EndpointOut]


class AttemptOut(BaseModel):
    id: uuid.UUID
    deliveryId: uuid.UUID  # noqa: N815
    eventId: uuid.UUID  # noqa: N815
    attemptedAt: datetime  # noqa: N815
    success: bool
    statusCode: int | None  # noqa: N815
    latencyMs: int  # noqa: N815
    error: str | None
    responseExcerpt: str | None  # noqa: N815


class AttemptPage(BaseModel):
    page: Page
    items: list[AttemptOut]


class EventOut(BaseModel):
    """The envelope exactly as delivered to webhook endpoints. ``deal_sequence``, on an event
    about a deal, is its place among that deal's events (1, 2, ...): order a deal's events by
    it, since deliveries may come out of order or twice."""

    model_config = examples(
        {
            "id": "9b2f6c1e-3d4a-4f5b-8c6d-7e8f9a0b1c2d",
            "event": "deal.status",
            "api_version": "v1",
            "created": 1795000000000,
            "data": {
                "dealId": "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10",
                "status": "Cancelled",
                "statusDate": 1795000000000,
            },
            "deal_sequence": 4,
        }
    )

    id: uuid.UUID
    event: str
    api_version: str
    created: int
    data: dict[str, Any]
    deal_sequence: int | None = Field(
        default=None, ge=1, description="The event's place among its deal's events (1, 2, ...)."
    )


class EventPage(BaseModel):
    page: Page
    items: list[EventOut]


class RecoverRequest(RequestModel):
    model_config = examples({"since": 1795000000000})

    since: Millis


class ResendRequest(RequestModel):
    model_config = examples({"endpointId": None})

    endpointId: uuid.UUID | None = Field(default=None, strict=False)  # noqa: N815


class Queued(BaseModel):
    model_config = examples({"queued": 1})

    queued: int


class TestEventOut(BaseModel):
    eventId: uuid.UUID  # noqa: N815


def endpoint_out(endpoint: WebhookEndpoint) -> dict[str, Any]:
    return {
        "id": endpoint.id,
        "url": endpoint.url,
        "events": endpoint.event_kinds,
        "description": endpoint.description,
        "enabled": endpoint.enabled,
        "disabledReason": endpoint.disabled_reason,
        "failingSince": endpoint.failing_since,
        "createdAt": endpoint.created_at,
        "updatedAt": endpoint.updated_at,
    }


def attempt_out(attempt: DeliveryAttempt) -> dict[str, Any]:
    return {
        "id": attempt.id,
        "deliveryId": attempt.delivery_id,
        "eventId": attempt.event_id,
        "attemptedAt": attempt.attempted_at,
        "success": attempt.success,
        "statusCode": attempt.status_code,
        "latencyMs": attempt.latency_ms,
        "error": attempt.error,
        "responseExcerpt": attempt.response_excerpt,
    }


# --- the events as delivered (the OpenAPI document's ``webhooks``) -----------------------------

EXAMPLE_DEAL = "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"
EXAMPLE_TIME = 1795000000000


class DealStatusData(BaseModel):
    dealId: uuid.UUID  # noqa: N815
    status: DealStatus
    statusDate: int = Field(description="Milliseconds since the epoch.")  # noqa: N815


class SignatureStatusData(BaseModel):
    dealId: uuid.UUID  # noqa: N815
    userId: uuid.UUID | None = Field(description="The signing party's user id.")  # noqa: N815
    status: Literal["Initiated", "Failed", "Completed"]
    signatureType: Literal["Seller", "Buyer"]  # noqa: N815
    signatureDate: int = Field(description="Milliseconds since the epoch.")  # noqa: N815


class DealOfferData(BaseModel):
    id: uuid.UUID = Field(description="The offer's id.")
    dealId: uuid.UUID  # noqa: N815
    shippingType: Literal["Carrier", "Pickup"]  # noqa: N815
    packageType: Literal["Small", "Medium", "Large", "XL"] | None  # noqa: N815
    buyerName: str | None  # noqa: N815
    buyerEmail: str  # noqa: N815
    price: float
    buyerRedirectUrl: str | None  # noqa: N815
    sellerRedirectUrl: str | None  # noqa: N815
    date: int = Field(description="Milliseconds since the epoch.")
    offerLinkId: uuid.UUID | None = Field(  # noqa: N815
        description="The `offer` reference of the link the offer came through (null for one "
        "made without a link, the sandbox's)."
    )


class OfferDecisionData(BaseModel):
    id: uuid.UUID = Field(description="The offer's id (the `id` of its `deal.offer`).")
    dealId: uuid.UUID  # noqa: N815
    date: int = Field(description="Milliseconds since the epoch.")


class PaymentStatusData(BaseModel):
    dealId: uuid.UUID  # noqa: N815
    sellerUserId: uuid.UUID | None  # noqa: N815
    buyerUserId: uuid.UUID | None  # noqa: N815
    status: PaymentStatus
    amount: str = Field(description="What the buyer pays, two decimals.", examples=["4500.00"])
    fee: str = Field(description="The service's fee, subtracted from the amount.")
    currency: str = Field(examples=["NOK"])


class _Envelope(BaseModel):
    id: uuid.UUID = Field(description="The event's id; the same as the `webhook-id` header.")
    api_version: Literal["v1"]
    created: int = Field(description="Milliseconds since the epoch.")
    deal_sequence: int | None = Field(
        default=None, ge=1, description="The event's place among its deal's events (1, 2, ...)."
    )


def _example(kind: str, data: dict[str, Any], about_a_deal: bool = True) -> ConfigDict:
    example: dict[str, Any] = {
        "id": "9b2f6c1e-3d4a-4f5b-8c6d-7e8f9a0b1c2d",
        "event": kind,
        "api_version": "v1",
        "created": EXAMPLE_TIME,
        "data": data,
    }
    if about_a_deal:
        example["deal_sequence"] = 2
    return examples(example)


class DealStatusEvent(_Envelope):
    model_config = _example(
        "deal.status", {"dealId": EXAMPLE_DEAL, "status": "Ad", "statusDate": EXAMPLE_TIME}
    )
    event: Literal["deal.status"]
    data: DealStatusData


class SignatureStatusEvent(_Envelope):
    model_config = _example(
        "signature.status",
        {
            "dealId": EXAMPLE_DEAL,
            "userId": "1c9d7e2a-4b3f-4a6e-9d8c-2b1a0f9e8d7c",
            "status": "Completed",
            "signatureType": "Seller",
            "signatureDate": EXAMPLE_TIME,
        },
    )
    event: Literal["signature.status"]
    data: SignatureStatusData


class DealOfferEvent(_Envelope):
    model_config = _example(
        "deal.offer",
        {
            "id": "5a7e3c1d-2b4f-4e6a-9c8d-1f2e3d4c5b6a",
            "dealId": EXAMPLE_DEAL,
            "shippingType": "Carrier",
            "packageType": "Large",
            "buyerName": "Ola Nordmann",
            "buyerEmail": "ola@example.com",
            "price": 4200,
            "buyerRedirectUrl": "https://marketplace.example.com/offer-sent",
            "sellerRedirectUrl": None,
            "date": EXAMPLE_TIME,
            "offerLinkId": "7d1c2b9a-5f7e-4d8c-8a51-0e2f4b6c9d13",
        },
    )
    event: Literal["deal.offer"]
    data: DealOfferData


_DECISION = {"id": "5a7e3c1d-2b4f-4e6a-9c8d-1f2e3d4c5b6a", "dealId": EXAMPLE_DEAL, "date": 0}


class DealOfferApprovedEvent(_Envelope):
    model_config = _example("deal.offerApproved", {**_DECISION, "date": EXAMPLE_TIME})
    event: Literal["deal.offerApproved"]
    data: OfferDecisionData


class DealOfferDeniedEvent(_Envelope):
    model_config = _example("deal.offerDenied", {**_DECISION, "date": EXAMPLE_TIME})
    event: Literal["deal.offerDenied"]
    data: OfferDecisionData


class PaymentStatusEvent(_Envelope):
    model_config = _example(
        "payment.status",
        {
            "dealId": EXAMPLE_DEAL,
            "sellerUserId": "1c9d7e2a-4b3f-4a6e-9d8c-2b1a0f9e8d7c",
            "buyerUserId": "2d8e6f3b-5c4a-4b7f-8e9d-3c2b1a0f9e8d",
            "status": "Paid",
            "amount": "4200.00",
            "fee": "210.00",
            "currency": "NOK",
        },
    )
    event: Literal["payment.status"]
    data: PaymentStatusData


# --- what the carrier said about a deal's parcel (not in the interface) ---


# What a carrier may tell about a parcel (``deals.shipments.ShipmentEventType``); the deal
# resource's ``shipment.lastEvent`` is one of these too.
ShipmentNews = Literal[
    "booked",
    "picked_up",
    "in_transit",
    "ready_for_pickup",
    "delivered",
    "returned",
    "lost",
    "damaged",
]


class DealShipmentData(BaseModel):
    dealId: uuid.UUID  # noqa: N815
    type: ShipmentNews = Field(
        description="What happened to the parcel. `delivered` (in the mailbox, or collected), "
        "`returned` and `lost` are followed by the `deal.status` they cause "
        "(`Shipping_Arrived`, `Shipping_Returned`, `Shipping_Review_Denied`); so is a "
        "`picked_up` that is the hand-over (`Shipping_In_Progress`); `ready_for_pickup` (waiting "
        "at a pickup point or locker) is not the arrival yet. `booked`, "
        "`ready_for_pickup`, `lost` and `damaged` come only from a carrier dealbroker booked "
        "the parcel at (docs/shipping.md)."
    )
    carrier: str
    trackingNumber: str  # noqa: N815
    occurredAt: int = Field(  # noqa: N815
        description="When the carrier says it happened, milliseconds since the epoch."
    )
    description: str | None = Field(
        default=None, description="The carrier's own words about it, when it gave some."
    )
    location: str | None = Field(default=None, description="Where it happened, if known.")
    pickupPoint: str | None = Field(  # noqa: N815
        default=None, description="`ready_for_pickup`: where the buyer collects the parcel."
    )


class DealShipmentEvent(_Envelope):
    model_config = _example(
        "deal.shipment",
        {
            "dealId": EXAMPLE_DEAL,
            "type": "delivered",
            "carrier": "Posten",
            "trackingNumber": "370712345678",
            "occurredAt": EXAMPLE_TIME,
        },
    )
    event: Literal["deal.shipment"]
    data: DealShipmentData


# --- a message arrived in a deal's conversation (not in the interface, opt-in) ---


class DealMessageData(BaseModel):
    """Who wrote, where, and what the reader is warned about: never the text, which the
    integration reads through the API (``GET /deals/v1/deals/{dealId}/conversations``)."""

    dealId: uuid.UUID  # noqa: N815
    conversationId: uuid.UUID = Field(  # noqa: N815
        description="The conversation's `id` in the deal's conversations."
    )
    offerLinkId: uuid.UUID = Field(  # noqa: N815
        description="The `offer` reference of the buyer's offer link: one conversation per link."
    )
    messageId: uuid.UUID = Field(description="The message's `id` in its conversation.")  # noqa: N815
    from_: Literal["seller", "buyer"] = Field(alias="from", description="Who wrote it.")
    warnings: list[Literal["phone", "email", "link", "payment"]] = Field(
        description="What the reader is warned about (a phone number, an e-mail address, a "
        "link, payment words), found in a message written before the deal was paid; empty after."
    )
    sentAt: int = Field(description="When it was written, milliseconds since the epoch.")  # noqa: N815


class DealMessageEvent(_Envelope):
    model_config = _example(
        "deal.message",
        {
            "dealId": EXAMPLE_DEAL,
            "conversationId": "4c3b2a19-8f7e-4d6c-b5a4-93827160f5e4",
            "offerLinkId": "7d1c2b9a-5f7e-4d8c-8a51-0e2f4b6c9d13",
            "messageId": "0e1d2c3b-4a59-4687-9a6b-5c4d3e2f1a0b",
            "from": "buyer",
            "warnings": ["phone"],
            "sentAt": EXAMPLE_TIME,
        },
    )
    event: Literal["deal.message"]
    data: DealMessageData


# --- the test event "send a test event" queues for one endpoint (not in the interface) ---


class WebhookTestData(BaseModel):
    endpointId: uuid.UUID = Field(  # noqa: N815
        description="The endpoint the test was sent to (only that one receives it)."
    )
    message: str = Field(examples=[TEST_MESSAGE])


class WebhookTestEvent(_Envelope):
    model_config = _example(
        "webhook.test",
        webhook_test(uuid.UUID("6e4d2c1b-9a8f-4e7d-b6c5-a4b3c2d1e0f9")),
        about_a_deal=False,
    )
    event: Literal["webhook.test"]
    data: WebhookTestData
