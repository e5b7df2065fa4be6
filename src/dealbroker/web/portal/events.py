"""The event catalog: every event kind we send, its summary and an example payload, from the
same declarations as the OpenAPI document's ``webhooks`` (``events.webhook_docs.CATALOG``)."""

import json

from fastapi import Request
from starlette.responses import HTMLResponse, Response

from dealbroker.events.webhook_docs import CATALOG
from dealbroker.web.portal.session import PORTAL, ReadOnly, page

router = PORTAL.router()


@router.get("/events", response_class=HTMLResponse)
async def events(request: Request, member: ReadOnly) -> Response:
    kinds = [(kind, json.dumps(kind.example, indent=2)) for kind in CATALOG]
    return page(request, "portal_events.html", {"kinds": kinds})
