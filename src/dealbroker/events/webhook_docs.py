"""The webhooks the service sends, declared for the OpenAPI document's ``webhooks`` section
(OpenAPI 3.1): one POST per event kind of the interface, with its typed envelope and the
Standard Webhooks signature headers, so generated code gets a type per event. Nothing here is
served; the worker's delivery (``events.tasks``) is what sends them."""

from typing import Annotated

from fastapi import APIRouter, Header

from dealbroker.events import schemas

router = APIRouter(tags=["Events"])

WebhookId = Annotated[
    str,
    Header(
        alias="webhook-id",
        description="The event's id, the same on every attempt: deduplicate by it.",
        examples=["9b2f6c1e-3d4a-4f5b-8c6d-7e8f9a0b1c2d"],
    ),
]
WebhookTimestamp = Annotated[
    str,
    Header(
        alias="webhook-timestamp",
        description="When this attempt was signed, in seconds since the epoch; refuse one "
        "far from your clock (Standard Webhooks suggests 5 minutes).",
        pattern=r"^[0-9]+$",
        examples=["1795000000"],
    ),
]
WebhookSignature = Annotated[
    str,
    Header(
        alias="webhook-signature",
        description="`v1,<base64 HMAC-SHA256>` of `<webhook-id>.<webhook-timestamp>.<body>` "
        "under your webhook secret (Standard Webhooks); during a secret rotation's overlap, "
        "one signature per valid secret, separated by spaces.",
        examples=["v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="],
    ),
]
RESPONSES: dict[int | str, dict[str, str]] = {
    200: {"description": "Any 2xx within 15 seconds: delivered."},
    410: {"description": "Gone: the endpoint is disabled, no more deliveries are sent to it."},
}
DESCRIPTION = (
    " Sent as a POST to each enabled webhook endpoint subscribed to the kind, signed per "
    "Standard Webhooks; retried on failure (at least once, so deduplicate by `webhook-id`, "
    "and order a deal's events by `deal_sequence`)."
)


def _register(kind: str, summary: str, model: type) -> None:
    async def receive(
        body: model,  # type: ignore[valid-type]
        webhook_id: WebhookId,
        webhook_timestamp: WebhookTimestamp,
        webhook_signature: WebhookSignature,
    ) -> None:
        """Declaration only: the document's description of what your endpoint receives."""

    router.add_api_route(
        kind,
        receive,
        methods=["POST"],
        operation_id=kind.replace(".", "_") + "_webhook",
        summary=summary,
        description=summary + "." + DESCRIPTION,
        responses=RESPONSES,
        status_code=200,
    )


_register("deal.status", "Deal status updated", schemas.DealStatusEvent)
_register("signature.status", "Signature status updated", schemas.SignatureStatusEvent)
_register(
    "deal.offer",
    "Buyer sent an offer with preferred price and shipping method",
    schemas.DealOfferEvent,
)
_register("deal.offerApproved", "Seller approved the buyer's offer", schemas.DealOfferApprovedEvent)
_register("deal.offerDenied", "Seller denied the buyer's offer", schemas.DealOfferDeniedEvent)
_register("payment.status", "Payment status updated", schemas.PaymentStatusEvent)
_register(
    "deal.shipment",
    "The carrier picked up, moved, delivered or returned the deal's parcel",
    schemas.DealShipmentEvent,
)
