"""A console's session cookie and the CSRF token of its forms, the same for the back office
and the developer portal (each names its own cookie).

The cookie is ``HttpOnly``, ``SameSite=Lax`` and, when the deployment's base URL is https,
``Secure`` with the ``__Host-`` prefix (so no subdomain can set or shadow it). Every form
carries a CSRF token derived from the session's own token (an HMAC keyed by it): a page of
another site can neither read nor compute it.
"""

from dataclasses import dataclass
from typing import Literal

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core.security import same_secret, sign


class BadCsrf(Exception):
    """A console's form posted without its session's CSRF token; each console raises its own
    subclass, answered by its own page."""


def secure(request: Request) -> bool:
    return bool(request.app.state.settings.base_url.startswith("https://"))


@dataclass(frozen=True)
class HostCookie:
    """A cookie of this service's pages: ``HttpOnly``, ``Path=/``, its ``samesite`` and, when the
    base URL is https, ``Secure`` with the ``__Host-`` prefix on its ``name``. Cleared with the
    attributes it was set with: a ``__Host-`` cookie is only replaced by a ``Secure`` one."""

    name: str
    samesite: Literal["lax", "strict"] = "lax"

    def name_for(self, request: Request) -> str:
        return f"__Host-{self.name}" if secure(request) else self.name

    def read(self, request: Request) -> str:
        return request.cookies.get(self.name_for(request), "")

    def set(
        self, request: Request, response: Response, value: str, max_age: int | None = None
    ) -> None:
        """``max_age`` in seconds; None: a browser session cookie."""
        response.set_cookie(
            self.name_for(request),
            value,
            max_age=max_age,
            httponly=True,
            samesite=self.samesite,
            secure=secure(request),
            path="/",
        )

    def clear(self, request: Request, response: Response) -> None:
        response.delete_cookie(
            self.name_for(request),
            httponly=True,
            samesite=self.samesite,
            secure=secure(request),
            path="/",
        )


@dataclass(frozen=True)
class SessionCookie:
    """One console's cookie: ``name`` (``__Host-`` prefixed on https), the purpose its CSRF
    tokens are signed for, and the refusal a form without one raises."""

    name: str
    csrf_purpose: str
    bad_csrf: type[BadCsrf] = BadCsrf

    @property
    def cookie(self) -> HostCookie:
        return HostCookie(self.name)

    def cookie_name(self, request: Request) -> str:
        return self.cookie.name_for(request)

    def token(self, request: Request) -> str:
        return self.cookie.read(request)

    def set(self, request: Request, response: Response, token: str) -> None:
        """The session's cookie: a browser session cookie (no Max-Age), the server ends it."""
        self.cookie.set(request, response, token)

    def clear(self, request: Request, response: Response) -> None:
        self.cookie.clear(request, response)

    def csrf_token(self, request: Request) -> str:
        """The CSRF token of this request's session, for the forms of its page."""
        return sign(self.token(request), self.csrf_purpose)

    async def checked_form(self, request: Request, files: int = 0) -> FormData:
        """The posted form, refused (``BadCsrf``) unless it carries this session's CSRF token.
        Small forms only: at most 50 fields, and ``files`` files (none unless the route takes
        an upload)."""
        form = await request.form(max_files=files, max_fields=50)
        if not self.token(request) or not same_secret(
            str(form.get("csrf", "")), self.csrf_token(request)
        ):
            raise self.bad_csrf()
        return form
