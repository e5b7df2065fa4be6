"""Who is logged in to the developer portal, as which member, and what they may do.

The session mechanics are the back office's (``core.login`` for the tokens and timeouts,
``web.session_cookie`` for the cookie and the CSRF token of every form); the cookie is
``dealbroker-portal`` (``__Host-dealbroker-portal`` on https).

Routes declare what they need with ``require_member(role)``: no valid session sends a person
to the login page; a person who has not chosen an integration yet to the choice; a member
without the role gets the 403 page. Every page shows the member's own integration only: the
routes take no integration from the URL, it is the session's.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import FormData

from dealbroker.core.db import Session
from dealbroker.portal import service
from dealbroker.portal.models import ROLES
from dealbroker.portal.service import LoggedInMember, Person
from dealbroker.web import session_cookie
from dealbroker.web.session_cookie import SessionCookie

__all__ = [
    "PREFIX",
    "COOKIE",
    "BadCsrf",
    "ChoiceRequired",
    "Developer",
    "LoggedInMember",
    "LoginRequired",
    "Owner",
    "ReadOnly",
    "RoleRequired",
    "checked_form",
    "csrf_token",
    "require_member",
    "require_person",
]

PREFIX = "/portal"


class BadCsrf(session_cookie.BadCsrf):
    """A portal form posted without its session's CSRF token."""


COOKIE = SessionCookie("dealbroker-portal", "portal-csrf", BadCsrf)


class LoginRequired(Exception):
    """No valid session (none, idle too long, ended): the login page. ``fresh``: the session
    is valid but the action wants a recent login."""

    def __init__(self, fresh: bool = False) -> None:
        self.fresh = fresh


class ChoiceRequired(Exception):
    """A logged-in person who has not chosen which of their integrations to act in."""


class RoleRequired(Exception):
    """A member without the role the page or form needs."""

    def __init__(self, member: LoggedInMember, role: str) -> None:
        self.member = member
        self.role = role


def csrf_token(request: Request) -> str:
    """The CSRF token of this request's session, for the forms of its page."""
    return COOKIE.csrf_token(request)


async def checked_form(request: Request, files: int = 0) -> FormData:
    """The posted form, refused (403) unless it carries this session's CSRF token."""
    return await COOKIE.checked_form(request, files)


async def _person(request: Request, session: Session) -> Person:
    settings = request.app.state.settings
    person = await service.resume_session(session, COOKIE.token(request), settings)
    if person is None:
        raise LoginRequired()
    request.state.person = person
    return person


async def require_person(request: Request, session: Session) -> Person:
    """A route dependency: the logged-in person, whether or not they have chosen an
    integration (the choice's page). A POST's CSRF token is checked here too."""
    person = await _person(request, session)
    if request.method == "POST":
        await checked_form(request)
    return person


def require_member(
    role: str | None = None, fresh: bool = False
) -> Callable[..., Awaitable[LoggedInMember]]:
    """A route dependency: the logged-in member, whose role is at least ``role`` (owner ⊇
    developer ⊇ read-only; any member when None); ``fresh``: logged in within
    ``DEALBROKER_OPERATOR_FRESH_LOGIN_MINUTES`` (a secret's rotation). A POST's CSRF token is
    checked here too, so no form of the portal can forget it."""
    if role is not None and role not in ROLES:
        raise ValueError(f"unknown role {role}")

    async def dependency(request: Request, session: Session) -> LoggedInMember:
        person = await _person(request, session)
        member = person.member
        if member is None:
            raise ChoiceRequired()
        request.state.member = member
        if role is not None and not member.at_least(role):
            raise RoleRequired(member, role)
        if request.method == "POST":
            await checked_form(request)
        if fresh and not member.fresh(request.app.state.settings):
            raise LoginRequired(fresh=True)
        return member

    return dependency


ReadOnly = Annotated[LoggedInMember, Depends(require_member("read-only"))]
Developer = Annotated[LoggedInMember, Depends(require_member("developer"))]
Owner = Annotated[LoggedInMember, Depends(require_member("owner"))]
