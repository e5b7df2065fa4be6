"""The cookies of this service's pages (the consoles' sessions and logins, the e-ID's signing
under way): ``HttpOnly`` and, when the deployment's base URL is https, ``Secure`` with the
``__Host-`` prefix (so no subdomain can set or shadow them)."""

from dataclasses import dataclass
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response


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
