"""Request ids and access logs, as plain ASGI middleware (no per-request task overhead).

Capability links carry secrets in their path, so the log shows only their prefix; the server's
own access log is switched off for the same reason.
"""

import logging
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("dealbroker.http")
SECRET_PATH_PREFIXES = ("/o/", "/d/")


def loggable_path(path: str) -> str:
    return path[:3] + "…" if path.startswith(SECRET_PATH_PREFIXES) else path


class RequestLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = ""
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                rid = value.decode("latin-1")[:100]
                break
        rid = rid or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "%s %s %s %.1fms rid=%s",
                    scope["method"],
                    loggable_path(scope["path"]),
                    status,
                    (time.perf_counter() - started) * 1000,
                    rid,
                )
