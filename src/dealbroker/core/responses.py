"""JSON bodies for responses, serialised once with orjson (UUIDs and UTC datetimes included),
and the problem responses every router documents alike (their ``responses=`` examples)."""

import uuid
from typing import Any

import orjson
from fastapi import Request

from dealbroker.core.errors import UnsupportedMediaType, problem

_OPTIONS = orjson.OPT_UTC_Z

# The problem responses the routers share, each with the example the service sends.
UNAUTHORIZED = problem(
    401, "Not Authorized", "An access token is required: send Authorization: Bearer <token>."
)
FORBIDDEN = problem(403, "Not Allowed", "This token lacks the scope deals:write.")
MALFORMED = problem(400, "Bad Request", "Malformed JSON body: Expecting value", "malformed-json")
UNSUPPORTED = problem(
    415, "Unsupported Media Type", "The body must be application/json, not text/plain."
)
TOO_LARGE = problem(413, "Content Too Large", "Request body is too large.")
IDEMPOTENCY = problem(
    422,
    "Idempotency key reused",
    "Idempotency-Key 'k1' was already used with a different request; use a new key for a new request.",
)
NOT_FOUND = problem(404, "Not Found", "No deal 3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10.")


def _default(value: Any) -> str:
    # asyncpg returns its own UUID class, which orjson does not know natively.
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dump(payload: Any) -> bytes:
    return orjson.dumps(payload, default=_default, option=_OPTIONS)


async def require_json(request: Request) -> None:
    """Refuse a body that is not declared as JSON (a dependency of every JSON POST)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json" and not (
        content_type.startswith("application/") and content_type.endswith("+json")
    ):
        raise UnsupportedMediaType(
            f"The body must be application/json, not {content_type or 'missing'}."
        )


async def require_json_if_body(request: Request) -> None:
    """For a POST whose body is optional: no body at all is fine; a body must be JSON."""
    if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers:
        await require_json(request)
