"""The back office's webhooks pages (admins): every integration's endpoints with how their
deliveries go, one endpoint's attempts and waiting deliveries, and the operator's actions on it
(disable, enable, recover, resend), each through the service the ``dealbroker webhooks``
commands call, which records it in the audit trail."""

import uuid

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.errors import NotFound
from dealbroker.core.i18n import _
from dealbroker.events import service as events
from dealbroker.events.service import By
from dealbroker.operators.service import LoggedIn
from dealbroker.web.backoffice.session import BACK_OFFICE, Admin, page, require_operator
from dealbroker.web.console import webhooks as shared
from dealbroker.web.console.access import PageNumber, page_count
from dealbroker.web.render import not_found

PAGE_SIZE = 25
ATTEMPTS_SHOWN = 20
WAITING_SHOWN = 20
EXCERPT = 500  # characters of an answer shown with its attempt


async def _owner(session: AsyncSession, logged_in: LoggedIn, endpoint_id: uuid.UUID) -> uuid.UUID:
    """Any integration's endpoint: an operator acts on every integration."""
    return (await events.find_endpoint(session, endpoint_id)).integration_id


def _by(request: Request, logged_in: LoggedIn) -> By:
    return By(logged_in.actor, request.state.request_id)


# The back office's flash messages are named ``webhook-disabled``, ``webhook-enabled``...
WEBHOOKS = shared.Webhooks(BACK_OFFICE, require_operator("admin"), _owner, _by, "webhook-")
router = WEBHOOKS.router()


@router.get("/webhooks", response_class=HTMLResponse)
async def webhooks(
    request: Request,
    logged_in: Admin,
    session: Session,
    number: PageNumber = 1,
) -> Response:
    """Every integration's endpoints, failing ones first, a page at a time."""
    found = await events.health_page(session, number, PAGE_SIZE)
    pages = page_count(found.total, PAGE_SIZE)
    return page(
        request,
        "back_office_webhooks.html",
        {
            **WEBHOOKS.context(request),
            "endpoints": found.endpoints,
            "total": found.total,
            "number": number,
            "pages": pages,
        },
    )


@router.get("/webhooks/{endpoint_id}", response_class=HTMLResponse)
async def webhook(
    request: Request, endpoint_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    """One endpoint: how its deliveries go, what waits, its recent attempts, the actions."""
    try:
        context = await _endpoint_context(request, session, endpoint_id)
    except NotFound:
        return not_found(request)
    return page(request, "back_office_webhook.html", context)


async def _endpoint_context(
    request: Request, session: Session, endpoint_id: uuid.UUID
) -> dict[str, object]:
    health = await events.health(session, endpoint_id)
    endpoint = health.endpoint
    tried = await events.attempts(session, endpoint.integration_id, endpoint.id, 1, ATTEMPTS_SHOWN)
    kinds = await events.event_kinds(session, list({a.event_id for a in tried.attempts}))
    return {
        **WEBHOOKS.context(request),
        "h": health,
        "attempts": tried.attempts,
        "attempts_total": tried.total,
        "kinds": kinds,
        "waiting": await events.waiting(session, endpoint.id, WAITING_SHOWN),
        "excerpt": EXCERPT,
    }


@router.post("/webhooks/{endpoint_id}/resend")
async def resend(
    request: Request, endpoint_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    """Send one of the integration's events to this endpoint again, with its webhook-id."""
    form = await BACK_OFFICE.checked_form(request)
    try:
        endpoint = await events.find_endpoint(session, endpoint_id)
    except NotFound:
        return not_found(request)
    try:
        event_id = uuid.UUID(str(form.get("event", "")).strip()[:100])
        await events.resend(
            session, endpoint.integration_id, event_id, endpoint.id, _by(request, logged_in)
        )
    except (ValueError, NotFound):
        context = await _endpoint_context(request, session, endpoint.id)
        context["error"] = _("This integration has no event with that id. Check the event id.")
        return page(request, "back_office_webhook.html", context, 400)
    return WEBHOOKS.back(endpoint.id, "resent")
