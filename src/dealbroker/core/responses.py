"""JSON bodies for responses, serialised once with orjson (UUIDs and UTC datetimes included)."""

import uuid
from typing import Any

import orjson
from fastapi import Request

from dealbroker.core.errors import UnsupportedMediaType

_OPTIONS = orjson.OPT_UTC_Z


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
