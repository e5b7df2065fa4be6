"""A console's login and logout, the same for the back office and the developer portal: the
login page, a one-time link's page and its POST (``link_login``), OpenID Connect
(``oidc_login``), logout, and how a console's refusals are answered (to the login page, or the
403 page). Who may log in, and the session that starts, are the console's ``Logins``."""

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.errors import Unauthorized
from dealbroker.core.fastpath import routes
from dealbroker.core.i18n import _
from dealbroker.operators import oidc
from dealbroker.web.console import link_login
from dealbroker.web.console.access import BadCsrf, Console, LoginRequired, RoleRequired
from dealbroker.web.console.link_login import LinkLogin
from dealbroker.web.console.oidc_login import OidcLogin

FORBIDDEN = "console_forbidden.html"


@dataclass(frozen=True)
class Logins:
    """How a console's people log in. ``find``: whom a verified e-mail address logs in;
    ``redeem``: whom a one-time link's token logs in (both raise ``Unauthorized``); ``start``: a
    new session for them by ``method``, its cookie's token; ``end``: the session of who is
    logged in, ended. The link's and the pending OpenID Connect login's cookies are
    ``link_cookie`` and ``oidc_cookie``; ``refused`` (marked for translation) is what the login
    page says of a login that did not succeed, ``oidc_what`` what the log calls one."""

    console: Console
    log: logging.Logger
    link_cookie: str
    oidc_cookie: str
    oidc_what: str
    refused: str
    find: Callable[[AsyncSession, str], Awaitable[Any]]
    redeem: Callable[[AsyncSession, str], Awaitable[Any]]
    start: Callable[[Request, AsyncSession, Any, str], Awaitable[str]]
    end: Callable[[Request, AsyncSession, Any], Awaitable[None]]

    @property
    def login_path(self) -> str:
        return f"{self.console.prefix}/login"

    @property
    def callback_path(self) -> str:
        return f"{self.login_path}/oidc/callback"

    @property
    def public(self) -> frozenset[str]:
        """The routes anyone may open: the login pages. Every other route names its role."""
        login = self.login_path
        return frozenset({login, f"{login}/oidc", self.callback_path, f"{login}/{{token}}"})

    @property
    def link(self) -> LinkLogin:
        return LinkLogin(cookie=self.link_cookie, log=self.log)

    @property
    def oidc(self) -> OidcLogin:
        return OidcLogin(
            cookie=self.oidc_cookie,
            callback=self.callback_path,
            login_path=self.login_path,
            refused=lambda request: self.page(request, 400, error=_(self.refused)),
            log=self.log,
            what=self.oidc_what,
        )

    def page(self, request: Request, status: int = 200, **context: object) -> Response:
        """The login page (``{name}_login.html``): ``fresh``, whether the action asked for
        needs a recent login, and ``oidc``, whether OpenID Connect is offered."""
        values: dict[str, object] = {
            "fresh": False,
            "oidc": oidc.enabled(request.app.state.settings),
            **context,
        }
        return self.console.page(request, f"{self.console.name}_login.html", values, status)

    async def logged_in(
        self, request: Request, session: AsyncSession, who: Any, method: str
    ) -> Response:
        """A new session's cookie, and on to home."""
        token = await self.start(request, session, who, method)
        response = self.console.to("/")
        self.console.session_cookie.set(request, response, token)
        return response

    def router(self) -> APIRouter:
        """The login's routes and logout's."""
        router = self.console.router()
        link, by_oidc = self.link, self.oidc
        anyone = Annotated[Any, Depends(self.console.anyone)]

        @router.get("/login", response_class=HTMLResponse)
        async def login(
            request: Request, again: Annotated[str | None, Query(max_length=10)] = None
        ) -> Response:
            """How to log in. ``again=fresh``: the action asked for needs a recent login."""
            return self.page(request, fresh=again == "fresh")

        # Before the link's route, whose path would take "oidc" for a token.
        @router.get("/login/oidc")
        async def login_oidc(request: Request) -> Response:
            """To the organisation's identity provider, with this browser's state, nonce and
            PKCE verifier kept in a short-lived cookie."""
            return await by_oidc.start(request)

        @router.get("/login/oidc/callback")
        async def login_oidc_callback(
            request: Request,
            session: Session,
            code: Annotated[str, Query(max_length=2000)] = "",
            state: Annotated[str, Query(max_length=200)] = "",
        ) -> Response:
            """Back from the identity provider: whom its verified e-mail logs in is logged in;
            anything else is refused, and the pending login is forgotten either way."""

            async def log_in(email: str) -> Response:
                return await self.logged_in(
                    request, session, await self.find(session, email), "oidc"
                )

            return await by_oidc.finish(request, code, state, log_in)

        @router.get("/login/{token}", response_class=HTMLResponse)
        async def login_link(request: Request, token: str) -> Response:
            """A one-time link's page: a button logs in (a link preview or a mail scanner that
            opens the link uses nothing up), from this browser only (``link_login``)."""
            template = "console_login_link.html"
            return link.page(
                request,
                lambda bound: self.console.page(request, template, {"token": token[:100], **bound}),
            )

        @router.post("/login/{token}")
        async def login_with_link(request: Request, token: str, session: Session) -> Response:
            if not await link.bound(request):
                refused = link_login.refused(request, self.login_path)
                return self.page(request, link_login.REFUSED_STATUS, **refused)
            try:
                who = await self.redeem(session, token)
            except Unauthorized:
                error = _(
                    "This login link is not valid: it was used, has expired or is wrong. Ask for "
                    "a new one."
                )
                return link.forget(request, self.page(request, 400, error=error))
            return link.forget(request, await self.logged_in(request, session, who, "link"))

        @router.post("/logout")
        async def logout(request: Request, who: anyone, session: Session) -> Response:
            await self.end(request, session, who)
            response = self.console.to("/login?done=logged-out")
            self.console.session_cookie.clear(request, response)
            return response

        return router


def install(app: FastAPI, routers: Iterable[APIRouter]) -> None:
    """A console's routes, and how a console's refusals are answered: to the login page, or
    the 403 page (a role missing, a form expired)."""
    for each in routers:
        routes.include(app, each)
    app.add_exception_handler(LoginRequired, _login)  # type: ignore[arg-type]
    app.add_exception_handler(RoleRequired, _forbidden)  # type: ignore[arg-type]
    app.add_exception_handler(BadCsrf, _bad_csrf)  # type: ignore[arg-type]


async def _login(request: Request, exc: LoginRequired) -> Response:
    response = exc.console.to("/login" + ("?again=fresh" if exc.fresh else ""))
    if not exc.fresh:
        exc.console.session_cookie.clear(request, response)
    return response


async def _forbidden(request: Request, exc: RoleRequired) -> Response:
    return exc.console.page(request, FORBIDDEN, {"role": exc.role}, 403)


async def _bad_csrf(request: Request, exc: BadCsrf) -> Response:
    error = _("This form has expired or did not come from this page. Reload and try again.")
    return exc.console.page(request, FORBIDDEN, {"error": error, "role": None}, 403)
