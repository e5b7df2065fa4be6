"""Bodies of the webhook-endpoint and events APIs."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dealbroker.core.validation import HttpUrl, Millis, RequestModel
from dealbroker.events.envelope import INTERFACE_KINDS
from dealbroker.events.models import DeliveryAttempt, WebhookEndpoint

Kind = Literal[
    "deal.status",
    "signature.status",
    "deal.offer",
    "deal.offerApproved",
    "deal.offerDenied",
    "payment.status",
]
assert set(Kind.__args__) == {k.value for k in INTERFACE_KINDS}  # type: ignore[attr-defined]
ENDPOINT_EXAMPLE: dict[str, Any] = {
    "url": "https://market.example.com/webhooks/dealbroker",
    "events": ["deal.status", "payment.status"],
    "description": "Production receiver",
}


class EndpointCreate(RequestModel):
    model_config = ConfigDict(json_schema_extra={"examples": [ENDPOINT_EXAMPLE]})

    url: HttpUrl
    events: list[Kind] | None = Field(
        default=None, min_length=1, max_length=6, description="Kinds to receive; omit for all."
    )
    description: str | None = Field(default=None, max_length=500)
    enabled: bool = True


class EndpointUpdate(RequestModel):
    """Fields to change; ``events: null`` subscribes to every kind again."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"events": None, "enabled": True}]})

    url: HttpUrl | None = None
    events: list[Kind] | None = Field(default=None, min_length=1, max_length=6)
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


class PageInfo(BaseModel):
    pageSize: int  # noqa: N815
    pageNumber: int  # noqa: N815
    totalPages: int  # noqa: N815
    totalCount: int  # noqa: N815


class AttemptPage(BaseModel):
    page: PageInfo
    items: list[AttemptOut]


class EventOut(BaseModel):
    """The envelope exactly as delivered to webhook endpoints. ``deal_sequence``, on an event
    about a deal, is its place among that deal's events (1, 2, ...): order a deal's events by
    it, since deliveries may come out of order or twice."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
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
            ]
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
    page: PageInfo
    items: list[EventOut]


class RecoverRequest(RequestModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"since": 1795000000000}]})

    since: Millis


class ResendRequest(RequestModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"endpointId": None}]})

    endpointId: uuid.UUID | None = Field(default=None, strict=False)  # noqa: N815


class Queued(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"queued": 1}]})

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
