"""Request ids and access logs, as plain ASGI middleware (no per-request task overhead).

What a request sends reaches the log only through ``loggable`` (any text) and
``loggable_path`` (a path):

- Control characters are escaped: a path with an encoded newline (``/x%0a2026-… rid=forged``)
  would otherwise write a forged line of its own.
- Capability links carry secrets in their path, so those segments are masked. Query strings
  carry them too (``/pay/<token>?return=/o/<token>?offer=…``), so they are never logged; the
  server's own access log, which would log them in full, is switched off.
"""

import logging
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbroker.core import logs

log = logging.getLogger("dealbroker.http")

# The paths that are capabilities: the seller's page (/d/<deal id>/<signature>), the buyer's
# offer link (/o/<token>), the checkout (/pay/<token>) and a sandbox mailbox
# (/sandbox/mailbox/<deal id>/…/<signature>), and a developer portal login link
# (/portal/login/<token>). Every segment after one of these prefixes is
# masked, ids too (an id with its signature opens the page), except a form action's name
# after ``/-/``: a secret added to such a path later is masked without a change here.
CAPABILITY_PREFIXES: tuple[tuple[str, ...], ...] = (
    ("d",),
    ("o",),
    ("pay",),
    ("sandbox", "mailbox"),
    ("portal", "login"),
)
MASK = "…"
MAX_REQUEST_ID = 100


def loggable(text: str) -> str:
    """``text`` with every character that is not printable escaped as Python writes it
    (``\\n``, ``\\x1b``, ``\\u2028``), and the backslash itself, so an escape cannot be faked."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(
        char if char.isprintable() and char != "\\" else char.encode("unicode_escape").decode()
        for char in text
    )


def loggable_path(path: str) -> str:
    """``path`` as the log may show it: a capability path's segments masked (but a form
    action's name, e.g. ``/d/…/…/-/sign``), every control character escaped.

    The one masking function for every path that is logged."""
    segments = path.split("/")
    for prefix in CAPABILITY_PREFIXES:
        if tuple(segments[1 : 1 + len(prefix)]) == prefix:
            for i in range(1 + len(prefix), len(segments)):
                if segments[i] != "-" and segments[i - 1] != "-":
                    segments[i] = MASK
            break
    return loggable("/".join(segments))


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
                # Escaped as well as logged: it is echoed in the response's header too.
                rid = loggable(value.decode("latin-1")[:MAX_REQUEST_ID])
                break
        rid = rid or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        context = logs.start(scope, rid)
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
        except BaseException as exc:
            logs.mark_escaped(exc)
            raise
        finally:
            if log.isEnabledFor(logging.INFO):
                log.info(
                    "%s %s %s %.1fms rid=%s",
                    loggable(scope["method"]),
                    loggable_path(scope["path"]),
                    status,
                    (time.perf_counter() - started) * 1000,
                    rid,
                )
            logs.end(context)
