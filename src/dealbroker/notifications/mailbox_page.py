"""The sandbox mailbox: what one party of a deal was sent, to follow a deal in the sandbox.

Each party has a link of its own (``Links.mailbox_url``): the seller's messages name every buyer
and offer, so a buyer must never see them.

``create_app`` mounts ``router`` only in the sandbox; elsewhere its path is a plain 404.
"""

import uuid

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.deals import parties
from dealbroker.web.links import MAILBOX_SELLER
from dealbroker.web.render import not_found, page

router = APIRouter(include_in_schema=False)


@router.get("/sandbox/mailbox/{deal_id}/{recipient}/{signature}", response_class=HTMLResponse)
async def mailbox_page(
    deal_id: str, recipient: str, signature: str, request: Request, session: Session
) -> Response:
    try:
        parsed = uuid.UUID(deal_id)
        offer_id = None if recipient == MAILBOX_SELLER else uuid.UUID(recipient)
    except ValueError:
        return not_found(request)
    if not request.app.state.links.mailbox_signature_valid(parsed, recipient, signature):
        return not_found(request)
    deal = await parties.shown(session, parsed)
    mailbox = None if deal is None else await parties.mailbox(session, deal, offer_id)
    if mailbox is None:
        return not_found(request)
    context = {"deal": deal, "to": mailbox.to, "messages": mailbox.messages, "error": None}
    return page(request, "mailbox.html", context)
