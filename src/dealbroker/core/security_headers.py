"""Headers every response carries, whatever produced it.

``X-Content-Type-Options: nosniff`` stops a browser from second-guessing a declared content type
(running a text or JSON body that echoes user input as HTML or script). The request log's
middleware (``request_log.RequestLogMiddleware``), plain ASGI middleware around the whole
application, adds them to every answer as it adds the request id, so no route, page, error
handler or library-served page (the API docs) can forget them; one wrapper of the answer, not
two.
"""

from collections.abc import Iterable

HEADERS = ((b"x-content-type-options", b"nosniff"),)
_NAMES = {name for name, _ in HEADERS}


def secured(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An answer's ``headers`` with ours, which replace any a handler set, so each header
    appears exactly once."""
    return [*((k, v) for k, v in headers if k.lower() not in _NAMES), *HEADERS]
