"""Typed errors: every refusal of the API is an ``APIError`` built from its RFC 9457
problem+json body, as a subclass for its status (and, where the problem type says more, its
kind). Failures to reach the service at all are ``APIConnectionError``."""

from dataclasses import dataclass
from typing import Any

import httpx

PROBLEM_TYPE_BASE = "https://dealbroker.dev/problems/"


class DealbrokerError(Exception):
    """The base of every error this client raises."""


class APIConnectionError(DealbrokerError):
    """The service could not be reached (or did not answer) after every retry."""


class WebhookVerificationError(DealbrokerError):
    """A webhook's signature, timestamp or body is not valid: do not act on it."""


@dataclass(frozen=True)
class FieldProblem:
    """One field the service refused, and why."""

    field: str
    message: str


class APIError(DealbrokerError):
    """The service answered with an error status.

    ``type``, ``title``, ``detail`` and ``errors`` come from the problem+json body (``errors``
    lists refused fields); ``body`` is that body as parsed, ``request_id`` the service's
    request id (``requestId``, also its ``X-Request-Id``) for support.
    """

    def __init__(
        self,
        status: int,
        *,
        type: str = "about:blank",  # noqa: A002 - RFC 9457's member name
        title: str = "",
        detail: str = "",
        errors: list[FieldProblem] | None = None,
        body: Any = None,
        headers: httpx.Headers | None = None,
    ) -> None:
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.errors = errors or []
        self.body = body
        self.headers = headers or httpx.Headers()
        message = f"{status} {title}: {detail}" if detail else f"{status} {title}"
        rid = self.request_id
        super().__init__(f"{message} (request {rid})" if rid else message)

    @property
    def kind(self) -> str:
        """The problem type's last segment, e.g. ``illegal-transition``."""
        return self.type.removeprefix(PROBLEM_TYPE_BASE)

    @property
    def request_id(self) -> str | None:
        """The request's id to quote to support: the problem body's ``requestId``, else the
        ``X-Request-Id`` header (an answer that is no problem+json, such as a proxy's)."""
        if isinstance(self.body, dict) and isinstance(self.body.get("requestId"), str):
            return str(self.body["requestId"])
        value: str | None = self.headers.get("x-request-id")
        return value


class BadRequestError(APIError):
    """400: the request cannot be acted on as it stands."""


class InvalidInputError(BadRequestError):
    """The body breaks the schema (400, or 405 "Invalid input" where the interface fixes it),
    or names something that does not exist for you (a sandbox trigger's ``dealId``: 400);
    ``errors`` names each refused field."""


class AuthenticationError(APIError):
    """401: no credential, or one that is not valid (also a refused token request)."""


class OAuthError(AuthenticationError):
    """The token endpoint refused (RFC 6749 section 5.2): ``type`` is its ``error`` code,
    e.g. ``invalid_client``."""


class PermissionDeniedError(APIError):
    """403: a valid credential without the permission (scope) the request needs."""


class NotFoundError(APIError):
    """404: no such thing, or another integration's."""


class ConflictError(APIError):
    """409: the current state of the deal, offer or payment does not allow the request."""


class IllegalTransitionError(ConflictError):
    """409: the lifecycle has no such transition from the deal's status."""


class IdempotencyKeyReusedError(APIError):
    """422: an ``Idempotency-Key`` was reused with a different request."""


class RateLimitError(APIError):
    """429: too many requests (retried first, honouring ``Retry-After``)."""


class ServerError(APIError):
    """5xx: the service failed; worth retrying later."""


_BY_KIND: dict[str, type[APIError]] = {
    "invalid-input": InvalidInputError,
    "unknown-reference": InvalidInputError,
    "illegal-transition": IllegalTransitionError,
    "idempotency-key-reused": IdempotencyKeyReusedError,
}
_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: IdempotencyKeyReusedError,
    429: RateLimitError,
}


def _field_problems(raw: Any) -> list[FieldProblem]:
    if not isinstance(raw, list):
        return []
    return [
        FieldProblem(str(e.get("field", "")), str(e.get("message", "")))
        for e in raw
        if isinstance(e, dict)
    ]


def error_from_response(response: httpx.Response) -> APIError:
    """The typed error for an error answer (problem+json, an OAuth error, or anything else)."""
    status = response.status_code
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body and "title" not in body:
        return OAuthError(
            status,
            type=str(body["error"]),
            title=str(body["error"]),
            detail=str(body.get("error_description", "")),
            body=body,
            headers=response.headers,
        )
    problem = body if isinstance(body, dict) else {}
    type_ = str(problem.get("type", "about:blank"))
    kind = type_.removeprefix(PROBLEM_TYPE_BASE)
    cls = (
        _BY_KIND.get(kind) or _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    )
    return cls(
        status,
        type=type_,
        title=str(problem.get("title", response.reason_phrase)),
        detail=str(problem.get("detail", "" if problem else response.text[:500])),
        errors=_field_problems(problem.get("errors")),
        body=body,
        headers=response.headers,
    )
