"""Who may act in a console, and on what: the ``Console`` each of the back office and the
developer portal declares, its session cookie, the CSRF token of every form, the refusals a
route raises and how its pages are rendered.

A session is a random 256-bit token in a cookie, which the console's ``resume`` turns into who
is logged in (the database keeps the token's hash only, ``core.login``). The cookie is
``HttpOnly``, ``SameSite=Lax`` and, when the deployment's base URL is https, ``Secure`` with the
``__Host-`` prefix (``web.session_cookie``). Every form carries a CSRF token derived from the
session's own token (an HMAC keyed by it): a page of another site can neither read nor compute
it.
"""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.i18n import _
from dealbroker.core.security import same_secret, sign
from dealbroker.core.settings import Settings
from dealbroker.web import render
from dealbroker.web.render import PRIVATE
from dealbroker.web.session_cookie import HostCookie

# A list page's number, as its links name it (``?page=``).
PageNumber = Annotated[int, Query(alias="page", ge=1, le=1_000_000)]


def page_count(total: int, size: int) -> int:
    """How many pages of ``size`` rows ``total`` rows fill (one at least, for an empty list)."""
    return max(1, -(-total // size))


@dataclass(frozen=True)
class Console:
    """One console, which its pages call ``title``. ``name`` prefixes its own templates
    (``{name}_base.html``, its login page ``{name}_login.html``); every route is under
    ``prefix``; ``cookie`` names the session's cookie (``__Host-`` prefixed on https) and
    ``csrf_purpose`` what its forms' tokens are signed for. ``resume`` finds who a session's
    token logs in (None: nobody), kept on ``request.state`` as ``logged_in_as``; ``acting`` as
    whom they act, and ``has_role`` whether that one has a role (its keys are
    ``role_names``'); ``shows`` is what every page shows of who acts. ``title``, ``role_names`` and the texts
    (``login_heading``, ``needs_role`` with ``%(role)s``, ``back_home``) are marked for
    translation and translated when shown."""

    name: str
    title: str
    prefix: str
    cookie: str
    csrf_purpose: str
    resume: Callable[[AsyncSession, str, Settings], Awaitable[Any]]
    logged_in_as: str
    shows: Callable[[Request], dict[str, object]]
    acting: Callable[[Request, Any], Any]
    has_role: Callable[[Any, str], bool]
    role_names: Mapping[str, str]
    login_heading: str
    needs_role: str
    back_home: str

    @property
    def base(self) -> str:
        """The template its pages extend."""
        return f"{self.name}_base.html"

    def router(self) -> APIRouter:
        """A router of this console's pages (under ``prefix``, none in the OpenAPI document)."""
        return APIRouter(prefix=self.prefix, include_in_schema=False)

    @property
    def session_cookie(self) -> HostCookie:
        return HostCookie(self.cookie)

    def csrf_token(self, request: Request) -> str:
        """The CSRF token of this request's session, for the forms of its page."""
        return sign(self.session_cookie.read(request), self.csrf_purpose)

    async def checked_form(self, request: Request, files: int = 0) -> FormData:
        """The posted form, refused (``BadCsrf``) unless it carries this session's CSRF token.
        Small forms only: at most 50 fields, and ``files`` files (none unless the route takes
        an upload)."""
        form = await request.form(max_files=files, max_fields=50)
        token = self.session_cookie.read(request)
        if not token or not same_secret(str(form.get("csrf", "")), self.csrf_token(request)):
            raise BadCsrf(self)
        return form

    async def logged_in(self, request: Request, session: AsyncSession) -> Any:
        """Who this request's session logs in, kept on ``request.state``; ``LoginRequired``
        when nobody (no session, idle too long, ended)."""
        settings = request.app.state.settings
        who = await self.resume(session, self.session_cookie.read(request), settings)
        if who is None:
            raise LoginRequired(self)
        setattr(request.state, self.logged_in_as, who)
        return who

    async def anyone(self, request: Request, session: Session) -> Any:
        """A route dependency: whoever is logged in, whatever their role (logout; the
        portal's choice of integration), a POST's CSRF token checked."""
        who = await self.logged_in(request, session)
        if request.method == "POST":
            await self.checked_form(request)
        return who

    def requires(
        self, role: str | None = None, fresh: bool = False, files: int = 0
    ) -> Callable[..., Awaitable[Any]]:
        """A route dependency: who acts (``acting``, as whom the one logged in acts), who has
        ``role`` (``has_role``; anyone acting when None); ``fresh``: logged in within
        ``DEALBROKER_OPERATOR_FRESH_LOGIN_MINUTES`` (money actions, a secret's rotation). A
        POST's CSRF token is checked here too, so no form of a console can forget it;
        ``files``: how many files the form may carry (an upload's route; its body is capped by
        the app's ``BodyLimitMiddleware`` before it is read)."""
        if role is not None and role not in self.role_names:
            raise ValueError(f"unknown role {role}")

        async def dependency(request: Request, session: Session) -> Any:
            who = self.acting(request, await self.logged_in(request, session))
            if role is not None and not self.has_role(who, role):
                raise RoleRequired(self, role)
            if request.method == "POST":
                await self.checked_form(request, files)
            if fresh and not who.fresh(request.app.state.settings):
                raise LoginRequired(self, fresh=True)
            return who

        return dependency

    def page(
        self, request: Request, template: str, context: dict[str, object], status: int = 200
    ) -> Response:
        """A page of this console: ``render.page`` (CSP, private headers such as
        ``Cache-Control: no-store``, the request's locale) with who acts (``shows``;
        ``signed_in``: whether anybody is), the ``csrf`` token every form of the page posts,
        and the role names in the request's language."""
        logged_in = getattr(request.state, self.logged_in_as, None) is not None
        return render.page(
            request,
            template,
            {
                "console": self,
                **self.shows(request),
                "signed_in": logged_in,
                "csrf": self.csrf_token(request) if logged_in else "",
                "role_names": {role: _(name) for role, name in self.role_names.items()},
                **context,
            },
            status,
        )

    def to(self, path: str) -> Response:
        """A redirect (303) to ``path`` of this console, after a form."""
        return RedirectResponse(f"{self.prefix}{path}", status_code=303, headers=PRIVATE)


class LoginRequired(Exception):
    """No valid session (none, idle too long, ended): the console's login page. ``fresh``: the
    session is valid but the action wants a recent login."""

    def __init__(self, console: Console, fresh: bool = False) -> None:
        self.console = console
        self.fresh = fresh


class RoleRequired(Exception):
    """Someone logged in without the role the page or form needs: the 403 page."""

    def __init__(self, console: Console, role: str | None) -> None:
        self.console = console
        self.role = role


class BadCsrf(Exception):
    """A form posted without its session's CSRF token: the 403 page."""

    def __init__(self, console: Console) -> None:
        self.console = console
