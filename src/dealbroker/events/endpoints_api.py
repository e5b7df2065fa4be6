"""Routes of the webhook-endpoint API (``/integrations/v1``): where events are delivered, and
how that went."""

import uuid
from datetime import UTC, datetime
from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from dealbroker.auth.dependencies import Reader, Writer
from dealbroker.auth.service import Principal
from dealbroker.core.db import Session
from dealbroker.core.errors import problem
from dealbroker.core.idempotency import idempotent
from dealbroker.core.pagination import Paging, page_body
from dealbroker.core.responses import (
    FORBIDDEN,
    IDEMPOTENCY,
    MALFORMED,
    TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED,
    dump,
    require_json,
)
from dealbroker.events import schemas, service
from dealbroker.events.api import READ_ERRORS, EventId
from dealbroker.events.service import EndpointChange

router = APIRouter()
ENDPOINTS = "/integrations/v1/webhook-endpoints"
EndpointId = Annotated[uuid.UUID, Path(alias="endpointId", description="The endpoint's id.")]
TAGS: list[str | Enum] = ["Webhook endpoints"]
NO_ENDPOINT = problem(404, "Not Found", "No webhook endpoint 0b7e…")
INVALID = problem(
    400,
    "Invalid input",
    "The request does not match the schema: url: Value error, must be an absolute http(s) URL",
)
BAD_ID = problem(
    400,
    "Invalid input",
    "The request does not match the schema: endpointId: Input should be a valid UUID",
)
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    422: IDEMPOTENCY,
    400: INVALID,
    401: UNAUTHORIZED,
    403: FORBIDDEN,
    413: TOO_LARGE,
    415: UNSUPPORTED,
}
JSON = [Depends(require_json)]


def _json(payload: Any, status: int = 200) -> Response:
    return Response(dump(payload), status_code=status, media_type="application/json")


@router.post(
    ENDPOINTS,
    operation_id="create_webhook_endpoint",
    tags=TAGS,
    status_code=201,
    summary="Register a webhook endpoint",
    response_model=schemas.EndpointOut,
    dependencies=JSON,
    description="Events of the chosen kinds (all when `events` is omitted) are POSTed to `url`, "
    "signed per Standard Webhooks with your webhook secret. In production, URLs that resolve "
    "to private, loopback, link-local or other non-public addresses are refused, and so are "
    "hosts that do not resolve; the sandbox accepts a host that does not resolve yet. Either "
    "way the address is checked again each time a webhook is sent.",
    responses={
        **WRITE_ERRORS,
        409: problem(409, "Conflict", "An integration may have at most 20 webhook endpoints."),
    },
)
async def create_endpoint(
    body: schemas.EndpointCreate, request: Request, principal: Writer, session: Session
) -> Response:
    async def produce() -> tuple[int, bytes]:
        endpoint = await service.create_endpoint(
            session,
            principal.integration_id,
            request.app.state.settings,
            url=body.url,
            event_kinds=body.events,
            description=body.description,
            enabled=body.enabled,
        )
        return 201, dump(schemas.endpoint_out(endpoint))

    return await idempotent(session, request, principal.integration_id, produce)


@router.get(
    ENDPOINTS,
    operation_id="list_webhook_endpoints",
    tags=TAGS,
    summary="List webhook endpoints",
    description=("Every webhook endpoint of this integration, enabled or not."),
    response_model=schemas.EndpointList,
    responses=READ_ERRORS,
)
async def list_endpoints(principal: Reader, session: Session) -> Response:
    endpoints = await service.list_endpoints(session, principal.integration_id)
    return _json({"items": [schemas.endpoint_out(e) for e in endpoints]})


@router.get(
    ENDPOINTS + "/{endpointId}",
    operation_id="get_webhook_endpoint",
    tags=TAGS,
    summary="Get a webhook endpoint",
    description=("The endpoint's URL, the event kinds it receives, and whether it is enabled."),
    response_model=schemas.EndpointOut,
    responses={
        **READ_ERRORS,
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: endpointId: Input should be a valid UUID",
        ),
        404: NO_ENDPOINT,
    },
)
async def get_endpoint(endpoint_id: EndpointId, principal: Reader, session: Session) -> Response:
    return _json(
        schemas.endpoint_out(
            await service.get_endpoint(session, principal.integration_id, endpoint_id)
        )
    )


@router.patch(
    ENDPOINTS + "/{endpointId}",
    operation_id="update_webhook_endpoint",
    tags=TAGS,
    summary="Change a webhook endpoint",
    description=(
        "Changes only the fields sent; `events: null` subscribes the endpoint to every kind again."
    ),
    response_model=schemas.EndpointOut,
    dependencies=JSON,
    responses={**WRITE_ERRORS, 404: NO_ENDPOINT},
)
async def update_endpoint(
    endpoint_id: EndpointId,
    body: schemas.EndpointUpdate,
    request: Request,
    principal: Writer,
    session: Session,
) -> Response:
    change = EndpointChange(
        url=body.url,
        event_kinds=body.events,
        clear_event_kinds="events" in body.model_fields_set and body.events is None,
        description=body.description,
        enabled=body.enabled,
    )
    endpoint = await service.update_endpoint(
        session, principal.integration_id, endpoint_id, request.app.state.settings, change
    )
    return _json(schemas.endpoint_out(endpoint))


@router.delete(
    ENDPOINTS + "/{endpointId}",
    operation_id="delete_webhook_endpoint",
    tags=TAGS,
    status_code=204,
    summary="Delete a webhook endpoint (its pending deliveries are dropped)",
    description=(
        "The endpoint receives nothing more; deliveries still waiting for it are dropped."
    ),
    responses={400: BAD_ID, 401: UNAUTHORIZED, 403: FORBIDDEN, 404: NO_ENDPOINT},
)
async def delete_endpoint(endpoint_id: EndpointId, principal: Writer, session: Session) -> Response:
    await service.delete_endpoint(session, principal.integration_id, endpoint_id)
    return Response(status_code=204)


@router.post(
    ENDPOINTS + "/{endpointId}/enable",
    operation_id="enable_webhook_endpoint",
    tags=TAGS,
    summary="Enable a webhook endpoint; its waiting deliveries resume",
    description=("Deliveries that waited while it was disabled are sent, oldest first."),
    response_model=schemas.EndpointOut,
    responses={400: BAD_ID, 401: UNAUTHORIZED, 403: FORBIDDEN, 404: NO_ENDPOINT, 422: IDEMPOTENCY},
)
async def enable_endpoint(
    endpoint_id: EndpointId, request: Request, principal: Writer, session: Session
) -> Response:
    return await _set_enabled(endpoint_id, True, request, principal, session)


@router.post(
    ENDPOINTS + "/{endpointId}/disable",
    operation_id="disable_webhook_endpoint",
    tags=TAGS,
    summary="Disable a webhook endpoint; deliveries wait until it is enabled",
    description=("New events for it are kept, not sent, until it is enabled again."),
    response_model=schemas.EndpointOut,
    responses={400: BAD_ID, 401: UNAUTHORIZED, 403: FORBIDDEN, 404: NO_ENDPOINT, 422: IDEMPOTENCY},
)
async def disable_endpoint(
    endpoint_id: EndpointId, request: Request, principal: Writer, session: Session
) -> Response:
    return await _set_enabled(endpoint_id, False, request, principal, session)


async def _set_enabled(
    endpoint_id: uuid.UUID,
    enabled: bool,
    request: Request,
    principal: Principal,
    session: AsyncSession,
) -> Response:
    async def produce() -> tuple[int, bytes]:
        endpoint = await service.change_enabled(
            session, principal.integration_id, endpoint_id, enabled
        )
        return 200, dump(schemas.endpoint_out(endpoint))

    return await idempotent(session, request, principal.integration_id, produce)


@router.post(
    ENDPOINTS + "/{endpointId}/test",
    operation_id="test_webhook_endpoint",
    tags=TAGS,
    status_code=202,
    summary="Send a test event (kind `webhook.test`) to this endpoint",
    description=(
        "Queues a signed `webhook.test` delivery to this endpoint, to check its URL and "
        "signature verification; 409 while it is disabled."
    ),
    response_model=schemas.TestEventOut,
    responses={
        400: BAD_ID,
        401: UNAUTHORIZED,
        403: FORBIDDEN,
        404: NO_ENDPOINT,
        422: IDEMPOTENCY,
        409: problem(
            409, "Conflict", "This endpoint is disabled; enable it before sending a test event."
        ),
    },
)
async def test_endpoint(
    endpoint_id: EndpointId, request: Request, principal: Writer, session: Session
) -> Response:
    async def produce() -> tuple[int, bytes]:
        event = await service.send_test_event(session, principal.integration_id, endpoint_id)
        return 202, dump({"eventId": event.id})

    return await idempotent(session, request, principal.integration_id, produce)


@router.get(
    ENDPOINTS + "/{endpointId}/attempts",
    operation_id="list_delivery_attempts",
    tags=TAGS,
    summary="Delivery attempts to this endpoint, newest first",
    description=(
        "Each attempt's event, time, answer status (or the connection error) and whether "
        "it was the last, a page at a time."
    ),
    response_model=schemas.AttemptPage,
    responses={
        **READ_ERRORS,
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: page: Input should be greater than or equal to 1",
        ),
        404: NO_ENDPOINT,
    },
)
async def list_attempts(
    endpoint_id: EndpointId, principal: Reader, session: Session, paging: Paging
) -> Response:
    result = await service.attempts(
        session, principal.integration_id, endpoint_id, paging.number, paging.size
    )
    return _json(page_body(paging, result.total, [schemas.attempt_out(a) for a in result.attempts]))


@router.post(
    ENDPOINTS + "/{endpointId}/recover",
    operation_id="recover_webhook_endpoint",
    tags=TAGS,
    status_code=202,
    summary="Queue everything since a time that did not reach this endpoint",
    description="Deliveries that failed for good are retried, and events emitted while the "
    "endpoint was disabled are queued for it; each keeps its original webhook-id.",
    response_model=schemas.Queued,
    dependencies=JSON,
    responses={**WRITE_ERRORS, 404: NO_ENDPOINT},
)
async def recover(
    endpoint_id: EndpointId,
    body: schemas.RecoverRequest,
    request: Request,
    principal: Writer,
    session: Session,
) -> Response:
    since = datetime.fromtimestamp(body.since / 1000, UTC)

    async def produce() -> tuple[int, bytes]:
        queued = await service.recover(session, principal.integration_id, endpoint_id, since)
        return 202, dump({"queued": queued})

    return await idempotent(session, request, principal.integration_id, produce)


@router.post(
    "/integrations/v1/events/{eventId}/resend",
    operation_id="resend_event",
    tags=TAGS,
    status_code=202,
    summary="Send an event again, with its original webhook-id",
    description="To `endpointId` if given, else to every enabled endpoint subscribed to its kind. "
    "The body is optional.",
    response_model=schemas.Queued,
    responses={**WRITE_ERRORS, 400: MALFORMED, 404: problem(404, "Not Found", "No event 9b2f…")},
)
async def resend(
    event_id: EventId,
    request: Request,
    principal: Writer,
    session: Session,
    body: schemas.ResendRequest | None = None,
) -> Response:
    target = body.endpointId if body else None

    async def produce() -> tuple[int, bytes]:
        queued = await service.resend(session, principal.integration_id, event_id, target)
        return 202, dump({"queued": queued})

    return await idempotent(session, request, principal.integration_id, produce)
