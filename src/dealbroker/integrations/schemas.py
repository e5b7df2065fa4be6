"""Bodies of the integration's own credential endpoints."""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from dealbroker.core.validation import RequestModel, WholeInt
from dealbroker.integrations.service import DEFAULT_WEBHOOK_OVERLAP, MAX_WEBHOOK_OVERLAP


class WebhookSecretRotate(RequestModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"overlapSeconds": 86400}]})

    overlapSeconds: WholeInt = Field(  # noqa: N815
        default=int(DEFAULT_WEBHOOK_OVERLAP.total_seconds()),
        ge=0,
        le=int(MAX_WEBHOOK_OVERLAP.total_seconds()),
        description="How long the replaced secret stays valid beside the new one (default a "
        "day, at most a week; 0 ends it at once).",
    )


class WebhookSecretRotated(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "webhookSecret": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD7xF6vQoJt4s=",
                    "previousSecretExpiresAt": "2026-11-23T12:00:00Z",
                }
            ]
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
