"""Who is logged in to the back office, and what they may do.

A session is a random 256-bit token in a cookie; the database keeps its hash only
(``operators.service``). The cookie is ``HttpOnly``, ``SameSite=Lax`` and, when the deployment's
base URL is https, ``Secure`` with the ``__Host-`` prefix (so no subdomain can set or shadow
it). Every form carries a CSRF token derived from the session's own token (an HMAC keyed by
it): a page of another site can neither read nor compute it.

Routes declare what they need with ``require_operator(role)``: no valid session sends a person
to the login page; a session without the role gets the 403 page.
"""

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from starlette.datastructures import FormData
from starlette.responses import Response

from dealbroker.core.db import Session
from dealbroker.core.security import same_secret, sign
from dealbroker.operators import service
from dealbroker.operators.models import ROLES
from dealbroker.operators.service import LoggedIn

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


class BadCsrf(Exception):
    """A back office form posted without its session's CSRF token."""


def cookie_name(request: Request) -> str:
    return "__Host-dealbroker-operator" if _secure(request) else "dealbroker-operator"


def _secure(request: Request) -> bool:
    return bool(request.app.state.settings.base_url.startswith("https://"))


def set_cookie(request: Request, response: Response, token: str) -> None:
    """The session's cookie: a browser session cookie (no Max-Age), the server ends it."""
    response.set_cookie(
        cookie_name(request),
        token,
        httponly=True,
        samesite="lax",
        secure=_secure(request),
        path="/",
    )


def clear_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        cookie_name(request), httponly=True, samesite="lax", secure=_secure(request), path="/"
    )


def csrf_token(request: Request) -> str:
    """The CSRF token of this request's session, for the forms of its page."""
    return sign(request.cookies.get(cookie_name(request), ""), "back-office-csrf")


async def checked_form(request: Request, files: int = 0) -> FormData:
    """The posted form, refused unless it carries this session's CSRF token. Small forms
    only: at most 50 fields, and ``files`` files (none unless the route takes an upload)."""
    form = await request.form(max_files=files, max_fields=50)
    token = request.cookies.get(cookie_name(request), "")
    if not token or not same_secret(str(form.get("csrf", "")), csrf_token(request)):
        raise BadCsrf()
    return form


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
