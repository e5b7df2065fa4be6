"""Routes of the events API (``/events/v1``): every event, to catch up after downtime."""

import uuid
from enum import Enum
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from dealbroker.auth.dependencies import Reader
from dealbroker.core.db import Session
from dealbroker.core.errors import problem
from dealbroker.core.pagination import Paging
from dealbroker.core.request_log import NOT_RECORDED
from dealbroker.core.responses import UNAUTHORIZED, dump
from dealbroker.events import schemas, service

router = APIRouter()
EventId = Annotated[uuid.UUID, Path(alias="eventId", description="The event's id.")]
READ_ERRORS: dict[int | str, dict[str, Any]] = {
    401: UNAUTHORIZED,
    403: problem(403, "Not Allowed", "This token lacks the scope deals:read."),
}
EVENT_TAGS: list[str | Enum] = ["Events"]


@router.get(
    "/events/v1/events",
    operation_id="list_events",
    tags=EVENT_TAGS,
    summary="List events",
    description="Newest first. With `after` (an event id), the events after that one, oldest "
    "first: walk forward with the last id you saw to catch up after downtime. A call answered "
    "with no event (an idle poll) is not listed in the integration's request log. Opt-in kinds "
    "(`deal.message`) are listed only when `event` names them.",
    response_model=schemas.EventPage,
    responses={
        **READ_ERRORS,
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: event: Input should be 'deal.status', …",
        ),
        404: problem(404, "Not Found", "No event 9b2f… (the after cursor)"),
    },
)
async def list_events(
    request: Request,
    principal: Reader,
    session: Session,
    paging: Paging,
    event: Annotated[schemas.Kind | None, Query(description="Only this kind.")] = None,
    dealId: Annotated[uuid.UUID | None, Query(description="Only this deal's events.")] = None,  # noqa: N803
    after: Annotated[uuid.UUID | None, Query(description="Event id to continue after.")] = None,
) -> Response:
    result = await service.list_events(
        session,
        principal.integration_id,
        kind=event,
        deal_id=dealId,
        after=after,
        page=paging.number,
        size=paging.size,
    )
    if not result.payloads:  # an idle poll: not worth a row of the request log
        request.scope["state"][NOT_RECORDED] = True
    # The stored envelopes are JSON already: splice them in rather than parse and re-encode.
    items = b",".join(p.encode() for p in result.payloads)
    body = b'{"page":' + dump(paging.info(result.total)) + b',"items":[' + items + b"]}"
    return Response(body, media_type="application/json")


@router.get(
    "/events/v1/events/{eventId}",
    operation_id="get_event",
    tags=EVENT_TAGS,
    summary="Get one event",
    description=(
        "The event's envelope as it is delivered to webhook endpoints. 404 for an event "
        "of another integration."
    ),
    response_model=schemas.EventOut,
    responses={
        **READ_ERRORS,
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: eventId: Input should be a valid UUID",
        ),
        404: problem(404, "Not Found", "No event 9b2f…"),
    },
)
async def get_event(event_id: EventId, principal: Reader, session: Session) -> Response:
    event = await service.get_event(session, principal.integration_id, event_id)
    return Response(event.payload.encode(), media_type="application/json")
