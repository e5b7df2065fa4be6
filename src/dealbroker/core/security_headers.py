"""Headers every response carries, whatever produced it.

``X-Content-Type-Options: nosniff`` stops a browser from second-guessing a declared content type
(running a text or JSON body that echoes user input as HTML or script). It is added here, as
plain ASGI middleware around the whole application, so no route, page, error handler or
library-served page (the API docs) can forget it.
"""

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADERS = ((b"x-content-type-options", b"nosniff"),)
_NAMES = {name for name, _ in HEADERS}


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                # Ours replace any a handler set, so each header appears exactly once.
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _NAMES]
                message["headers"] = [*kept, *HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)
