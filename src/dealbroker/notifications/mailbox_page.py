"""The sandbox mailbox: every message sent about one deal, to follow a deal in the sandbox.

``create_app`` mounts ``router`` only in the sandbox; elsewhere its path is a plain 404.
"""

import uuid

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.deals import parties
from dealbroker.notifications import service as notifications
from dealbroker.web.render import not_found, page

router = APIRouter(include_in_schema=False)


@router.get("/sandbox/mailbox/{deal_id}/{signature}", response_class=HTMLResponse)
async def mailbox_page(
    deal_id: str, signature: str, request: Request, session: Session
) -> Response:
    try:
        parsed = uuid.UUID(deal_id)
    except ValueError:
        return not_found(request)
    if not request.app.state.links.mailbox_signature_valid(parsed, signature):
        return not_found(request)
    deal = await parties.shown(session, parsed)
    if deal is None:
        return not_found(request)
    messages = await notifications.mailbox(session, parsed)
    return page(request, "mailbox.html", {"deal": deal, "messages": messages, "error": None})
