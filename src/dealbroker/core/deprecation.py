"""Operations that are going away say so, in the document and on every answer.

An operation is marked once, where it is declared, with ``**deprecated(since=..., sunset=...)``
among its route's arguments: the OpenAPI document shows it ``deprecated: true`` with the dates
as ``x-deprecation``, and ``DeprecationMiddleware`` adds to each of its answers, errors
included:

- ``Deprecation: @<seconds since the epoch>`` (RFC 9745): since when it is deprecated;
- ``Sunset: <HTTP date>`` (RFC 8594): when it may stop answering, if that is decided;
- ``Link: </docs>; rel="deprecation"`` (RFC 9745 section 3): where the change is explained,
  and ``rel="successor-version"`` (RFC 5829) for the operation to use instead, when given.

What is deprecated, and for how long it keeps answering, is docs/versioning.md's policy.
"""

from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MARKER = "x-deprecation"
# The deployment's API reference, where a deprecated operation is shown struck through with its
# description saying what to use instead (a relative reference, resolved against the request).
REFERENCE = "/docs"
_NAMES = {b"deprecation", b"sunset"}


def deprecated(
    since: datetime,
    sunset: datetime | None = None,
    successor: str | None = None,
    explained: str = REFERENCE,
) -> dict[str, Any]:
    """The route arguments that mark an operation deprecated since ``since`` (and, if given,
    answering until ``sunset``; ``successor`` the path to use instead)."""
    if since.tzinfo is None or (sunset is not None and sunset.tzinfo is None):
        raise ValueError("deprecation dates must be timezone-aware")
    if sunset is not None and sunset <= since:
        raise ValueError("the sunset must come after the deprecation")
    marker: dict[str, Any] = {"since": _iso(since), "explained": explained}
    if sunset is not None:
        marker["sunset"] = _iso(sunset)
    if successor is not None:
        marker["successor"] = successor
    return {"deprecated": True, "openapi_extra": {MARKER: marker}}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def headers(marker: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """The response headers of an operation marked with ``marker``."""
    since = _parse(marker["since"])
    out = [(b"deprecation", f"@{int(since.timestamp())}".encode())]
    if "sunset" in marker:
        out.append((b"sunset", format_datetime(_parse(marker["sunset"]), usegmt=True).encode()))
    links = [f'<{marker["explained"]}>; rel="deprecation"; type="text/html"']
    if "successor" in marker:
        links.append(f'<{marker["successor"]}>; rel="successor-version"')
    out += [(b"link", link.encode()) for link in links]
    return out


def _marks(routes: Any) -> bool:
    """Whether any of ``routes``, or of the routes mounted among them, is marked."""
    for route in routes:
        marker = (getattr(route, "openapi_extra", None) or {}).get(MARKER)
        if marker is not None and getattr(route, "deprecated", False):
            return True
        if _marks(getattr(route, "routes", None) or ()):
            return True
    return False


class DeprecationMiddleware:
    """Adds the deprecation headers to every answer of a marked route (the route the router
    matched is in the scope by the time the answer starts).

    While the application has no marked route, answers pass untouched (no wrapper around
    each): whether it has one is looked up again whenever its routes' count changes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._looked_up: tuple[int, int] | None = None  # the routes' list and count looked at
        self._marked = True

    def _any_marked(self, scope: Scope) -> bool:
        routes = getattr(scope.get("app"), "routes", None)
        if routes is None:
            return True  # not known here: every answer is looked at
        seen = (id(routes), len(routes))
        if seen != self._looked_up:
            self._marked, self._looked_up = _marks(routes), seen
        return self._marked

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._any_marked(scope):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                route = scope.get("route")
                marker = (getattr(route, "openapi_extra", None) or {}).get(MARKER)
                if marker is not None and getattr(route, "deprecated", False):
                    kept = [
                        (k, v) for k, v in message.get("headers", []) if k.lower() not in _NAMES
                    ]
                    message["headers"] = [*kept, *headers(marker)]
            await send(message)

        await self.app(scope, receive, send_with_headers)
