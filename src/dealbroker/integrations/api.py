"""Routes of the integration's own credentials (``/integrations/v1``): rotating the webhook
secret, which signs every delivery and authenticates the sandbox triggers."""

from datetime import timedelta
from enum import Enum

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from dealbroker.auth.dependencies import Writer
from dealbroker.core.db import Session
from dealbroker.core.errors import problem
from dealbroker.core.idempotency import idempotent
from dealbroker.core.responses import (
    FORBIDDEN,
    IDEMPOTENCY,
    TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED,
    dump,
    require_json_if_body,
)
from dealbroker.integrations import schemas, service

router = APIRouter()
TAGS: list[str | Enum] = ["Webhook secret"]


@router.post(
    "/integrations/v1/webhook-secret/rotate",
    operation_id="rotate_webhook_secret",
    tags=TAGS,
    summary="Rotate your webhook secret, keeping the old one valid for an overlap window",
    description="Issues a new webhook secret and answers it, this once. For `overlapSeconds` "
    "(default 86400, a day; at most 604800; `0` ends the old secret at once) the replaced secret "
    "stays valid too: every delivery's `webhook-signature` carries a `v1,` signature under each "
    "(space-separated, as Standard Webhooks allows), so receivers verify with either while you "
    "deploy the new one, and the sandbox triggers accept either in `webhook-secret`. After the "
    "window only the new secret signs and authenticates. Rotating again within the window ends "
    "the older secret's at once: at most two secrets are valid together. The body is optional; "
    "send an `Idempotency-Key` so that a retry after a lost answer gets the same secret back "
    "instead of rotating twice.",
    response_model=schemas.WebhookSecretRotated,
    dependencies=[Depends(require_json_if_body)],
    responses={
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: overlapSeconds: Input should be less than "
            "or equal to 604800",
        ),
        401: UNAUTHORIZED,
        403: FORBIDDEN,
        413: TOO_LARGE,
        415: UNSUPPORTED,
        422: IDEMPOTENCY,
    },
)
async def rotate_webhook_secret(
    request: Request,
    principal: Writer,
    session: Session,
    body: schemas.WebhookSecretRotate | None = None,
) -> Response:
    overlap = timedelta(seconds=(body or schemas.WebhookSecretRotate()).overlapSeconds)

    async def produce() -> tuple[int, bytes]:
        rotated = await service.rotate_webhook_secret(session, principal.integration_id, overlap)
        return 200, dump(schemas.rotated_out(rotated.webhook_secret, rotated.previous_expires_at))

    return await idempotent(session, request, principal.integration_id, produce)
