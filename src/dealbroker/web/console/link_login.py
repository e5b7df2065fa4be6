"""A console's one-time login link as the browser goes through it, the same for the back office
and the developer portal: the link's page (a button, so a link preview or a mail scanner that
opens it uses nothing up) and its POST, bound to the browser that opened the page.

Opening the link sets a short-lived cookie holding a random nonce (``HttpOnly``,
``SameSite=Strict``, ``__Host-`` prefixed on https) and puts the same nonce in the page's form.
The POST logs in only when the two match (a double submit): a form on another site posted to
the link (login CSRF, which would log the victim's browser into the attacker's account) carries
no cookie, or not this nonce, and is refused before the link is looked at, so the link is not
used up either. Which page answers is the console's."""

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core.i18n import _
from dealbroker.core.security import same_secret
from dealbroker.web.locale import switch_links
from dealbroker.web.session_cookie import HostCookie

FIELD = "nonce"  # the form's field that carries the nonce
REFUSED_STATUS = 403


def refused(request: Request, login_path: str) -> dict[str, object]:
    """What a console's login page shows a POST not from the link's page in this browser: the
    error, and a language switch to the login page (not to the link, whose page would offer a
    button that logs in to the account of whoever sent the form)."""
    error = _(
        "This login link was not opened in this browser, so nobody was logged in. Open the "
        "link again, in the browser you want to log in with."
    )
    return {"error": error, "languages": switch_links(request, login_path)}


@dataclass(frozen=True)
class LinkLogin:
    """One console's: the nonce's ``cookie`` (``__Host-`` prefixed on https) and the ``log`` a
    refusal goes to."""

    cookie: str
    log: logging.Logger

    @property
    def _cookie(self) -> HostCookie:
        return HostCookie(self.cookie, samesite="strict")

    def page(self, request: Request, show: Callable[[dict[str, object]], Response]) -> Response:
        """The link's page (``show`` renders it with the form's ``nonce``), and this browser's
        cookie with the same nonce, kept as long as a link is valid."""
        nonce = secrets.token_urlsafe(32)
        response = show({FIELD: nonce})
        max_age = request.app.state.settings.operator_link_minutes * 60
        self._cookie.set(request, response, nonce, max_age)
        return response

    async def bound(self, request: Request) -> bool:
        """Whether the POST comes from the page this browser opened: the form's nonce is this
        browser's cookie's. A refusal is logged (no token, no nonce: neither is a secret to
        keep in a log, but neither tells anything either)."""
        form = await request.form(max_files=0, max_fields=5)
        kept = self._cookie.read(request)
        posted = str(form.get(FIELD, ""))
        if kept and len(posted) <= 100 and same_secret(posted, kept):
            return True
        reason = "no cookie of the link's page" if not kept else "another nonce than the cookie's"
        self.log.warning("Login link refused before use: posted with %s", reason)
        return False

    def forget(self, request: Request, response: Response) -> Response:
        """``response`` with the nonce's cookie deleted."""
        self._cookie.clear(request, response)
        return response
