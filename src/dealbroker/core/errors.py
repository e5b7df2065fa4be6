"""RFC 9457 problem details: one error base and the handlers that render every error.

Services raise ``DomainError`` subclasses, which know no HTTP; ``PROBLEMS`` maps each to its
status in this one place, and the handlers here turn them, Pydantic validation errors and
Starlette's HTTP errors into ``application/problem+json``. Unexpected exceptions are
not caught here: they become a logged 500.
"""

import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match

from dealbroker.core import logs

PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "https://dealbroker.dev/problems/"
# The request id the documented examples carry (a request's own is its X-Request-Id).
EXAMPLE_REQUEST_ID = "5f0c6e2a9b7d4e1f8a3c2b6d9e4f1a7c"

log = logging.getLogger(__name__)


_T = TypeVar("_T")


class DomainError(Exception):
    """A rule of the service refused a request. Services raise these and know no HTTP:
    ``PROBLEMS`` below is the one place that maps each kind to a status, a title and a
    problem type (an endpoint whose code the interface fixes overrides it, see
    ``ERROR_STATUS``)."""

    def __init__(
        self,
        detail: str,
        *,
        errors: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
        page_detail: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors
        self.headers = headers or {}
        self.extra = extra or {}
        # What a seller's or buyer's page says instead of ``detail``, where that is written for
        # integrators (in English, with raw statuses): in the page's language (``_``).
        self.page_detail = page_detail

    @property
    def status(self) -> int:
        """The HTTP status this error answers with where no endpoint fixes another."""
        return problem_kind(self).status


class BadRequest(DomainError):
    """The request cannot be acted on as it stands (a missing party, an unusable value)."""


class FieldError(BadRequest):
    """One value a person gave cannot be used, and the refusal is about that value alone:
    ``field`` names it as the form (or the request) does, so a page shows the reason next to
    that field, with what was typed kept, and a problem lists it in ``errors``. ``message`` is
    the short form for ``errors``; by default the detail."""

    def __init__(self, field: str, detail: str, message: str | None = None) -> None:
        super().__init__(detail, errors=[{"field": field, "message": message or detail}])
        self.field = field


class UnknownReference(BadRequest):
    """A request body names something the caller has no such thing of (a deal, an offer; one
    of another integration is unknown too): the input is at fault, not the path, so it is the
    interface's "Invalid input", never a 404 of the resource requested."""


class InvalidInput(DomainError):
    """Well-formed input that breaks the schema; the status is the endpoint's (400 or 405)."""


class Unauthorized(DomainError):
    """No credential, or one that is not valid."""


class Forbidden(DomainError):
    """A valid credential without the permission the request needs."""


class DealSuspended(Forbidden):
    """The deal's integration is disabled: its seller and buyer may see the deal, not act on it."""


class NotFound(DomainError):
    """No such thing, or one that belongs to another integration (never told apart)."""


def found(thing: _T | None, detail: str) -> _T:
    """``thing``, as a lookup returned it; NotFound saying ``detail`` when there is none."""
    if thing is None:
        raise NotFound(detail)
    return thing


class Conflict(DomainError):
    """The current state of a deal, an offer or a payment does not allow the request."""


class IllegalTransition(Conflict):
    """The lifecycle table has no transition from the deal's status for this trigger and actor."""


class NotTakingOffers(Conflict):
    """The deal takes no offers now: not Draft or Ad, no seller email, or an offer approved.
    (The interface fixes 400 for it on the offer link and the dealOffer trigger.)"""


class StaleDeal(Conflict):
    """The deal changed since the caller read it (another request won the race, or a page was
    out of date); nothing was changed."""


class UnsupportedMediaType(DomainError):
    """The body is not declared as JSON."""


class MalformedJson(BadRequest):
    """The body is declared as JSON but is none (it does not parse, or is empty). Raised by
    no service: the request validation's handler answers it, with the route's status (the
    interface's 405 on create deal), as the domain errors are."""


class IdempotencyMismatch(DomainError):
    """An Idempotency-Key reused with a different request."""


class TooManyRequests(DomainError):
    """The caller has made more requests than its rate limit allows; ``Retry-After`` says
    when it may go on."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)})


class Unavailable(DomainError):
    """A part the request needs is not available (a payment provider, the database)."""


@dataclass(frozen=True)
class ProblemKind:
    status: int
    title: str
    type: str


# The one map from domain errors to HTTP. Looked up along the class hierarchy, most specific
# first, so a new subclass answers as its parent until it is given a line of its own.
PROBLEMS: dict[type[DomainError], ProblemKind] = {
    BadRequest: ProblemKind(400, "Bad Request", "bad-request"),
    FieldError: ProblemKind(400, "Bad Request", "bad-request"),
    InvalidInput: ProblemKind(400, "Invalid input", "invalid-input"),
    UnknownReference: ProblemKind(400, "Invalid input", "unknown-reference"),
    Unauthorized: ProblemKind(401, "Not Authorized", "unauthorized"),
    Forbidden: ProblemKind(403, "Not Allowed", "forbidden"),
    DealSuspended: ProblemKind(403, "Not Allowed", "deal-suspended"),
    NotFound: ProblemKind(404, "Not Found", "not-found"),
    Conflict: ProblemKind(409, "Conflict", "conflict"),
    IllegalTransition: ProblemKind(409, "Conflict", "illegal-transition"),
    NotTakingOffers: ProblemKind(409, "Conflict", "not-taking-offers"),
    StaleDeal: ProblemKind(409, "Conflict", "stale-deal"),
    UnsupportedMediaType: ProblemKind(415, "Unsupported Media Type", "unsupported-media-type"),
    MalformedJson: ProblemKind(400, "Bad Request", "malformed-json"),
    IdempotencyMismatch: ProblemKind(422, "Idempotency key reused", "idempotency-key-reused"),
    TooManyRequests: ProblemKind(429, "Too Many Requests", "rate-limited"),
    Unavailable: ProblemKind(503, "Service Unavailable", "service-unavailable"),
}
# A route whose codes the interface fixes names the status an error kind answers there, e.g.
# ``openapi_extra={ERROR_STATUS: {"InvalidInput": 405}}`` on create deal.
ERROR_STATUS = "x-error-status"


def problem_kind(exc: DomainError) -> ProblemKind:
    for cls in type(exc).__mro__:
        if cls in PROBLEMS:
            return PROBLEMS[cls]
    return ProblemKind(400, "Bad Request", "bad-request")


def problem_body(
    status: int, title: str, type_: str, detail: str, instance: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A problem+json body. Inside a request it carries the request's id as ``requestId`` (the
    ``X-Request-Id`` header's value), so an integrator can quote any error to support."""
    body: dict[str, Any] = {
        "type": TYPE_BASE + type_,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if instance:
        body["instance"] = instance
    body.update({k: v for k, v in extra.items() if v is not None})
    if "requestId" not in body and (request_id := logs.request_id()):
        body["requestId"] = request_id
    return body


def problem_response(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps(body), status_code=status, media_type=PROBLEM_JSON, headers=headers
    )


def _route_status(request: Request, kind: type[DomainError], default: int) -> int:
    """The status this route answers ``kind`` with: its own where the interface fixes one."""
    route = request.scope.get("route")
    if isinstance(route, APIRoute):
        fixed = (route.openapi_extra or {}).get(ERROR_STATUS, {})
        for cls in kind.__mro__:
            if cls.__name__ in fixed:
                return int(fixed[cls.__name__])
    return default


def _invalid_input_status(request: Request) -> int:
    """The status this route gives for schema violations (the interface fixes 405 on some)."""
    return _route_status(request, InvalidInput, 400)


def _field_name(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _field_message(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "field required"
    return str(error["msg"])


def domain_problem(request: Request, exc: DomainError) -> Response:
    """``exc`` as problem+json, with the status ``request``'s route answers its kind with."""
    kind = problem_kind(exc)
    status = _route_status(request, type(exc), kind.status)
    body = problem_body(
        status,
        title_for(kind.type, status),
        kind.type,
        exc.detail,
        request.url.path,
        errors=exc.errors,
        **exc.extra,
    )
    return problem_response(status, body, exc.headers)


def install_error_handlers(app: FastAPI) -> None:
    """Register the problem+json renderers on ``app``."""

    @app.exception_handler(DomainError)
    async def _domain_error(request: Request, exc: DomainError) -> Response:
        return domain_problem(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = list(exc.errors())
        malformed = None
        if any(e["type"] == "json_invalid" for e in errors):
            reason = next(str(e.get("ctx", {}).get("error", "")) for e in errors)
            malformed = f"Malformed JSON body: {reason}"
        elif any(e["type"] == "missing" and tuple(e["loc"]) == ("body",) for e in errors):
            malformed = "A JSON body is required."
        if malformed is not None:
            return domain_problem(request, MalformedJson(malformed))
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

    app.add_exception_handler(StarletteHTTPException, http_problem)  # type: ignore[arg-type]


# What FastAPI's handler raises for a body it cannot decode before parsing it (not UTF-8).
_UNREADABLE_BODY = "There was an error parsing the body"


async def http_problem(request: Request, exc: StarletteHTTPException) -> Response:
    """Starlette's own errors (no route, wrong method, body too large) as problem+json; a body
    FastAPI could not decode as JSON text is malformed JSON, as one that does not parse."""
    if exc.status_code == 400 and exc.detail == _UNREADABLE_BODY:
        return domain_problem(request, MalformedJson("Malformed JSON body: it is not UTF-8 text."))
    titles = {404: "Not Found", 405: "Method Not Allowed", 413: "Content Too Large"}
    title = titles.get(exc.status_code, "Error")
    detail = exc.detail if isinstance(exc.detail, str) else title
    if exc.status_code == 404 and detail == "Not Found":
        detail = "No such resource."
    type_ = title.lower().replace(" ", "-")
    body = problem_body(exc.status_code, title, type_, detail, request.url.path)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return problem_response(exc.status_code, body, headers)


def _allowed_methods(request: Request) -> str:
    """Every method the path answers. Starlette's 405 names only the first route that matched
    the path, and a path often has several (GET and POST of /deals/v1/deals are two routes)."""
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.router.routes):
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


def server_error_problem(request: Request) -> Response:
    """A bug's answer: problem+json with the request id, which the log line carries too."""
    request_id = request.scope.get("state", {}).get("request_id", "")
    body = problem_body(
        500,
        "Internal Server Error",
        "internal-server-error",
        f"Something went wrong on our side. Request id: {request_id}.",
        request.url.path,
        requestId=request_id or None,
    )
    return problem_response(500, body)


# The one problem+json schema every error response of the document references.
PROBLEM_REF = "#/components/schemas/Problem"
PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "An RFC 9457 problem: what went wrong, for a program (`type`) and a person "
    "(`title`, `detail`); for field errors, `errors` lists each field and why.",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri", "description": "The kind of problem."},
        "title": {"type": "string"},
        "status": {"type": "integer", "description": "The HTTP status, repeated."},
        "detail": {"type": "string"},
        "instance": {"type": "string", "description": "The request's path."},
        "errors": {"type": "array", "items": {"$ref": "#/components/schemas/ProblemFieldError"}},
        "requestId": {
            "type": "string",
            "description": "The request's id, as in its `X-Request-Id` header: quote it to "
            "support. On every problem answered to a request.",
        },
        "currentStatus": {"type": "string", "description": "On a 409: the deal's status now."},
        "allowedStatuses": {
            "type": "array",
            "items": {"type": "string"},
            "description": "On an illegal status change: the statuses allowed from here.",
        },
        "paymentStatus": {"type": "string", "description": "On a 409: the payment's status."},
    },
}
PROBLEM_FIELD_ERROR_SCHEMA: dict[str, Any] = {
    "title": "ProblemFieldError",
    "type": "object",
    "required": ["field", "message"],
    "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
}

# Every problem type this service sends, with its title: the domain errors' (``PROBLEMS``), the
# request validation's and Starlette's own (``http_problem``), and the last-resort ones.
PROBLEM_TYPES: dict[str, str] = {
    **{kind.type: kind.title for kind in PROBLEMS.values()},
    "malformed-json": "Bad Request",
    "invalid-input": "Invalid input",
    "method-not-allowed": "Method Not Allowed",
    "content-too-large": "Content Too Large",
    "internal-server-error": "Internal Server Error",
    "service-unavailable": "Service Unavailable",
}
# The status each domain error kind answers unless a route fixes another (``ERROR_STATUS``).
_USUAL_STATUS: dict[str, int] = {kind.type: kind.status for kind in PROBLEMS.values()}


def title_for(type_: str, status: int) -> str:
    """The title a ``type_`` problem carries when answered with ``status``. A title that is
    the phrase of its kind's usual status ("Conflict") gives way to the interface's label of
    the status a route answers instead, or that status's phrase: the interface's 400 for a deal
    that takes no offers is titled "Bad Request", never "Conflict", and its 405 for a body that
    is not JSON "Invalid input". A title of its own ("Invalid input") stays."""
    title = PROBLEM_TYPES[type_]
    usual = _USUAL_STATUS.get(type_)
    if usual is not None and status != usual and title == HTTPStatus(usual).phrase:
        return INTERFACE_TITLES.get(status) or HTTPStatus(status).phrase
    return title


# The interface's label of a status a route answers instead of an error's usual one: its 405 is
# "Invalid input" wherever it lists it (never "Method Not Allowed", which is Starlette's own).
INTERFACE_TITLES = {405: "Invalid input"}


# A documented error's default type, by its title: where types share a title ("Not Allowed",
# "Conflict"), the general one, listed first; name a specific one with ``type_``.
_TYPE_OF_TITLE: dict[str, str] = {}
for _type, _title in PROBLEM_TYPES.items():
    _TYPE_OF_TITLE.setdefault(_title, _type)


def problem(
    status: int, title: str, detail: str, type_: str | None = None, label: str | None = None
) -> dict[str, Any]:
    """An OpenAPI ``responses`` entry for a problem+json error, with a truthful example: the
    ``type`` and ``title`` the service sends (``type_`` where the title alone does not say
    it). ``label`` is the response's description where the interface names it otherwise."""
    type_ = type_ or _TYPE_OF_TITLE[title]
    if type_ not in PROBLEM_TYPES or title_for(type_, status) != title:
        raise ValueError(f"the service never sends a {status} {type_!r} problem titled {title!r}")
    example = {
        "type": TYPE_BASE + type_,
        "title": title,
        "status": status,
        "detail": detail,
        "requestId": EXAMPLE_REQUEST_ID,
    }
    return {
        "description": label or title,
        "content": {PROBLEM_JSON: {"schema": {"$ref": PROBLEM_REF}, "example": example}},
    }
