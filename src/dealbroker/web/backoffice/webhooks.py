"""The back office's webhooks pages (admins): every integration's endpoints with how their
deliveries go, one endpoint's attempts and waiting deliveries, and the operator's actions on it
(disable, enable, recover, resend), each through the service the ``dealbroker webhooks``
commands call, which records it in the audit trail."""

import uuid
from datetime import timedelta
from typing import Annotated

from babel.numbers import format_percent
from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from dealbroker.core import clock, i18n
from dealbroker.core.db import Session
from dealbroker.core.errors import NotFound
from dealbroker.core.i18n import N_, _, ngettext
from dealbroker.events import service as events
from dealbroker.events import tasks
from dealbroker.events.service import By
from dealbroker.operators.service import LoggedIn
from dealbroker.web.backoffice.common import page
from dealbroker.web.backoffice.session import PREFIX, Admin, checked_form
from dealbroker.web.render import PRIVATE, not_found

router = APIRouter(prefix=PREFIX, include_in_schema=False)
PAGE_SIZE = 25
ATTEMPTS_SHOWN = 20
WAITING_SHOWN = 20
EXCERPT = 500  # characters of an answer shown with its attempt
# How far back a recovery reaches, as the form offers it; the default is the service's.
SINCE = {
    "1": (timedelta(days=1), N_("the last day")),
    "3": (timedelta(days=3), N_("the last 3 days")),
    "7": (timedelta(days=7), N_("the last 7 days")),
    "30": (timedelta(days=30), N_("the last 30 days")),
}
DEFAULT_SINCE = str(events.RECOVER_WINDOW.days)
# Why an endpoint is disabled, in the page's language (another reason is shown as stored).
REASONS = {
    events.DISABLED_BY_INTEGRATION: N_("disabled by the integration"),
    events.DISABLED_BY_OPERATOR: N_("disabled by an operator"),
    tasks.GONE: N_("the endpoint answered 410 Gone"),
    tasks.FAILING: N_("every delivery failed for 5 days"),
}
DONE = {
    "webhook-disabled": N_("The endpoint is disabled: its deliveries wait until it is enabled."),
    "webhook-enabled": N_("The endpoint is enabled: the deliveries waiting for it go out now."),
    "webhook-resent": N_("The event is queued for this endpoint again."),
}


def _context(request: Request) -> dict[str, object]:
    """What both pages' templates use: the flash message after an action, the words for a
    disabling reason and a failure rate."""
    done = request.query_params.get("done", "")
    message = _(DONE[done]) if done in DONE else None
    if done == "webhook-recovered":
        queued = request.query_params.get("queued", "")
        count = int(queued) if queued.isdigit() and len(queued) < 10 else 0
        message = ngettext(
            "%(num)d delivery is queued: the worker sends it now.",
            "%(num)d deliveries are queued: the worker sends them now.",
            count,
        ) % {"num": count}
    return {
        "done": message,
        "reason": lambda text: _(REASONS[text]) if text in REASONS else text,
        "percent": lambda share: format_percent(share / 100, locale=i18n.current()),
        "window_hours": int(events.FAILURE_WINDOW.total_seconds() // 3600),
        "recover_days": events.RECOVER_WINDOW.days,
        # A backlog whose earliest attempt is past is due: since then it waits for a worker, or
        # for the endpoint to be enabled.
        "now": clock.now(),
    }


@router.get("/webhooks", response_class=HTMLResponse)
async def webhooks(
    request: Request,
    logged_in: Admin,
    session: Session,
    number: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
) -> Response:
    """Every integration's endpoints, failing ones first, a page at a time."""
    found = await events.health_page(session, number, PAGE_SIZE)
    pages = max(1, -(-found.total // PAGE_SIZE))
    return page(
        request,
        "back_office_webhooks.html",
        {
            **_context(request),
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
        **_context(request),
        "h": health,
        "attempts": tried.attempts,
        "attempts_total": tried.total,
        "kinds": kinds,
        "waiting": await events.waiting(session, endpoint.id, WAITING_SHOWN),
        "excerpt": EXCERPT,
        "since_choices": [(key, _(label)) for key, (_delta, label) in SINCE.items()],
        "since": DEFAULT_SINCE,
    }


def _by(request: Request, logged_in: LoggedIn) -> By:
    return By(logged_in.actor, request.state.request_id)


def _back(endpoint_id: uuid.UUID, done: str) -> Response:
    return RedirectResponse(
        f"{PREFIX}/webhooks/{endpoint_id}?done={done}", status_code=303, headers=PRIVATE
    )


@router.post("/webhooks/{endpoint_id}/disable")
async def disable(
    request: Request, endpoint_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    return await _switch(request, endpoint_id, logged_in, session, False)


@router.post("/webhooks/{endpoint_id}/enable")
async def enable(
    request: Request, endpoint_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    return await _switch(request, endpoint_id, logged_in, session, True)


async def _switch(
    request: Request, endpoint_id: uuid.UUID, logged_in: LoggedIn, session: Session, on: bool
) -> Response:
    try:
        endpoint = await events.find_endpoint(session, endpoint_id)
    except NotFound:
        return not_found(request)
    by = _by(request, logged_in)
    await events.change_enabled(session, endpoint.integration_id, endpoint.id, on, by)
    return _back(endpoint.id, "webhook-enabled" if on else "webhook-disabled")


@router.post("/webhooks/{endpoint_id}/recover")
async def recover(
    request: Request, endpoint_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    """Queue again what failed for good since the chosen time and what the endpoint never got;
    with ``waiting``, retry now what waits for its next attempt."""
    form = await checked_form(request)
    try:
        endpoint = await events.find_endpoint(session, endpoint_id)
    except NotFound:
        return not_found(request)
    delta, _label = SINCE.get(str(form.get("since", "")), SINCE[DEFAULT_SINCE])
    queued = await events.recover(
        session,
        endpoint.integration_id,
        endpoint.id,
        clock.now() - delta,
        waiting=form.get("waiting") == "1",
        by=_by(request, logged_in),
    )
    return _back(endpoint.id, f"webhook-recovered&queued={queued}")


@router.post("/webhooks/{endpoint_id}/resend")
async def resend(
    request: Request, endpoint_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    """Send one of the integration's events to this endpoint again, with its webhook-id."""
    form = await checked_form(request)
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
    return _back(endpoint.id, "webhook-resent")
