"""A cap on request body size, answered as problem+json like every other error.

A declared ``Content-Length`` over the cap is refused before anything is read; a chunked body is
counted as it streams and refused once it passes the cap (the error surfaces through the app's
own exception handlers).
"""

import re

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbroker.core.errors import problem_body, problem_response

DETAIL = "The request body is larger than {limit} bytes."


class BodyLimitMiddleware:
    """``max_bytes`` for every request, except the paths ``larger`` names (a pattern matched
    against the whole path, and that route's own cap: the evidence photo uploads)."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, larger: tuple[tuple[str, int], ...] = ()
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.larger = tuple((re.compile(pattern), cap) for pattern, cap in larger)

    def _cap(self, path: str) -> int:
        for pattern, cap in self.larger:
            if pattern.fullmatch(path):
                return cap
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self._cap(scope["path"])
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit() or int(value) > max_bytes:
                    detail = DETAIL.format(limit=max_bytes)
                    body = problem_body(
                        413, "Content Too Large", "content-too-large", detail, scope["path"]
                    )
                    await problem_response(413, body, {"Connection": "close"})(scope, receive, send)
                    return
                break
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise HTTPException(413, DETAIL.format(limit=max_bytes))
            return message

        await self.app(scope, counting_receive, send)
