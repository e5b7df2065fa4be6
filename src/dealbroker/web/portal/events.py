"""The event catalog: every event kind we send, its summary and an example payload, from the
same declarations as the OpenAPI document's ``webhooks`` (``events.webhook_docs.CATALOG``)."""

import json

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from dealbroker.events.webhook_docs import CATALOG
from dealbroker.web.portal.session import PREFIX, ReadOnly, page

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.get("/events", response_class=HTMLResponse)
async def events(request: Request, member: ReadOnly) -> Response:
    kinds = [(kind, json.dumps(kind.example, indent=2)) for kind in CATALOG]
    return page(request, "portal_events.html", {"kinds": kinds})
