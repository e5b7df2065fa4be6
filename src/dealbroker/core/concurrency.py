"""The concurrency cap: a process answers at most so many requests at once, and refuses the
next ones at once with 503 and ``Retry-After`` rather than queueing them behind a full
database pool.

Plain ASGI middleware: a counter of the requests in flight in this process, no lock (the
event loop runs one coroutine at a time between awaits). The health checks pass whatever the
count, so a busy instance still tells its load balancer it is alive and ready; another
instance, or this one a second later, takes the refused requests.
"""

from starlette.types import ASGIApp, Receive, Scope, Send

from dealbroker.core.errors import problem_body, problem_response

# The paths a load balancer or supervisor probes: never refused, never counted.
HEALTH_PATHS = frozenset({"/ping", "/healthz", "/readyz"})
RETRY_AFTER_SECONDS = 1


class ConcurrencyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_in_flight: int) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in HEALTH_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            await self._refuse(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = problem_body(
            503,
            "Service Unavailable",
            "service-unavailable",
            "The service is answering as many requests as it can; try again shortly.",
            scope["path"],
        )
        response = problem_response(503, body, {"Retry-After": str(RETRY_AFTER_SECONDS)})
        await response(scope, receive, send)
