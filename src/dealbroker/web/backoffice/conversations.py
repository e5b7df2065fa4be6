"""The back office's reported messages (role support): the queue of open reports, oldest first,
each with its deal and its whole conversation, and support's actions on a deal's messages and
parties, which the deal's page offers too: hide a message, leave a reported one as it is
(dismiss the report), stop the seller or a buyer writing on the deal, and let them write again.

Every action is ``conversations.service``'s, which records it in the audit trail in the
request's transaction with the operator and the request id. A message or conversation of
another deal is not found; a form that names no party or no choice is refused (400) on the page
it came from, nothing changed.
"""

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, Response

from dealbroker.conversations import service as conversations
from dealbroker.conversations.service import Party
from dealbroker.core.db import Session
from dealbroker.core.errors import NotFound
from dealbroker.core.i18n import _
from dealbroker.deals import flows
from dealbroker.deals.models import Deal
from dealbroker.disputes.dossier import conversations_of, dossier
from dealbroker.web.backoffice.session import BACK_OFFICE, Support, page
from dealbroker.web.render import not_found

router = BACK_OFFICE.router()
# The queue shows this many open reports, the oldest (with how many there are in all).
SHOWN = 100
# Where an action sends the operator back to: the queue, or the deal's page (the default).
BACK = ("reports", "deal")


@router.get("/reports", response_class=HTMLResponse)
async def reports(request: Request, logged_in: Support, session: Session) -> Response:
    """Every open report, oldest first, with its deal and the conversation around it."""
    return page(request, "back_office_reports.html", await _queue(session))


async def _queue(session: AsyncSession) -> dict[str, object]:
    found = await conversations.open_reports(session, SHOWN)
    deals: dict[uuid.UUID, tuple[Deal, dict[uuid.UUID, dict[str, Any]]]] = {}
    queue = []
    for report in found:
        deal_id = report.message.deal_id
        if deal_id not in deals:
            deal = await flows.operator_view(session, deal_id)
            shown = await conversations_of(session, deal)
            deals[deal_id] = (deal, {c["id"]: c for c in shown})
        deal, by_id = deals[deal_id]
        conversation = by_id[report.conversation.id]
        message = next(m for m in conversation["messages"] if m["id"] == report.message.id)
        queue.append({"deal": deal, "conversation": conversation, "message": message})
    total = len(found) if len(found) < SHOWN else await conversations.count_open_reports(session)
    return {"queue": queue, "total": total}


@router.post("/deals/{deal_id}/messages/{message_id}/hide")
async def hide(
    request: Request,
    deal_id: uuid.UUID,
    message_id: uuid.UUID,
    logged_in: Support,
    session: Session,
) -> Response:
    """Hide a message from both parties (kept for the evidence); closes its report."""
    return await _act(
        request,
        session,
        deal_id,
        "message-hidden",
        lambda: conversations.hide(
            session, deal_id, message_id, logged_in.actor, request.state.request_id
        ),
    )


@router.post("/deals/{deal_id}/messages/{message_id}/dismiss")
async def dismiss(
    request: Request,
    deal_id: uuid.UUID,
    message_id: uuid.UUID,
    logged_in: Support,
    session: Session,
) -> Response:
    """Leave a reported message as it is and close its report."""
    return await _act(
        request,
        session,
        deal_id,
        "report-dismissed",
        lambda: conversations.dismiss_report(
            session, deal_id, message_id, logged_in.actor, request.state.request_id
        ),
    )


@router.post("/deals/{deal_id}/conversations/{conversation_id}/block")
async def block(
    request: Request,
    deal_id: uuid.UUID,
    conversation_id: uuid.UUID,
    logged_in: Support,
    session: Session,
) -> Response:
    """Stop a party writing (``blocked`` 1) or let them write again (0): the seller on every
    conversation of the deal, the buyer in this one."""
    form = await BACK_OFFICE.checked_form(request)
    party = next((p for p in Party if p.value == form.get("party")), None)
    blocked = {"1": True, "0": False}.get(str(form.get("blocked", "")))
    if party is None or blocked is None:
        return await _refused(request, session, deal_id, form)
    return await _act(
        request,
        session,
        deal_id,
        "party-blocked" if blocked else "party-unblocked",
        lambda: conversations.block(
            session,
            deal_id,
            conversation_id,
            party,
            logged_in.actor,
            blocked=blocked,
            request_id=request.state.request_id,
        ),
        form,
    )


async def _act(
    request: Request,
    session: AsyncSession,
    deal_id: uuid.UUID,
    done: str,
    action: Callable[[], Awaitable[object]],
    form: FormData | None = None,
) -> Response:
    """Run ``action`` (the route's dependency checked the role and the CSRF token), then back
    to the page the form was on; another deal's message or conversation is not found."""
    if form is None:
        form = await BACK_OFFICE.checked_form(request)
    try:
        async with session.begin_nested():
            await action()
    except NotFound:
        return not_found(request)
    if _back(form) == "reports":
        return BACK_OFFICE.to(f"/reports?done={done}")
    return BACK_OFFICE.to(f"/deals/{deal_id}?done={done}#conversations")


def _back(form: FormData) -> str:
    back = str(form.get("back", ""))
    return back if back in BACK else "deal"


async def _refused(
    request: Request, session: AsyncSession, deal_id: uuid.UUID, form: FormData
) -> Response:
    """The page the form was on again, with why nothing was done (400)."""
    error = _("Nothing was changed: choose the seller or the buyer, and to stop or allow them.")
    if _back(form) == "reports":
        return page(
            request, "back_office_reports.html", {**await _queue(session), "error": error}, 400
        )
    try:
        found = await dossier(session, deal_id)
    except NotFound:
        return not_found(request)
    return page(request, "back_office_deal.html", {"dossier": found, "error": error}, 400)
