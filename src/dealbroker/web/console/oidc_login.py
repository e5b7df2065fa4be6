"""A console's OpenID Connect login as the browser goes through it, the same for the back
office and the developer portal: the redirect to the issuer with the pending login in a
short-lived cookie, and the callback, which forgets that cookie whatever the outcome. The
protocol is ``operators.oidc``'s; whom the verified e-mail logs in is the console's."""

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dealbroker.core.errors import Unauthorized
from dealbroker.operators import oidc
from dealbroker.web.render import PRIVATE
from dealbroker.web.session_cookie import HostCookie

PENDING_SECONDS = 600  # how long a browser may take at the issuer


@dataclass(frozen=True)
class OidcLogin:
    """One console's: the pending login's ``cookie`` (``__Host-`` prefixed on https), the
    ``callback`` path, the ``login_path`` (no issuer configured), the ``refused`` page, and the
    ``log`` a refusal's reason goes to, naming ``what`` was refused."""

    cookie: str
    callback: str
    login_path: str
    refused: Callable[[Request], Response]
    log: logging.Logger
    what: str = "login"

    @property
    def _cookie(self) -> HostCookie:
        return HostCookie(self.cookie)

    async def start(self, request: Request) -> Response:
        """To the issuer, with this browser's state, nonce and PKCE verifier in the cookie."""
        settings = request.app.state.settings
        if not oidc.enabled(settings):
            return RedirectResponse(self.login_path, status_code=303, headers=PRIVATE)
        try:
            url, pending = await oidc.start(settings, self.callback)
        except oidc.OidcRefused as exc:
            self.log.warning("OpenID Connect login not started: %s", exc.reason)
            return self.refused(request)
        response = RedirectResponse(url, status_code=303, headers=PRIVATE)
        self._cookie.set(request, response, pending.cookie(), PENDING_SECONDS)
        return response

    async def finish(
        self,
        request: Request,
        code: str,
        state: str,
        log_in: Callable[[str], Awaitable[Response]],
    ) -> Response:
        """Back from the issuer: ``log_in``'s answer for the verified e-mail address (it
        raises ``Unauthorized`` for one that may not log in), else the ``refused`` page."""
        settings = request.app.state.settings
        pending = oidc.Pending.from_cookie(self._cookie.read(request))
        try:
            if not oidc.enabled(settings):
                raise oidc.OidcRefused("OpenID Connect is not configured")
            email = await oidc.finish(settings, pending, code, state, self.callback)
            response = await log_in(email)
        except (oidc.OidcRefused, Unauthorized) as exc:
            reason = getattr(exc, "reason", exc)
            self.log.warning("OpenID Connect %s refused: %s", self.what, reason)
            response = self.refused(request)
        self._cookie.clear(request, response)
        return response
