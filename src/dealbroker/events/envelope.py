"""Event kinds, the envelope, and the ``data`` of each kind exactly as the interface lists it."""

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from dealbroker.core import money
from dealbroker.core.clock import to_millis

API_VERSION = "v1"


class EventKind(StrEnum):
    DEAL_STATUS = "deal.status"
    SIGNATURE_STATUS = "signature.status"
    DEAL_OFFER = "deal.offer"
    DEAL_OFFER_APPROVED = "deal.offerApproved"
    DEAL_OFFER_DENIED = "deal.offerDenied"
    PAYMENT_STATUS = "payment.status"
    # Not in the interface: what the carrier said about a deal's parcel (deals.shipments).
    DEAL_SHIPMENT = "deal.shipment"
    # Not in the interface, and opt-in: a message arrived in a deal's conversation
    # (``conversations``). Only endpoints that list it receive it.
    DEAL_MESSAGE = "deal.message"
    # Not in the interface: sent only by "send a test event" to one endpoint.
    WEBHOOK_TEST = "webhook.test"


# Kinds an endpoint receives only when its ``events`` name them: never by subscribing to all.
OPT_IN_KINDS = frozenset({EventKind.DEAL_MESSAGE})
# Every kind an endpoint that names none receives.
INTERFACE_KINDS = tuple(
    k for k in EventKind if k is not EventKind.WEBHOOK_TEST and k not in OPT_IN_KINDS
)


def envelope(
    event_id: uuid.UUID,
    kind: EventKind,
    created: datetime,
    data: dict[str, Any],
    deal_sequence: int | None = None,
) -> dict[str, Any]:
    """The interface's envelope; an event about a deal adds ``deal_sequence``, its place among
    the deal's events (1, 2, ...), for a receiver to order what at-least-once delivery mixes."""
    body: dict[str, Any] = {
        "id": str(event_id),
        "event": kind.value,
        "api_version": API_VERSION,
        "created": to_millis(created),
        "data": data,
    }
    if deal_sequence is not None:
        body["deal_sequence"] = deal_sequence
    return body


TEST_MESSAGE = "A test event from dealbroker."


def webhook_test(endpoint_id: uuid.UUID) -> dict[str, Any]:
    """The ``data`` of the test event "send a test event" queues for one endpoint."""
    return {"endpointId": str(endpoint_id), "message": TEST_MESSAGE}


def _id(value: uuid.UUID | None) -> str | None:
    return None if value is None else str(value)


def deal_status(deal_id: uuid.UUID, status: str, at: datetime) -> dict[str, Any]:
    return {"dealId": str(deal_id), "status": status, "statusDate": to_millis(at)}


def signature_status(
    deal_id: uuid.UUID, user_id: uuid.UUID | None, status: str, signature_type: str, at: datetime
) -> dict[str, Any]:
    return {
        "dealId": str(deal_id),
        "userId": _id(user_id),
        "status": status,
        "signatureType": signature_type,
        "signatureDate": to_millis(at),
    }


def deal_offer(
    *,
    offer_id: uuid.UUID,
    deal_id: uuid.UUID,
    shipping_type: str,
    package_type: str | None,
    buyer_name: str | None,
    buyer_email: str,
    price_minor: int,
    buyer_redirect_url: str | None,
    seller_redirect_url: str | None,
    at: datetime,
    offer_link_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """The interface's fields, then ``offerLinkId``: the ``offer`` reference of the link the
    offer came through (``None`` for an offer made without one, the sandbox's)."""
    return {
        "id": str(offer_id),
        "dealId": str(deal_id),
        "shippingType": shipping_type,
        "packageType": package_type,
        "buyerName": buyer_name,
        "buyerEmail": buyer_email,
        "price": money.to_number(price_minor),
        "buyerRedirectUrl": buyer_redirect_url,
        "sellerRedirectUrl": seller_redirect_url,
        "date": to_millis(at),
        "offerLinkId": _id(offer_link_id),
    }


def offer_decision(offer_id: uuid.UUID, deal_id: uuid.UUID, at: datetime) -> dict[str, Any]:
    return {"id": str(offer_id), "dealId": str(deal_id), "date": to_millis(at)}


def payment_status(
    *,
    deal_id: uuid.UUID,
    seller_user_id: uuid.UUID | None,
    buyer_user_id: uuid.UUID | None,
    status: str,
    amount_minor: int,
    fee_minor: int,
    currency: str,
) -> dict[str, Any]:
    return {
        "dealId": str(deal_id),
        "sellerUserId": _id(seller_user_id),
        "buyerUserId": _id(buyer_user_id),
        "status": status,
        "amount": money.to_string(amount_minor),
        "fee": money.to_string(fee_minor),
        "currency": currency,
    }


def deal_shipment(deal_id: uuid.UUID, record: dict[str, Any]) -> dict[str, Any]:
    """A carrier event as ``deals.shipments`` records it: type, carrier, tracking number and
    ``occurredAt`` (milliseconds)."""
    return {"dealId": str(deal_id), **record}


def deal_message(
    *,
    deal_id: uuid.UUID,
    conversation_id: uuid.UUID,
    offer_link_id: uuid.UUID,
    message_id: uuid.UUID,
    author: str,
    warnings: list[str],
    at: datetime,
) -> dict[str, Any]:
    """A message arrived: who wrote it, where, and what its reader is warned about. Not its
    text: the integration reads the conversation through the API, so the words stay in one
    place (and go with it when the retention time ends)."""
    return {
        "dealId": str(deal_id),
        "conversationId": str(conversation_id),
        "offerLinkId": str(offer_link_id),
        "messageId": str(message_id),
        "from": author,
        "warnings": warnings,
        "sentAt": to_millis(at),
    }
