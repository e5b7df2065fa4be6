"""The back office's pages: home, the audit trail and the operators; login and logout are the
console's (``web.console.login``), and the sections' routers are included by ``install``.

Every page is answered through ``session.page`` (the console's: the party pages' CSP and
private headers, the request's locale); every form posts with the session's CSRF token.
"""

import uuid

from fastapi import FastAPI, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, Response, StreamingResponse

from dealbroker.audit import service as audit
from dealbroker.conversations import service as reported
from dealbroker.core.db import Session
from dealbroker.core.errors import Conflict, DomainError
from dealbroker.core.i18n import _
from dealbroker.operators import service
from dealbroker.operators.models import ROLES
from dealbroker.web.backoffice import conversations, disputes, integrations, money, webhooks
from dealbroker.web.backoffice.session import BACK_OFFICE, LOGINS, Admin, Operator, page
from dealbroker.web.console import audit as console_audit
from dealbroker.web.console import login
from dealbroker.web.console.access import PageNumber
from dealbroker.web.render import PRIVATE, not_found

router = BACK_OFFICE.router()
# Routes anyone may open: the login pages. Every other back office route names its role.
PUBLIC = LOGINS.public


@router.get("/", response_class=HTMLResponse)
async def home(request: Request, logged_in: Operator, session: Session) -> Response:
    """Who is logged in, their roles, and the back office's sections (with how many reported
    messages wait, for support)."""
    reports = await reported.count_open_reports(session) if "support" in logged_in.roles else 0
    return page(request, "back_office_home.html", {"open_reports": reports})


@router.get("/audit", response_class=HTMLResponse)
async def audit_trail(
    request: Request, logged_in: Admin, session: Session, number: PageNumber = 1
) -> Response:
    """The audit trail, newest first, a page at a time."""
    return await console_audit.trail(
        BACK_OFFICE, request, session, "back_office_audit.html", number
    )


@router.get("/audit.csv")
async def audit_export(request: Request, logged_in: Admin, session: Session) -> Response:
    """The whole audit trail as CSV (cells that would read as a formula start with a quote)."""
    rows = [chunk async for chunk in audit.export(session)]
    return StreamingResponse(
        iter(rows),
        media_type="text/csv; charset=utf-8",
        headers={**PRIVATE, "Content-Disposition": 'attachment; filename="audit.csv"'},
    )


@router.get("/operators", response_class=HTMLResponse)
async def operators(request: Request, logged_in: Admin, session: Session) -> Response:
    """Every operator, their roles, and the forms to add one and change them."""
    return page(request, "back_office_operators.html", await _operators_context(session))


async def _operators_context(session: AsyncSession) -> dict[str, object]:
    return {"operators": await service.every(session), "roles": ROLES}


@router.post("/operators")
async def operators_add(request: Request, logged_in: Admin, session: Session) -> Response:
    form = await BACK_OFFICE.checked_form(request)
    email = str(form.get("email", "")).strip()[: service.MAX_EMAIL + 1]
    name = str(form.get("name", "")).strip()[: service.MAX_NAME + 1]
    roles = [str(r) for r in form.getlist("role")][: len(ROLES)]
    try:
        async with session.begin_nested():
            await service.add(
                session, email, roles, logged_in.actor, name, request.state.request_id
            )
    except Conflict:
        return await _operators_refused(
            request, session, _("This e-mail address is an operator already.")
        )
    except DomainError:
        return await _operators_refused(
            request, session, _("Give a valid e-mail address and at least one role.")
        )
    return BACK_OFFICE.to("/operators?done=operator-added")


@router.post("/operators/{operator_id}/roles")
async def operators_roles(
    request: Request, operator_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    form = await BACK_OFFICE.checked_form(request)
    roles = [str(r) for r in form.getlist("role")][: len(ROLES)]
    operator = await service.by_id(session, operator_id)
    try:
        async with session.begin_nested():
            await service.set_roles(
                session, operator.email, roles, logged_in.actor, request.state.request_id
            )
    except DomainError:
        return await _operators_refused(request, session, _("Choose at least one role."))
    return BACK_OFFICE.to("/operators?done=operator-changed")


@router.post("/operators/{operator_id}/disabled")
async def operators_disabled(
    request: Request, operator_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    form = await BACK_OFFICE.checked_form(request)
    operator = await service.by_id(session, operator_id)
    disabled = form.get("disabled") == "1"
    await service.set_disabled(
        session, operator.email, disabled, logged_in.actor, request.state.request_id
    )
    return BACK_OFFICE.to("/operators?done=operator-changed")


async def _operators_refused(request: Request, session: AsyncSession, error: str) -> Response:
    context = {**await _operators_context(session), "error": error}
    return page(request, "back_office_operators.html", context, 400)


def install(app: FastAPI) -> None:
    """The back office's routes, and how its refusals are answered: the console's (to the
    login page, the 403 page, the expired-form page), and a dossier not found."""
    sections = (integrations, disputes, conversations, webhooks, money)
    login.install(app, (LOGINS.router(), router, *(s.router for s in sections)))

    @app.exception_handler(disputes.DossierNotFound)
    async def _not_found(request: Request, exc: disputes.DossierNotFound) -> Response:
        return not_found(request)
