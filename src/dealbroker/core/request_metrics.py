"""Request metrics, as plain ASGI middleware: one histogram observation per request.

The label is the route's template (``/deals/v1/deals/{dealId}``, ``/static/{path}``), never the
path: capability links carry secrets in their paths, and raw paths would make
a series of every deal. A request no route matched is ``UNMATCHED``; a method outside HTTP's
usual ones is ``other``, so a client cannot grow the label sets.
"""

import time
from typing import Any

from prometheus_client.metrics import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbroker.core.metrics import http_request_duration

UNMATCHED = "unmatched"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RouteTemplates:
    """The template of the route that took a request, looked up once routing is done."""

    def __init__(self) -> None:
        self._by_endpoint: dict[Any, str] | None = None

    def __call__(self, scope: Scope) -> str:
        """FastAPI's router leaves its own routes in the scope; a mount (static files) or a
        plain Starlette route (the OpenAPI document) leaves only its endpoint, looked up among
        the application's routes."""
        route = scope.get("route")
        if route is not None:
            return str(route.path_format)
        endpoint = scope.get("endpoint")
        if endpoint is None or "router" not in scope:
            return UNMATCHED
        if self._by_endpoint is None:
            self._by_endpoint = {
                getattr(r, "endpoint", None) or r.app: r.path_format
                for r in scope["router"].routes
                if hasattr(r, "path_format") and (hasattr(r, "endpoint") or hasattr(r, "app"))
            }
        return self._by_endpoint.get(endpoint, UNMATCHED)


class NotingStatus:
    """An ASGI ``send`` that passes every message on and notes the response's ``status``: 500
    until a response starts (an error no handler answered)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status = 500

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self.send(message)


class RequestMetricsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # Label children by (method, route, status): a dict lookup instead of the client's
        # locked one on every request. Bounded by the routes, methods and status codes.
        self._series: dict[tuple[str, str, int], Histogram] = {}
        self.template = RouteTemplates()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        noting = NotingStatus(send)
        try:
            await self.app(scope, receive, noting)
        finally:
            template = self.template(scope)
            method = scope["method"] if scope["method"] in METHODS else "other"
            key = (method, template, noting.status)
            series = self._series.get(key)
            if series is None:
                series = http_request_duration.labels(method, template, str(noting.status))
                self._series[key] = series
            series.observe(time.perf_counter() - started)
