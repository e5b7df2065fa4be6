"""RFC 9457 problem details: one error base and the handlers that render every error.

A service raises an ``AppError`` subclass; the handlers here turn it, Pydantic validation
errors and Starlette's HTTP errors into ``application/problem+json``. Unexpected exceptions are
not caught here: they become a logged 500.
"""

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "https://dealbroker.dev/problems/"

log = logging.getLogger(__name__)


class AppError(Exception):
    """An error with a status, a stable problem type and a human-readable detail."""

    status: int = 400
    title: str = "Bad Request"
    type: str = "bad-request"

    def __init__(
        self,
        detail: str,
        *,
        errors: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors
        self.headers = headers or {}
        self.extra = extra or {}


class BadRequest(AppError):
    pass


class InvalidInput(AppError):
    """Well-formed input that breaks the schema; the status is the endpoint's (400 or 405)."""

    title = "Invalid input"
    type = "invalid-input"


class Unauthorized(AppError):
    status = 401
    title = "Not Authorized"
    type = "unauthorized"


class Forbidden(AppError):
    status = 403
    title = "Not Allowed"
    type = "forbidden"


class NotFound(AppError):
    status = 404
    title = "Not Found"
    type = "not-found"


class Conflict(AppError):
    status = 409
    title = "Conflict"
    type = "conflict"


class UnsupportedMediaType(AppError):
    status = 415
    title = "Unsupported Media Type"
    type = "unsupported-media-type"


class IdempotencyMismatch(AppError):
    status = 422
    title = "Idempotency key reused"
    type = "idempotency-key-reused"


def problem_body(
    status: int, title: str, type_: str, detail: str, instance: str | None = None, **extra: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": TYPE_BASE + type_,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    body.update({k: v for k, v in extra.items() if v is not None})
    return body


def problem_response(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(body), status_code=status, media_type=PROBLEM_JSON, headers=headers
    )


def _invalid_input_status(request: Request) -> int:
    """The status this route gives for schema violations (the interface fixes 405 on some)."""
    route = request.scope.get("route")
    if isinstance(route, APIRoute):
        return int((route.openapi_extra or {}).get("x-invalid-input-status", 400))
    return 400


def _field_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _field_message(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "field required"
    return str(error["msg"])


def install_error_handlers(app: FastAPI) -> None:
    """Register the problem+json renderers on ``app``."""

    @app.exception_handler(AppError)
    async def _app_error(request: Request, exc: AppError) -> Response:
        status = exc.status
        title = exc.title
        if isinstance(exc, InvalidInput):
            status = _invalid_input_status(request)
        body = problem_body(
            status, title, exc.type, exc.detail, request.url.path, errors=exc.errors, **exc.extra
        )
        return problem_response(status, body, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = list(exc.errors())
        if any(e["type"] == "json_invalid" for e in errors):
            detail = next(str(e.get("ctx", {}).get("error", "")) for e in errors)
            body = problem_body(
                400,
                "Bad Request",
                "malformed-json",
                f"Malformed JSON body: {detail}",
                request.url.path,
            )
            return problem_response(400, body)
        if any(e["type"] == "missing" and tuple(e["loc"]) == ("body",) for e in errors):
            body = problem_body(
                400, "Bad Request", "malformed-json", "A JSON body is required.", request.url.path
            )
            return problem_response(400, body)
        only_params = all(e["loc"] and e["loc"][0] in ("query", "path", "header") for e in errors)
        status = 400 if only_params else _invalid_input_status(request)
        fields = [
            {"field": _field_name(tuple(e["loc"])), "message": _field_message(e)} for e in errors
        ]
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        body = problem_body(
            status,
            "Invalid input",
            "invalid-input",
            f"The request does not match the schema: {summary}",
            request.url.path,
            errors=fields,
        )
        return problem_response(status, body)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        titles = {404: "Not Found", 405: "Method Not Allowed", 413: "Content Too Large"}
        title = titles.get(exc.status_code, "Error")
        detail = exc.detail if isinstance(exc.detail, str) else title
        if exc.status_code == 404 and detail == "Not Found":
            detail = "No such resource."
        type_ = title.lower().replace(" ", "-")
        body = problem_body(exc.status_code, title, type_, detail, request.url.path)
        return problem_response(exc.status_code, body, dict(exc.headers or {}))


PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
}


def problem(status: int, title: str, detail: str) -> dict[str, Any]:
    """An OpenAPI ``responses`` entry for a problem+json error, with a truthful example."""
    example = {
        "type": TYPE_BASE + title.lower().replace(" ", "-"),
        "title": title,
        "status": status,
        "detail": detail,
    }
    return {
        "description": title,
        "content": {PROBLEM_JSON: {"schema": PROBLEM_SCHEMA, "example": example}},
    }
