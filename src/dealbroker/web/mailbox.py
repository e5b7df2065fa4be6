"""The sandbox mailbox: what one party of a deal was sent, to follow a deal in the sandbox; and
a local sandbox's whole outbox.

Each party has a link of its own (``Links.mailbox_url``): the seller's messages name every buyer
and offer, so a buyer must never see them.

The outbox page (``/sandbox/outbox``) shows every message, to anyone, a developer portal login
mail included: so it answers only on a developer's own machine (``Settings.local_outbox``: no
mail server, a loopback base URL) and to a browser on that machine; elsewhere it is a 404 like
any unknown path.

``create_app`` mounts ``router`` only in the sandbox; elsewhere its paths are plain 404s.
"""

import uuid

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from dealbroker import parties
from dealbroker.core.db import Session
from dealbroker.core.links import MAILBOX_SELLER
from dealbroker.notifications import service as notifications
from dealbroker.web.render import not_found, outbox_readable, page

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


OUTBOX_SHOWN = 50  # the newest messages the outbox page shows


@router.get("/sandbox/outbox", response_class=HTMLResponse)
async def outbox_page(request: Request, session: Session) -> Response:
    """Every message the local sandbox would have e-mailed, newest first: with no mail server,
    the only way to read a developer portal login mail, or what a deal's parties were sent."""
    if not outbox_readable(request):
        return not_found(request)
    messages = await notifications.newest(session, OUTBOX_SHOWN)
    return page(request, "outbox.html", {"messages": messages, "shown": OUTBOX_SHOWN})
