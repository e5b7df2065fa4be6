"""Who is logged in to the back office, and what they may do.

A session is a random 256-bit token in a cookie; the database keeps its hash only
(``operators.service`` over ``core.login``). The cookie and the CSRF token of every form are
``web.session_cookie``'s, shared with the developer portal.

Routes declare what they need with ``require_operator(role)``: no valid session sends a person
to the login page; a session without the role gets the 403 page.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import FormData
from starlette.responses import Response

from dealbroker.core.db import Session
from dealbroker.operators import service
from dealbroker.operators.models import ROLES
from dealbroker.operators.service import LoggedIn
from dealbroker.web import session_cookie
from dealbroker.web.session_cookie import SessionCookie

PREFIX = "/back-office"


class LoginRequired(Exception):
    """No valid session (none, idle too long, ended): the login page, then back to ``next``.
    ``fresh``: the session is valid but the action wants a recent login."""

    def __init__(self, next_path: str, fresh: bool = False) -> None:
        self.next_path = next_path
        self.fresh = fresh


class RoleRequired(Exception):
    """A logged-in operator without the role the page or form needs."""

    def __init__(self, logged_in: LoggedIn, role: str) -> None:
        self.logged_in = logged_in
        self.role = role


class BadCsrf(session_cookie.BadCsrf):
    """A back office form posted without its session's CSRF token."""


COOKIE = SessionCookie("dealbroker-operator", "back-office-csrf", BadCsrf)


def cookie_name(request: Request) -> str:
    return COOKIE.cookie_name(request)


def set_cookie(request: Request, response: Response, token: str) -> None:
    COOKIE.set(request, response, token)


def clear_cookie(request: Request, response: Response) -> None:
    COOKIE.clear(request, response)


def csrf_token(request: Request) -> str:
    """The CSRF token of this request's session, for the forms of its page."""
    return COOKIE.csrf_token(request)


async def checked_form(request: Request, files: int = 0) -> FormData:
    """The posted form, refused unless it carries this session's CSRF token
    (``SessionCookie.checked_form``)."""
    return await COOKIE.checked_form(request, files)


def require_operator(
    role: str | None = None, fresh: bool = False, files: int = 0
) -> Callable[..., Awaitable[LoggedIn]]:
    """A route dependency: the logged-in operator, who has ``role`` (any operator when None);
    ``fresh``: logged in within ``DEALBROKER_OPERATOR_FRESH_LOGIN_MINUTES`` (money actions).
    A POST's CSRF token is checked here too, so no form of the back office can forget it;
    ``files``: how many files the form may carry (an upload's route; its body is capped by
    the app's ``BodyLimitMiddleware`` before it is read)."""
    if role is not None and role not in ROLES:
        raise ValueError(f"unknown role {role}")

    async def dependency(request: Request, session: Session) -> LoggedIn:
        settings = request.app.state.settings
        token = request.cookies.get(cookie_name(request), "")
        logged_in = await service.resume_session(session, token, settings)
        if logged_in is None:
            raise LoginRequired(_next(request))
        request.state.operator = logged_in
        if role is not None and role not in logged_in.roles:
            raise RoleRequired(logged_in, role)
        if request.method == "POST":
            await checked_form(request, files)
        if fresh and not logged_in.fresh(settings):
            raise LoginRequired(_next(request), fresh=True)
        return logged_in

    return dependency


def _next(request: Request) -> str:
    """Where to come back after logging in: a back office page of this site, or home."""
    path = request.url.path
    if request.method != "GET" or not path.startswith(PREFIX + "/") or len(path) > 300:
        return PREFIX + "/"
    return path


Operator = Annotated[LoggedIn, Depends(require_operator())]
Support = Annotated[LoggedIn, Depends(require_operator("support"))]
Finance = Annotated[LoggedIn, Depends(require_operator("finance"))]
Admin = Annotated[LoggedIn, Depends(require_operator("admin"))]
