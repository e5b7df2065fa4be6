"""The developer portal's pages: login (a one-time link by e-mail, or the back office's OpenID
provider), the choice of integration, home and logout; the sections' routers are included by
``install``.

Every page is answered through ``common.page`` (the party pages' CSP and private headers, the
request's locale); every form posts with the session's CSRF token.
"""

import logging
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from dealbroker.core import i18n, routing
from dealbroker.core.db import Session
from dealbroker.core.errors import NotFound, Unauthorized
from dealbroker.core.i18n import _
from dealbroker.operators import oidc
from dealbroker.portal import service
from dealbroker.portal.service import Person
from dealbroker.web import link_login
from dealbroker.web.link_login import LinkLogin
from dealbroker.web.oidc_login import OidcLogin
from dealbroker.web.portal import audit, credentials, events, members, requests, sandbox, webhooks
from dealbroker.web.portal.common import page
from dealbroker.web.portal.session import (
    COOKIE,
    PREFIX,
    BadCsrf,
    ChoiceRequired,
    LoginRequired,
    ReadOnly,
    RoleRequired,
    checked_form,
    require_person,
)
from dealbroker.web.render import PRIVATE, outbox_readable

log = logging.getLogger("dealbroker.portal")
router = APIRouter(prefix=PREFIX, include_in_schema=False)
CALLBACK_PATH = f"{PREFIX}/login/oidc/callback"
# Routes anyone may open: the login pages. Every other portal route names its role.
PUBLIC = frozenset(
    {
        f"{PREFIX}/login",
        f"{PREFIX}/login/oidc",
        CALLBACK_PATH,
        f"{PREFIX}/login/{{token}}",
    }
)
LoggedInPerson = Annotated[Person, Depends(require_person)]


def _login_page(request: Request, status: int = 200, **context: object) -> Response:
    values: dict[str, object] = {
        "fresh": False,
        "sent": False,
        "oidc": oidc.enabled(request.app.state.settings),
        "local_outbox": outbox_readable(request),
        **context,
    }
    return page(request, "portal_login.html", values, status)


def _login_refused(request: Request) -> Response:
    error = _("The login did not succeed. Try again, or ask for a login link by e-mail.")
    return _login_page(request, 400, error=error)


LINK = LinkLogin(cookie="dealbroker-portal-link", log=log)
OIDC = OidcLogin(
    cookie="dealbroker-portal-oidc",
    callback=CALLBACK_PATH,
    login_path=f"{PREFIX}/login",
    refused=_login_refused,
    log=log,
    what="portal login",
)


@router.get("/login", response_class=HTMLResponse)
async def login(
    request: Request, again: Annotated[str | None, Query(max_length=10)] = None
) -> Response:
    """How to log in. ``again=fresh``: the action asked for needs a recent login."""
    return _login_page(request, fresh=again == "fresh")


@router.post("/login")
async def login_ask(request: Request, session: Session) -> Response:
    """E-mail a login link to the address, if it is a member's; the answer is the same either
    way, so the page tells nobody who is a member. (No CSRF token: nobody is logged in yet,
    and the only effect is an e-mail to the address itself.)"""
    form = await request.form(max_files=0, max_fields=5)
    email = str(form.get("email", "")).strip()[: service.MAX_EMAIL + 1]
    await service.send_login_link(session, email, i18n.current(), request.app.state.settings)
    return _login_page(request, sent=True)


# Before the link's route, whose path would take "oidc" for a token.
@router.get("/login/oidc")
async def login_oidc(request: Request) -> Response:
    """To the organisation's identity provider (the back office's), with this browser's
    state, nonce and PKCE verifier kept in a short-lived cookie."""
    return await OIDC.start(request)


@router.get("/login/oidc/callback")
async def login_oidc_callback(
    request: Request,
    session: Session,
    code: Annotated[str, Query(max_length=2000)] = "",
    state: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """Back from the identity provider: the person whose verified e-mail it vouches for is
    logged in if they are a member; anything else is refused, and the pending login is
    forgotten either way."""

    async def log_in(email: str) -> Response:
        email_key = await service.for_login(session, email)
        return await _logged_in(request, session, email_key, "oidc")

    return await OIDC.finish(request, code, state, log_in)


async def _logged_in(request: Request, session: Session, email_key: str, method: str) -> Response:
    """A new session's cookie, and on to home (or the choice of integration)."""
    cookie = await service.start_session(
        session,
        email_key,
        method,
        request.app.state.settings,
        i18n.current(),
        request.state.request_id,
    )
    response = RedirectResponse(f"{PREFIX}/", status_code=303, headers=PRIVATE)
    COOKIE.set(request, response, cookie)
    return response


@router.get("/login/{token}", response_class=HTMLResponse)
async def login_link(request: Request, token: str) -> Response:
    """A one-time link's page: a button logs in (a link preview or a mail scanner that opens
    the link uses nothing up), from this browser only (``web.link_login``)."""
    return LINK.page(
        request,
        lambda bound: page(request, "portal_login_link.html", {"token": token[:100], **bound}),
    )


@router.post("/login/{token}")
async def login_with_link(request: Request, token: str, session: Session) -> Response:
    if not await LINK.bound(request):
        refused = link_login.refused(request, f"{PREFIX}/login")
        return _login_page(request, link_login.REFUSED_STATUS, **refused)
    try:
        email_key = await service.redeem_login_link(session, token)
    except Unauthorized:
        error = _(
            "This login link is not valid: it was used, has expired or is wrong. Ask for a new one."
        )
        return LINK.forget(request, _login_page(request, 400, error=error))
    return LINK.forget(request, await _logged_in(request, session, email_key, "link"))


@router.get("/choose", response_class=HTMLResponse)
async def choose(request: Request, person: LoggedInPerson, session: Session) -> Response:
    """The integrations the person is a member of, to choose the one to work in."""
    found = await service.memberships(session, person.email_key)
    return page(request, "portal_choose.html", {"memberships": found})


@router.post("/choose")
async def choose_one(request: Request, person: LoggedInPerson, session: Session) -> Response:
    form = await checked_form(request)
    try:
        member_id = uuid.UUID(str(form.get("member", ""))[:40])
        await service.choose(session, person, member_id, request.state.request_id)
    except (ValueError, NotFound):
        found = await service.memberships(session, person.email_key)
        error = _("Choose one of your integrations.")
        return page(request, "portal_choose.html", {"memberships": found, "error": error}, 400)
    return RedirectResponse(f"{PREFIX}/", status_code=303, headers=PRIVATE)


@router.post("/logout")
async def logout(request: Request, person: LoggedInPerson, session: Session) -> Response:
    await service.end_session(session, person, request.state.request_id)
    response = RedirectResponse(f"{PREFIX}/login?done=logged-out", status_code=303, headers=PRIVATE)
    COOKIE.clear(request, response)
    return response


@router.get("/", response_class=HTMLResponse)
async def home(request: Request, member: ReadOnly, session: Session) -> Response:
    """The integration: its name, client id, environment and scopes, and what to do next."""
    several = len(await service.memberships(session, member.email.lower())) > 1
    return page(request, "portal_home.html", {"several": several})


def install(app: FastAPI) -> None:
    """The portal's routes, and how its refusals are answered: to the login page, the choice
    of integration, the 403 page, or the expired-form page."""
    sections = (credentials, requests, events, members, audit, webhooks, sandbox)
    for each in (router, *(s.router for s in sections)):
        routing.include(app, each)

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, exc: LoginRequired) -> Response:
        response = RedirectResponse(
            f"{PREFIX}/login" + ("?again=fresh" if exc.fresh else ""),
            status_code=303,
            headers=PRIVATE,
        )
        if not exc.fresh:
            COOKIE.clear(request, response)
        return response

    @app.exception_handler(ChoiceRequired)
    async def _choose(request: Request, exc: ChoiceRequired) -> Response:
        return RedirectResponse(f"{PREFIX}/choose", status_code=303, headers=PRIVATE)

    @app.exception_handler(RoleRequired)
    async def _forbidden(request: Request, exc: RoleRequired) -> Response:
        request.state.member = exc.member
        return page(request, "portal_forbidden.html", {"role": exc.role}, 403)

    @app.exception_handler(BadCsrf)
    async def _bad_csrf(request: Request, exc: BadCsrf) -> Response:
        error = _("This form has expired or did not come from this page. Reload and try again.")
        return page(request, "portal_forbidden.html", {"error": error, "role": None}, 403)
