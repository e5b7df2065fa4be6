"""Request ids, access logs and the security headers, as plain ASGI middleware (no per-request
task overhead), the outermost of the application's.

What a request sends reaches the log only through ``loggable`` (any text) and
``loggable_path`` (a path):

- Control characters are escaped: a path with an encoded newline (``/x%0a2026-… rid=forged``)
  would otherwise write a forged line of its own.
- Capability links carry secrets in their path, so those segments are masked. Query strings
  carry them too (``/pay/<token>?return=/o/<token>?offer=…``), so they are never logged; the
  server's own access log, which would log them in full, is switched off.
"""

import logging
import os
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dealbroker.core import logs, security_headers

log = logging.getLogger("dealbroker.http")
_access = logs.LineWriter(log)

# The paths that are capabilities: the seller's page (/d/<deal id>/<signature>), the buyer's
# offer link (/o/<token>), the checkout (/pay/<token>) and a sandbox mailbox
# (/sandbox/mailbox/<deal id>/…/<signature>), and the one-time login links of the developer
# portal (/portal/login/<token>) and the back office (/back-office/login/<token>); their OpenID
# Connect paths (…/login/oidc/callback) are masked with them, which costs nothing but the
# words. Every segment after one of these prefixes is
# masked, ids too (an id with its signature opens the page), except a form action's name
# after ``/-/``: a secret added to such a path later is masked without a change here.
CAPABILITY_PREFIXES: tuple[tuple[str, ...], ...] = (
    ("d",),
    ("o",),
    ("pay",),
    ("sandbox", "mailbox"),
    ("portal", "login"),
    ("back-office", "login"),
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


# A path that ``loggable_path`` leaves as it is, and ``logs.redact_plain_path`` too: segments
# of lower-case letters, digits, "." and "-" (a plain path's characters but "_" and "…"), each
# shorter than a random token (40), and no capability path in it (``_TOUCHED``: the prefixes
# ``loggable_path`` masks after, and the paths ``logs.redact`` masks anywhere in a text).
_UNTOUCHED = re.compile(r"(?:/[a-z0-9.\-]{0,39})+")
_TOUCHED = re.compile(r"/(?:d|o|pay|sandbox/mailbox)/|^/(?:portal|back-office)/login/")

METHODS = frozenset(
    ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
)


def access_line(method: str, path: str, status: int, ms: float, rid: str) -> str:
    """The access line of a request: exactly what ``logs.redact`` makes of
    ``"%s %s %s %.1fms rid=%s" % (loggable(method), loggable_path(path), status, ms, rid)``
    (``rid`` already ``loggable``), marked ``logs.Redacted``, or that text for the log's filter
    to redact whole.

    Redacting the whole line cost most of the access line's CPU, most of that the digit
    patterns running over the status and the duration, which are ours. A known method, a three-digit status and a
    duration cannot start, end or take part in a match of any pattern; neither the path nor the
    request id can reach across the spaces and the "rid=" around them when the path is plain
    (``logs.PLAIN_PATH``) and does not end in "bearer" (which would read the status as a bearer
    secret), and the request id is ASCII (no "ſ", "K", "İ" or "ı", which match a pattern's
    ASCII letters where the pattern's gating word is absent). So then only the path and the
    request id are redacted, each alone ("rid=" kept before the id: it stops a phone number's
    start as it does in the line). Anything else takes the whole line's redaction;
    ``tests/core/test_access_line.py`` holds the two equal.

    Most paths (the API's, with their ids) are ``_UNTOUCHED``: neither the masking nor the
    path's redaction can change one, and both are skipped (about half the line's cost)."""
    if _UNTOUCHED.fullmatch(path) is None or _TOUCHED.search(path) is not None:
        path = loggable_path(path)
        shown = None
    else:
        shown = path
    if (
        method not in METHODS
        or type(status) is not int
        or not 100 <= status <= 999
        or not 0 <= ms < 1e9
        or not rid.isascii()
        or path.endswith("bearer")
        or (shown is None and logs.PLAIN_PATH.fullmatch(path) is None)
    ):
        # The line as it has always been formatted, whatever the types.
        return "%s %s %s %.1fms rid=%s" % (loggable(method), path, status, ms, rid)  # noqa: UP031
    if shown is None:
        shown = logs.redact_plain_path(path)
    tail = logs.redact_request_id(rid)
    return logs.Redacted(f"{method} {shown} {status} {ms:.1f}ms rid={tail}")


# Request ids made ahead, taken from the end: one read of the system's random source for
# ``_AHEAD`` of them, not one per request (a system call each). A forked child starts with
# none, so no two processes hand out the same.
_AHEAD = 256
_ids: list[str] = []
os.register_at_fork(after_in_child=_ids.clear)


def new_request_id() -> str:
    """A request id of our own: a random (version 4) UUID's 32 hex digits, as ``uuid.uuid4().hex``
    makes them (from ``os.urandom``), made without the ``UUID`` object."""
    if not _ids:
        random = os.urandom(16 * _AHEAD)
        for at in range(0, len(random), 16):
            raw = bytearray(random[at : at + 16])
            raw[6] = raw[6] & 0x0F | 0x40  # version 4
            raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
            _ids.append(raw.hex())
    return _ids.pop()


# Where the request log's middleware leaves the status of the answer started, in the request's
# ``state`` beside its ``request_id``, for the middleware inside it that records it too
# (``integrations.request_log.RecordRequests``).
STATUS = "response_status"
# Set in the request's ``state`` by a route whose answer is not worth a row of the API's request
# log (``integrations.request_log``): an events poll that found nothing new.
NOT_RECORDED = "not_recorded"


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
        rid = rid or new_request_id()
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        context = logs.start(scope, rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = state[STATUS] = message["status"]
                message["headers"] = [
                    *security_headers.secured(message.get("headers", ())),
                    (b"x-request-id", rid.encode("latin-1")),
                ]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except BaseException as exc:
            logs.mark_escaped(exc)
            raise
        finally:
            if log.isEnabledFor(logging.INFO):
                ms = (time.perf_counter() - started) * 1000
                _access.info(access_line(scope["method"], scope["path"], status, ms, rid))
            logs.end(context)
