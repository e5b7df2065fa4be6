"""Bodies of the integration's own endpoints: its credentials and its request log."""

import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from dealbroker.core.pagination import Page
from dealbroker.core.validation import RequestModel, WholeInt, examples
from dealbroker.integrations.models import ApiRequest
from dealbroker.integrations.service import DEFAULT_WEBHOOK_OVERLAP, MAX_WEBHOOK_OVERLAP


class WebhookSecretRotate(RequestModel):
    model_config = examples({"overlapSeconds": 86400})

    overlapSeconds: WholeInt = Field(  # noqa: N815
        default=int(DEFAULT_WEBHOOK_OVERLAP.total_seconds()),
        ge=0,
        le=int(MAX_WEBHOOK_OVERLAP.total_seconds()),
        description="How long the replaced secret stays valid beside the new one (default a "
        "day, at most a week; 0 ends it at once).",
    )


class WebhookSecretRotated(BaseModel):
    model_config = examples(
        {
            "webhookSecret": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD7xF6vQoJt4s=",
            "previousSecretExpiresAt": "2026-11-23T12:00:00Z",
        }
    )

    webhookSecret: str = Field(  # noqa: N815
        description="The new secret. Shown only in this answer: store it now."
    )
    previousSecretExpiresAt: datetime | None = Field(  # noqa: N815
        description="Until when the replaced secret is still valid (null: it no longer is)."
    )


def rotated_out(webhook_secret: str, previous_expires_at: datetime | None) -> dict[str, object]:
    return {"webhookSecret": webhook_secret, "previousSecretExpiresAt": previous_expires_at}


class ApiRequestOut(BaseModel):
    """One request of the integration's, as its request log keeps it: never its body, query
    string, headers or token."""

    model_config = examples(
        {
            "method": "GET",
            "route": "/deals/v1/deals/{dealId}",
            "dealId": "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10",
            "status": 200,
            "requestId": "5b1e0c6a2f8d4e7b9c3a1d0e6f2b8c4a",
            "at": "2026-11-23T12:00:00.125000Z",
            "durationMs": 1.42,
        }
    )

    method: str
    route: str = Field(description="The route's template, as in this document's paths.")
    dealId: uuid.UUID | None = Field(  # noqa: N815
        default=None,
        description="The deal the path named; absent when the route names none, or named "
        "something that is not a deal id.",
    )
    status: int
    requestId: str = Field(  # noqa: N815
        description="The request's id, as its response's X-Request-Id header (and a problem's "
        "body) carried it."
    )
    at: datetime = Field(description="When the request came in.")
    durationMs: float = Field(  # noqa: N815
        description="How long the server took to answer it, in milliseconds."
    )


class ApiRequestPage(BaseModel):
    page: Page
    items: list[ApiRequestOut]


def api_request_out(request: ApiRequest) -> dict[str, object]:
    """The request as listed; ``dealId`` only when there is one (never null: a null would read
    as a deal id to a client that follows the list's ids)."""
    out: dict[str, object] = {
        "method": request.method,
        "route": request.route,
        "status": request.status,
        "requestId": request.request_id,
        "at": request.at,
        "durationMs": request.duration_us / 1000,
    }
    if request.deal_id is not None:
        out["dealId"] = request.deal_id
    return out
