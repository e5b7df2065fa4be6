"""The back office's pages: login (one-time link), home, logout, the audit trail; the
sections' routers (``disputes``) are included by ``install``.

Every page is answered through ``render.page`` (the party pages' CSP and private headers, the
request's locale); every form posts with the session's CSRF token (``session.checked_form``).
"""

import logging
import uuid
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from dealbroker.audit import service as audit
from dealbroker.core import routing
from dealbroker.core.db import Session
from dealbroker.core.errors import Conflict, DomainError, Unauthorized
from dealbroker.core.i18n import _
from dealbroker.operators import models, oidc, service
from dealbroker.operators.models import ROLES
from dealbroker.web import link_login
from dealbroker.web.backoffice import disputes, integrations, money, webhooks
from dealbroker.web.backoffice.common import page
from dealbroker.web.backoffice.session import (
    PREFIX,
    Admin,
    BadCsrf,
    LoginRequired,
    Operator,
    RoleRequired,
    checked_form,
    clear_cookie,
    set_cookie,
)
from dealbroker.web.link_login import LinkLogin
from dealbroker.web.oidc_login import OidcLogin
from dealbroker.web.render import PRIVATE, not_found

log = logging.getLogger("dealbroker.back_office")
router = APIRouter(prefix=PREFIX, include_in_schema=False)
AUDIT_PAGE_SIZE = 50
# Routes anyone may open: the login pages. Every other back office route names its role.
PUBLIC = frozenset(
    {
        f"{PREFIX}/login",
        f"{PREFIX}/login/oidc",
        f"{PREFIX}/login/oidc/callback",
        f"{PREFIX}/login/{{token}}",
    }
)


@router.get("/login", response_class=HTMLResponse)
async def login(
    request: Request, again: Annotated[str | None, Query(max_length=10)] = None
) -> Response:
    """How to log in. ``again=fresh``: the action asked for needs a recent login."""
    context: dict[str, object] = {
        "fresh": again == "fresh",
        "oidc": oidc.enabled(request.app.state.settings),
    }
    return page(request, "back_office_login.html", context)


def _login_refused(request: Request) -> Response:
    error = _("The login did not succeed. Try again, or ask an administrator for a login link.")
    context: dict[str, object] = {
        "error": error,
        "fresh": False,
        "oidc": oidc.enabled(request.app.state.settings),
    }
    return page(request, "back_office_login.html", context, 400)


LINK = LinkLogin(cookie="dealbroker-link", log=log)
OIDC = OidcLogin(
    cookie="dealbroker-oidc",
    callback=f"{PREFIX}/login/oidc/callback",
    login_path=f"{PREFIX}/login",
    refused=_login_refused,
    log=log,
)


# Before the link's route, whose path would take "oidc" for a token.
@router.get("/login/oidc")
async def login_oidc(request: Request) -> Response:
    """To the organisation's identity provider, with this browser's state, nonce and PKCE
    verifier kept in a short-lived cookie."""
    return await OIDC.start(request)


@router.get("/login/oidc/callback")
async def login_oidc_callback(
    request: Request,
    session: Session,
    code: Annotated[str, Query(max_length=2000)] = "",
    state: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """Back from the identity provider: the operator whose verified e-mail it vouches for is
    logged in; anything else is refused, and the pending login is forgotten either way."""

    async def log_in(email: str) -> Response:
        operator = await service.for_login(session, email)
        return await _logged_in(request, session, operator, "oidc")

    return await OIDC.finish(request, code, state, log_in)


async def _logged_in(
    request: Request, session: AsyncSession, operator: models.Operator, method: str
) -> Response:
    """A new session's cookie, and on to home."""
    settings = request.app.state.settings
    cookie = await service.start_session(
        session, operator, method, settings, request.state.request_id
    )
    response = RedirectResponse(f"{PREFIX}/", status_code=303, headers=PRIVATE)
    set_cookie(request, response, cookie)
    return response


@router.get("/login/{token}", response_class=HTMLResponse)
async def login_link(request: Request, token: str) -> Response:
    """A one-time link's page: a button logs in (a link preview or a mail scanner that opens
    the link uses nothing up), from this browser only (``web.link_login``)."""
    return LINK.page(
        request,
        lambda bound: page(request, "back_office_login_link.html", {"token": token[:100], **bound}),
    )


@router.post("/login/{token}")
async def login_with_link(request: Request, token: str, session: Session) -> Response:
    settings = request.app.state.settings
    context: dict[str, object] = {"fresh": False, "oidc": oidc.enabled(settings)}
    if not await LINK.bound(request):
        context.update(link_login.refused(request, f"{PREFIX}/login"))
        return page(request, "back_office_login.html", context, link_login.REFUSED_STATUS)
    try:
        operator = await service.redeem_login_link(session, token)
    except Unauthorized:
        context["error"] = _(
            "This login link is not valid: it was used, has expired or is wrong. Ask for a new one."
        )
        return LINK.forget(request, page(request, "back_office_login.html", context, 400))
    return LINK.forget(request, await _logged_in(request, session, operator, "link"))


@router.post("/logout")
async def logout(request: Request, logged_in: Operator, session: Session) -> Response:
    await service.end_session(session, logged_in, request.state.request_id)
    response = RedirectResponse(f"{PREFIX}/login?done=logged-out", status_code=303, headers=PRIVATE)
    clear_cookie(request, response)
    return response


@router.get("/", response_class=HTMLResponse)
async def home(request: Request, logged_in: Operator) -> Response:
    """Who is logged in, their roles, and the back office's sections."""
    return page(request, "back_office_home.html", {})


@router.get("/audit", response_class=HTMLResponse)
async def audit_trail(
    request: Request,
    logged_in: Admin,
    session: Session,
    number: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
) -> Response:
    """The audit trail, newest first, a page at a time."""
    rows, total = await audit.page(session, number, AUDIT_PAGE_SIZE)
    pages = max(1, -(-total // AUDIT_PAGE_SIZE))
    return page(
        request,
        "back_office_audit.html",
        {"rows": rows, "number": number, "pages": pages, "total": total},
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
    form = await checked_form(request)
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
    return RedirectResponse(f"{PREFIX}/operators?done=operator-added", 303, headers=PRIVATE)


@router.post("/operators/{operator_id}/roles")
async def operators_roles(
    request: Request, operator_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    form = await checked_form(request)
    roles = [str(r) for r in form.getlist("role")][: len(ROLES)]
    operator = await service.by_id(session, operator_id)
    try:
        async with session.begin_nested():
            await service.set_roles(
                session, operator.email, roles, logged_in.actor, request.state.request_id
            )
    except DomainError:
        return await _operators_refused(request, session, _("Choose at least one role."))
    return RedirectResponse(f"{PREFIX}/operators?done=operator-changed", 303, headers=PRIVATE)


@router.post("/operators/{operator_id}/disabled")
async def operators_disabled(
    request: Request, operator_id: uuid.UUID, logged_in: Admin, session: Session
) -> Response:
    form = await checked_form(request)
    operator = await service.by_id(session, operator_id)
    disabled = form.get("disabled") == "1"
    await service.set_disabled(
        session, operator.email, disabled, logged_in.actor, request.state.request_id
    )
    return RedirectResponse(f"{PREFIX}/operators?done=operator-changed", 303, headers=PRIVATE)


async def _operators_refused(request: Request, session: AsyncSession, error: str) -> Response:
    context = {**await _operators_context(session), "error": error}
    return page(request, "back_office_operators.html", context, 400)


def install(app: FastAPI) -> None:
    """The back office's routes, and how its refusals are answered: to the login page, the
    403 page, or the expired-form page."""
    for each in (router, integrations.router, disputes.router, webhooks.router, money.router):
        routing.include(app, each)

    @app.exception_handler(disputes.DossierNotFound)
    async def _not_found(request: Request, exc: disputes.DossierNotFound) -> Response:
        return not_found(request)

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, exc: LoginRequired) -> Response:
        response = RedirectResponse(
            f"{PREFIX}/login" + ("?again=fresh" if exc.fresh else ""),
            status_code=303,
            headers=PRIVATE,
        )
        if not exc.fresh:
            clear_cookie(request, response)
        return response

    @app.exception_handler(RoleRequired)
    async def _forbidden(request: Request, exc: RoleRequired) -> Response:
        request.state.operator = exc.logged_in
        return page(request, "back_office_forbidden.html", {"role": exc.role}, 403)

    @app.exception_handler(BadCsrf)
    async def _bad_csrf(request: Request, exc: BadCsrf) -> Response:
        error = _("This form has expired or did not come from this page. Reload and try again.")
        return page(request, "back_office_forbidden.html", {"error": error, "role": None}, 403)
