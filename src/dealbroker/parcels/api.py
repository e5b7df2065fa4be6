"""The carrier's pushed tracking events (``POST /carriers/v1/{carrier}/events``).

The carrier's, not the integrations' API (so not in the OpenAPI): a body bounded in size, its
signature verified by the carrier's adapter before anything in it is read (``read_push``), then
each event handed to the one handler, ``parcels.service.take_events``, which applies it once.
401 for a body that is not the carrier's; 400 for one not in its documented shape; 404 for a
carrier this deployment does not use; 200 otherwise, with what was done (an event for a
shipment we did not book is logged and acknowledged: the carrier must not retry it forever).
"""

import logging

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from dealbroker.carriers.base import PushRejected
from dealbroker.carriers.registry import carrier_for
from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest, NotFound, Unauthorized
from dealbroker.core.settings import Settings
from dealbroker.parcels import service

log = logging.getLogger("dealbroker.parcels")

router = APIRouter()

PUSH_PATH = "/carriers/v1/{carrier}/events"
MAX_PUSH_BYTES = 256 * 1024


@router.post(PUSH_PATH, include_in_schema=False)
async def carrier_events(carrier: str, request: Request, session: Session) -> Response:
    settings: Settings = request.app.state.settings
    adapter = carrier_for(settings)
    if adapter is None or adapter.name != carrier:
        raise NotFound("No such carrier here.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_PUSH_BYTES:
            raise BadRequest(f"The body is larger than {MAX_PUSH_BYTES} bytes.")
    try:
        events = adapter.read_push(request.headers, bytes(body))
    except PushRejected as exc:
        log.warning("%s push refused: %s", carrier, exc)
        if exc.signature:
            raise Unauthorized("The push's signature does not verify.") from exc
        raise BadRequest(f"Not a {carrier} push we can read: {exc}.") from exc
    taken = await service.take_events(session, adapter.name, events, settings)
    log.info(
        "%s push: %d applied, %d seen before, %d unknown",
        carrier,
        taken.applied,
        taken.duplicates,
        taken.unknown,
    )
    return JSONResponse(
        {"applied": taken.applied, "duplicates": taken.duplicates, "unknown": taken.unknown}
    )
