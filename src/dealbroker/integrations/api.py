"""Routes of the integration's own (``/integrations/v1``): rotating the webhook secret, which
signs every delivery and authenticates the sandbox triggers, and reading its request log."""

from datetime import timedelta
from enum import Enum
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from dealbroker.auth.dependencies import Reader, Writer
from dealbroker.core.db import Session
from dealbroker.core.errors import problem
from dealbroker.core.idempotency import idempotent
from dealbroker.core.pagination import Paging, page_body
from dealbroker.core.responses import (
    FORBIDDEN,
    IDEMPOTENCY,
    TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED,
    dump,
    require_json_if_body,
)
from dealbroker.core.validation import NO_NUL_PATTERN, NoNulQuery
from dealbroker.integrations import request_log, schemas, service

router = APIRouter()
TAGS: list[str | Enum] = ["Webhook secret"]
LOG_TAGS: list[str | Enum] = ["Request log"]


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


@router.get(
    "/integrations/v1/requests",
    operation_id="list_requests",
    tags=LOG_TAGS,
    summary="Your API requests of the last days, newest first",
    description="Every request made with your tokens (and every token request naming your "
    "client id) over the last 7 days (the deployment's `DEALBROKER_API_REQUEST_LOG_DAYS`): "
    "method, route template, the deal its path named, status, request id (the `X-Request-Id` "
    "its response carried, and a problem's `requestId`), time and duration. Never a body, "
    "query string, header or token. Requests are written within seconds of their answer, so "
    "the newest may not be listed yet. A request whose token was not valid is no one's and is "
    "not listed.",
    response_model=schemas.ApiRequestPage,
    responses={
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: status: Input should be '2xx', '4xx' or '5xx'",
        ),
        401: UNAUTHORIZED,
        403: problem(403, "Not Allowed", "This token lacks the scope deals:read."),
    },
)
async def list_requests(
    request: Request,
    principal: Reader,
    session: Session,
    paging: Paging,
    status: Annotated[
        Literal["2xx", "4xx", "5xx"] | None, Query(description="Only answers of this class.")
    ] = None,
    route: Annotated[
        str | None,
        Query(
            max_length=200,
            description="Only this route template, e.g. `/deals/v1/deals/{dealId}`.",
            examples=["/deals/v1/deals/{dealId}"],
            json_schema_extra={"pattern": NO_NUL_PATTERN},
        ),
        NoNulQuery,
    ] = None,
) -> Response:
    found = await request_log.list_requests(
        session,
        principal.integration_id,
        keep_days=request.app.state.settings.api_request_log_days,
        status_class=status,
        route=route,
        page=paging.number,
        size=paging.size,
    )
    items = [schemas.api_request_out(r) for r in found.requests]
    return Response(dump(page_body(paging, found.total, items)), media_type="application/json")
