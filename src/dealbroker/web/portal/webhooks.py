"""The developer portal's webhook pages: the integration's endpoints with how their deliveries
go, registering and changing one (through the API's validation and the events service, egress
rules included), its deliveries by status, one delivery with every attempt as sent, and the
actions (test, disable, enable, recover, resend).

Every member sees; a developer or owner acts. Each action goes through the service the API and
the back office call, with the member as the audit trail's actor, in the action's transaction.
An endpoint or delivery of another integration is not found, whatever its id.
"""

import uuid
from typing import Annotated, Any

import orjson
from fastapi import Query, Request
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest, Conflict, NotFound
from dealbroker.core.i18n import N_, _
from dealbroker.events import schemas
from dealbroker.events import service as events
from dealbroker.events.service import By, EndpointChange
from dealbroker.web.console import webhooks as shared
from dealbroker.web.console.access import PageNumber, page_count
from dealbroker.web.portal.session import (
    PORTAL,
    Developer,
    LoggedInMember,
    ReadOnly,
    page,
    require_member,
)
from dealbroker.web.render import not_found

PAGE_SIZE = 20
KINDS = schemas.KINDS
MAX_DESCRIPTION = 500
# The deliveries' filter as the page's URL names it, and the status it selects.
FILTERS = {"failed": "failed", "pending": "pending", "delivered": "succeeded"}
FILTER_NAMES = {
    "": N_("All"),
    "failed": N_("Failed for good"),
    "pending": N_("Not delivered yet"),
    "delivered": N_("Delivered"),
}
STATUS_NAMES = {
    "pending": N_("Not delivered yet"),
    "succeeded": N_("Delivered"),
    "failed": N_("Failed for good"),
}
# The portal's flash messages besides those of every console's webhook pages.
DONE = {
    "created": N_("The endpoint is registered: events are sent to it from now on."),
    "changed": N_("The endpoint is changed."),
    "tested": N_("A test event is queued for the endpoint: it appears below once sent."),
}
NO_URL = N_("Enter the endpoint's full address, starting with https:// (or http://).")
REFUSED = N_(
    "This address is refused: its host must resolve to a public address (in the sandbox it may "
    "also be on your own machine, or not resolve yet)."
)
TOO_MANY = N_("An integration may have at most 20 webhook endpoints.")
TOO_LONG = N_("The description is too long: at most 500 characters.")
DISABLED = N_("This endpoint is disabled; enable it before sending a test event.")


def _by(request: Request, member: LoggedInMember) -> By:
    return By(member.actor, request.state.request_id, operator=False)


async def _owner(
    session: AsyncSession, member: LoggedInMember, endpoint_id: uuid.UUID
) -> uuid.UUID:
    """The member's own integration: an endpoint of another is not found (by the service)."""
    return member.integration_id


WEBHOOKS = shared.Webhooks(PORTAL, require_member("developer"), _owner, _by, more_done=DONE)
router = WEBHOOKS.router()


def _context(request: Request) -> dict[str, Any]:
    return {
        **WEBHOOKS.context(request),
        "kinds": KINDS,
        "status_names": {k: _(v) for k, v in STATUS_NAMES.items()},
    }


def _back(endpoint_id: uuid.UUID, done: str) -> Response:
    return WEBHOOKS.back(endpoint_id, done)


@router.get("/webhooks", response_class=HTMLResponse)
async def webhooks(request: Request, member: ReadOnly, session: Session) -> Response:
    """The integration's endpoints, failing ones first, and (for a developer) the form that
    registers one."""
    return await _list_page(request, member, session)


async def _list_page(
    request: Request,
    member: LoggedInMember,
    session: Session,
    status: int = 200,
    **context: Any,
) -> Response:
    found = await events.health_of_integration(session, member.integration_id)
    values = {**_context(request), "endpoints": found, "form": {}, **context}
    return page(request, "portal_webhooks.html", values, status)


def _form_fields(form: FormData) -> dict[str, Any]:
    """The endpoint form's fields as the API's body takes them (bounded before parsing): no
    kind ticked means every kind."""
    kinds = [str(k)[:40] for k in form.getlist("events")[: len(KINDS) + 1]]
    description = str(form.get("description", ""))[: MAX_DESCRIPTION + 1].strip()
    return {
        "url": str(form.get("url", ""))[:2100].strip(),
        "events": kinds or None,
        "description": description or None,
    }


def _invalid(error: ValidationError) -> str:
    fields = {str(e["loc"][0]) for e in error.errors() if e["loc"]}
    if "description" in fields:
        return _(TOO_LONG)
    return _(NO_URL)


def _refusal(exc: BadRequest | Conflict) -> str:
    return _(TOO_MANY) if isinstance(exc, Conflict) else _(REFUSED)


@router.post("/webhooks")
async def create(request: Request, member: Developer, session: Session) -> Response:
    """Register an endpoint: the API's body validation, then the events service's (the egress
    rules, the limit of endpoints)."""
    fields = _form_fields(await PORTAL.checked_form(request))
    try:
        body = schemas.EndpointCreate.model_validate(fields)
        endpoint = await events.create_endpoint(
            session,
            member.integration_id,
            request.app.state.settings,
            url=body.url,
            event_kinds=body.events,
            description=body.description,
            enabled=True,
            by=_by(request, member),
        )
    except ValidationError as exc:
        return await _list_page(request, member, session, 400, error=_invalid(exc), form=fields)
    except (BadRequest, Conflict) as exc:
        return await _list_page(request, member, session, 400, error=_refusal(exc), form=fields)
    return _back(endpoint.id, "created")


FilterQuery = Annotated[str, Query(alias="status", max_length=20)]


@router.get("/webhooks/{endpoint_id}", response_class=HTMLResponse)
async def endpoint(
    request: Request,
    endpoint_id: uuid.UUID,
    member: ReadOnly,
    session: Session,
    shown: FilterQuery = "",
    number: PageNumber = 1,
) -> Response:
    """One endpoint: how its deliveries go, its deliveries (newest first, a page at a time, of
    one status if chosen), and the forms that change it."""
    try:
        context = await _endpoint_context(request, member, session, endpoint_id, shown, number)
    except NotFound:
        return not_found(request)
    return page(request, "portal_webhook.html", context)


async def _endpoint_context(
    request: Request,
    member: LoggedInMember,
    session: Session,
    endpoint_id: uuid.UUID,
    shown: str = "",
    number: int = 1,
) -> dict[str, Any]:
    health = await events.health_of(session, member.integration_id, endpoint_id)
    shown = shown if shown in FILTERS else ""
    found = await events.deliveries(
        session, member.integration_id, endpoint_id, FILTERS.get(shown), number, PAGE_SIZE
    )
    e = health.endpoint
    return {
        **_context(request),
        "h": health,
        "deliveries": found.deliveries,
        "total": found.total,
        "number": number,
        "pages": page_count(found.total, PAGE_SIZE),
        "shown": shown,
        "filters": [(key, _(name)) for key, name in FILTER_NAMES.items()],
        "form": {"url": e.url, "description": e.description, "events": e.event_kinds},
    }


async def _endpoint_refused(
    request: Request,
    member: LoggedInMember,
    session: Session,
    endpoint_id: uuid.UUID,
    error: str,
    form: dict[str, Any] | None = None,
) -> Response:
    context = await _endpoint_context(request, member, session, endpoint_id)
    context["error"] = error
    if form is not None:
        context["form"] = form
    return page(request, "portal_webhook.html", context, 400)


@router.post("/webhooks/{endpoint_id}/edit")
async def edit(
    request: Request, endpoint_id: uuid.UUID, member: Developer, session: Session
) -> Response:
    """Change the URL, description and kinds (no kind ticked: every kind)."""
    fields = _form_fields(await PORTAL.checked_form(request))
    try:
        body = schemas.EndpointUpdate.model_validate(fields)
        change = EndpointChange(
            url=body.url,
            event_kinds=body.events,
            clear_event_kinds=body.events is None,
            description=body.description or "",
        )
        await events.update_endpoint(
            session,
            member.integration_id,
            endpoint_id,
            request.app.state.settings,
            change,
            _by(request, member),
        )
    except NotFound:
        return not_found(request)
    except ValidationError as exc:
        error = _invalid(exc)
        return await _endpoint_refused(request, member, session, endpoint_id, error, fields)
    except BadRequest as exc:
        error = _refusal(exc)
        return await _endpoint_refused(request, member, session, endpoint_id, error, fields)
    return _back(endpoint_id, "changed")


@router.post("/webhooks/{endpoint_id}/test")
async def test(
    request: Request, endpoint_id: uuid.UUID, member: Developer, session: Session
) -> Response:
    """Queue a signed ``webhook.test`` event for the endpoint."""
    try:
        await events.send_test_event(
            session, member.integration_id, endpoint_id, _by(request, member)
        )
    except NotFound:
        return not_found(request)
    except Conflict:
        return await _endpoint_refused(request, member, session, endpoint_id, _(DISABLED))
    return _back(endpoint_id, "tested")


async def _delivery(
    session: Session, member: LoggedInMember, endpoint_id: uuid.UUID, delivery_id: uuid.UUID
) -> events.DeliveryDetail:
    """The integration's delivery, if it is to this endpoint (else not found)."""
    found = await events.delivery(session, member.integration_id, delivery_id)
    if found.delivery.endpoint_id != endpoint_id:
        raise NotFound(f"No delivery {delivery_id}.")
    return found


@router.get("/webhooks/{endpoint_id}/deliveries/{delivery_id}", response_class=HTMLResponse)
async def delivery(
    request: Request,
    endpoint_id: uuid.UUID,
    delivery_id: uuid.UUID,
    member: ReadOnly,
    session: Session,
) -> Response:
    """One delivery: its event, the body every attempt sent, and each attempt with the headers
    it sent, the answer's status and excerpt, its latency and time."""
    try:
        found = await _delivery(session, member, endpoint_id, delivery_id)
        health = await events.health_of(session, member.integration_id, endpoint_id)
    except NotFound:
        return not_found(request)
    attempts = [
        (a, orjson.loads(a.request_headers) if a.request_headers else None)
        for a in reversed(found.attempts)
    ]
    context = {
        **_context(request),
        "h": health,
        "d": found.delivery,
        "event": found.event,
        "attempts": attempts,
        "body": found.event.payload,
    }
    return page(request, "portal_delivery.html", context)


@router.post("/webhooks/{endpoint_id}/deliveries/{delivery_id}/resend")
async def resend(
    request: Request,
    endpoint_id: uuid.UUID,
    delivery_id: uuid.UUID,
    member: Developer,
    session: Session,
) -> Response:
    """Send the delivery's event to this endpoint again, with its original webhook-id."""
    try:
        found = await _delivery(session, member, endpoint_id, delivery_id)
        await events.resend(
            session, member.integration_id, found.event.id, endpoint_id, _by(request, member)
        )
    except NotFound:
        return not_found(request)
    return _back(endpoint_id, "resent")
