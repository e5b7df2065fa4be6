"""The webhooks the service sends, declared for the OpenAPI document's ``webhooks`` section
(OpenAPI 3.1): one POST per event kind of the interface, with its typed envelope and the
Standard Webhooks signature headers, so generated code gets a type per event. Nothing here is
served; the worker's delivery (``events.tasks``) is what sends them.

``CATALOG`` is the same list for people: the developer portal's event catalog shows each kind
with its summary and the example payload of its model, so the two cannot drift apart."""

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header
from pydantic import BaseModel

from dealbroker.core.i18n import N_
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


@dataclass(frozen=True)
class EventKind:
    kind: str
    # English, as the OpenAPI document says it; marked for translation for the portal's page.
    summary: str
    model: type[BaseModel]

    @property
    def example(self) -> dict[str, Any]:
        """The payload the OpenAPI document shows as this kind's example."""
        extra = self.model.model_config.get("json_schema_extra")
        assert isinstance(extra, dict)
        example = extra["examples"][0]  # type: ignore[index]
        assert isinstance(example, dict)
        return example


# Every event kind, in the order the OpenAPI document lists them.
CATALOG: list[EventKind] = []


def _register(
    kind: str, summary: str, model: type[BaseModel], description: str = DESCRIPTION
) -> None:
    CATALOG.append(EventKind(kind, summary, model))

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
        description=summary + "." + description,
        responses=RESPONSES,
        status_code=200,
    )


_register("deal.status", N_("Deal status updated"), schemas.DealStatusEvent)
_register("signature.status", N_("Signature status updated"), schemas.SignatureStatusEvent)
_register(
    "deal.offer",
    N_("Buyer sent an offer with preferred price and shipping method"),
    schemas.DealOfferEvent,
)
_register(
    "deal.offerApproved", N_("Seller approved the buyer's offer"), schemas.DealOfferApprovedEvent
)
_register("deal.offerDenied", N_("Seller denied the buyer's offer"), schemas.DealOfferDeniedEvent)
_register("payment.status", N_("Payment status updated"), schemas.PaymentStatusEvent)
_register(
    "deal.shipment",
    N_("The carrier booked, picked up, moved, delivered, returned or lost the deal's parcel"),
    schemas.DealShipmentEvent,
)
_register(
    "deal.message",
    N_("A party wrote a message in one of the deal's conversations (opt-in)"),
    schemas.DealMessageEvent,
    " Opt-in, not one of the interface's kinds: sent only to an enabled endpoint whose "
    "`events` name `deal.message` (an endpoint with no list does not receive it), signed and "
    "retried as every event. It carries no text: read the conversation with `GET "
    "/deals/v1/deals/{dealId}/conversations`. The events API lists it only when asked with "
    "`event=deal.message`.",
)
_register(
    "webhook.test",
    N_("A test event, sent only to the endpoint you asked it for"),
    schemas.WebhookTestEvent,
    " Sent as a POST to the one endpoint it was asked for (the portal's Send a test event, "
    "`POST /integrations/v1/webhook-endpoints/{endpointId}/test`, or `dealbroker webhooks "
    "test`), whatever kinds it subscribes to, signed and retried as every event; it is about "
    "no deal, so it has no `deal_sequence`. Not a kind one subscribes to.",
)
