"""The developer portal's pages: login (a one-time link by e-mail, or the back office's OpenID
provider, through the console's ``login``), the choice of integration, home; the sections'
routers are included by ``install``.

Every page is answered through ``session.page`` (the console's: the party pages' CSP and
private headers, the request's locale); every form posts with the session's CSRF token.
"""

import uuid

from fastapi import FastAPI, Request
from starlette.responses import HTMLResponse, Response

from dealbroker.core import i18n
from dealbroker.core.db import Session
from dealbroker.core.errors import NotFound
from dealbroker.core.i18n import _
from dealbroker.portal import service
from dealbroker.web.console import login
from dealbroker.web.portal import audit, credentials, events, members, requests, sandbox, webhooks
from dealbroker.web.portal.session import (
    LOGINS,
    PORTAL,
    ChoiceRequired,
    LoggedInPerson,
    ReadOnly,
    page,
)
from dealbroker.web.render import outbox_readable

router = PORTAL.router()
CALLBACK_PATH = LOGINS.callback_path
# Routes anyone may open: the login pages. Every other portal route names its role.
PUBLIC = LOGINS.public


@router.post("/login")
async def login_ask(request: Request, session: Session) -> Response:
    """E-mail a login link to the address, if it is a member's; the answer is the same either
    way, so the page tells nobody who is a member. (No CSRF token: nobody is logged in yet,
    and the only effect is an e-mail to the address itself.)"""
    form = await request.form(max_files=0, max_fields=5)
    email = str(form.get("email", "")).strip()[: service.MAX_EMAIL + 1]
    await service.send_login_link(session, email, i18n.current(), request.app.state.settings)
    return LOGINS.page(request, sent=True, local_outbox=outbox_readable(request))


@router.get("/choose", response_class=HTMLResponse)
async def choose(request: Request, person: LoggedInPerson, session: Session) -> Response:
    """The integrations the person is a member of, to choose the one to work in."""
    found = await service.memberships(session, person.email_key)
    return page(request, "portal_choose.html", {"memberships": found})


@router.post("/choose")
async def choose_one(request: Request, person: LoggedInPerson, session: Session) -> Response:
    form = await PORTAL.checked_form(request)
    try:
        member_id = uuid.UUID(str(form.get("member", ""))[:40])
        await service.choose(session, person, member_id, request.state.request_id)
    except (ValueError, NotFound):
        found = await service.memberships(session, person.email_key)
        error = _("Choose one of your integrations.")
        return page(request, "portal_choose.html", {"memberships": found, "error": error}, 400)
    return PORTAL.to("/")


@router.get("/", response_class=HTMLResponse)
async def home(request: Request, member: ReadOnly, session: Session) -> Response:
    """The integration: its name, client id, environment and scopes, and what to do next."""
    several = len(await service.memberships(session, member.email.lower())) > 1
    return page(request, "portal_home.html", {"several": several})


def install(app: FastAPI) -> None:
    """The portal's routes, and how its refusals are answered: the console's (to the login
    page, the 403 page, the expired-form page), and to the choice of integration."""
    sections = (credentials, requests, events, members, audit, webhooks, sandbox)
    login.install(app, (LOGINS.router(), router, *(s.router for s in sections)))

    @app.exception_handler(ChoiceRequired)
    async def _choose(request: Request, exc: ChoiceRequired) -> Response:
        return PORTAL.to("/choose")
