"""The OpenAPI document, corrected to say what the service really answers.

FastAPI documents a 422 "Validation Error" on every operation with parameters, and a plain
``application/json`` body next to each declared error. This service answers schema violations
with 400 or 405 problem+json instead, so those defaults are removed. What FastAPI cannot derive
is added here, once for every operation: the one ``Problem`` schema, the security schemes, the
``Idempotency-Key`` header of the POSTs and the ``Idempotent-Replayed`` header of their replays,
and the page size bounds of this deployment.
"""

from typing import Any

from fastapi import FastAPI
from fastapi._compat import get_definitions, get_flat_models_from_fields, get_model_name_map
from fastapi.dependencies.models import Dependant
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.utils import get_fields_from_routes, get_openapi
from fastapi.routing import APIRoute
from fastapi.security.base import SecurityBase

from dealbroker.core.errors import PROBLEM_FIELD_ERROR_SCHEMA, PROBLEM_JSON, PROBLEM_SCHEMA
from dealbroker.core.idempotency import HEADER as IDEMPOTENCY_HEADER
from dealbroker.core.idempotency import MAX_KEY_LENGTH
from dealbroker.core.pagination import MAX_PAGE

# The interface's index misspells the sandbox prefix; those paths are served (as aliases of
# /webhooks/v1/...) but kept out of the document, so generated code has one method per trigger.
UNDOCUMENTED_PREFIXES = ("/webooks/",)
# POSTs that take no Idempotency-Key: the token endpoint (RFC 6749; replaying an access token
# would mean storing it in clear, and a new token per request is harmless), and the sandbox's
# scenarios (a scenario that lets time pass commits in several transactions; docs/webhooks.md).
NOT_IDEMPOTENT = {"issue_token", "sandbox_run_scenario"}

SECURITY_SCHEMES: dict[str, Any] = {
    "WebhookSecret": {
        "type": "apiKey",
        "in": "header",
        "name": "webhook-secret",
        "description": "The integration's webhook secret (`whsec_...`): the sandbox triggers' "
        "only credential.",
    },
    "ClientSecretBasic": {
        "type": "http",
        "scheme": "basic",
        "description": "The client id and secret as HTTP Basic credentials (RFC 6749 2.3.1, "
        "`client_secret_basic`). The token endpoint also takes them as `client_id` and "
        "`client_secret` form fields (`client_secret_post`) instead.",
    },
}
IDEMPOTENCY_PARAMETER: dict[str, Any] = {
    "name": IDEMPOTENCY_HEADER,
    "in": "header",
    "required": False,
    "description": "Makes a retry safe: the same key with the same request within 24 hours "
    "replays the first answer (with `Idempotent-Replayed: true`); the same key with another "
    "request is 422. Make a new key for each new request (a random UUID, say) and send it "
    "again only with the same request's retries.",
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_KEY_LENGTH,
        "pattern": "^[\\x20-\\x7e]+$",
    },
    # No example: a fixed key copied into every request (by a reader, Swagger UI's "Try it out"
    # or a fuzzer) would make each request after the first a reuse with another request, 422.
}
REPLAYED_HEADER: dict[str, Any] = {
    "description": "`true` when this answer is the stored answer to an earlier request with "
    "the same `Idempotency-Key`; absent otherwise.",
    "schema": {"type": "string", "enum": ["true"]},
}


def _problem_responses(operation: dict[str, Any]) -> None:
    responses = operation.get("responses", {})
    if responses.get("422", {}).get("description") == "Validation Error":
        del responses["422"]
    for response in responses.values():
        content = response.get("content", {})
        if PROBLEM_JSON in content:
            content.pop("application/json", None)


def _idempotency(operation: dict[str, Any]) -> None:
    operation.setdefault("parameters", []).append(
        {"$ref": "#/components/parameters/IdempotencyKey"}
    )
    for code, response in operation.get("responses", {}).items():
        if code.startswith("2"):
            response.setdefault("headers", {})["Idempotent-Replayed"] = {
                "$ref": "#/components/headers/IdempotentReplayed"
            }


RETRY_AFTER_HEADER: dict[str, Any] = {
    "description": "Seconds to wait before trying again.",
    "schema": {"type": "integer", "minimum": 1},
    "example": 42,
}
RATE_LIMITED: dict[str, Any] = {
    "description": "Too Many Requests: the integration is over its rate limit for this minute; "
    "wait the `Retry-After` seconds.",
    "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
    "content": {
        PROBLEM_JSON: {
            "schema": {"$ref": "#/components/schemas/Problem"},
            "example": {
                "type": "https://dealbroker.dev/problems/rate-limited",
                "title": "Too Many Requests",
                "status": 429,
                "detail": "This integration has made more than 6000 requests this minute; "
                "try again in 42 seconds.",
            },
        }
    },
}
RATE_LIMITED_SCHEMES = {"OAuth2ClientCredentials", "WebhookSecret"}


def _rate_limited(operation: dict[str, Any]) -> None:
    """An operation an integration's credential opens counts towards its rate limit."""
    schemes = {name for requirement in operation.get("security", []) for name in requirement}
    if schemes & RATE_LIMITED_SCHEMES:
        operation.setdefault("responses", {}).setdefault("429", RATE_LIMITED)


def _public(operation: dict[str, Any]) -> None:
    """An operation that takes no credential says so (``security: []``), rather than leaving
    a reader (or a linter) to wonder whether it was forgotten: the probes, the discovery
    document, and the webhooks, which a receiver checks by their signature headers."""
    operation.setdefault("security", [])


def _page_parameters(operation: dict[str, Any], default: int, maximum: int) -> None:
    """``page`` and ``pageSize`` as the service reads them (``core.pagination``): an integer
    in its bounds, or any other text, which is never refused but read as the nearest page there
    is. The page size bounds are settings: the document states this deployment's."""
    bounds = {"page": (1, MAX_PAGE, 1), "pageSize": (1, maximum, default)}
    for parameter in operation.get("parameters", []):
        name = parameter.get("name")
        if name not in bounds or parameter.get("in") != "query":
            continue
        low, high, usual = bounds[name]
        parameter["schema"] = {
            "anyOf": [{"type": "integer", "minimum": low, "maximum": high}, {"type": "string"}],
            "default": usual,
        }
        what = "Page number, from 1" if name == "page" else "Items per page"
        parameter["description"] = (
            f"{what}; default {usual}, at most {high}. Never refused: a number below {low} reads "
            f"as {low}, one above {high} as {high}, and anything that is not an integer as "
            f"{usual}; the answer's page object gives the `pageNumber` and `pageSize` used and "
            f"lists the parameter in `adjusted`."
        )


def _examples_with_nulls(app: FastAPI, schemas: dict[str, Any]) -> None:
    """FastAPI writes the document without any null (``exclude_none``), inside the examples
    too, whose nullable required fields then go missing (a ``DealOut`` example without its
    ``paymentStatus: null`` is invalid against its own schema). Each schema's examples are put
    back as its model gives them, nulls included."""
    fields = get_fields_from_routes([*app.routes, *app.webhooks.routes])
    names = get_model_name_map(get_flat_models_from_fields(fields, known_models=set()))
    _, definitions = get_definitions(
        fields=fields, model_name_map=names, separate_input_output_schemas=True
    )
    for name, definition in definitions.items():
        if "examples" in definition and name in schemas:
            schemas[name]["examples"] = jsonable_encoder(definition["examples"])


class ScopedDependency:
    """A route's dependency on a bearer token holding ``scopes``, under the OAuth2 ``scheme``:
    FastAPI documents neither for a plain dependency, so the document declares both on each
    operation that depends on one (``auth.dependencies.Requires`` is one)."""

    scheme: SecurityBase
    scopes: tuple[str, ...]


def _token_scopes(app: FastAPI) -> dict[tuple[str, str], ScopedDependency]:
    """The token each operation needs, by path and method."""
    found: dict[tuple[str, str], ScopedDependency] = {}

    def scoped(dependant: Dependant) -> ScopedDependency | None:
        for sub in dependant.dependencies:
            if isinstance(sub.call, ScopedDependency):
                return sub.call
            inner = scoped(sub)
            if inner is not None:
                return inner
        return None

    for route in app.routes:
        if isinstance(route, APIRoute):
            needs = scoped(route.dependant)
            if needs is not None:
                for method in route.methods or ():
                    found[(route.path_format, method.lower())] = needs
    return found


def _token_security(operation: dict[str, Any], needs: ScopedDependency | None) -> None:
    if needs is not None:
        operation["security"] = [{needs.scheme.scheme_name: list(needs.scopes)}]


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        settings = app.state.settings
        spec = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
            webhooks=app.webhooks.routes,
            tags=app.openapi_tags,
        )
        # The document is served by the deployment it describes: its base URL is the server.
        spec["servers"] = [{"url": settings.base_url.rstrip("/"), "description": "This deployment"}]
        spec["info"]["license"] = {"name": "Apache 2.0", "identifier": "Apache-2.0"}
        paths = spec.get("paths", {})
        for path in [p for p in paths if p.startswith(UNDOCUMENTED_PREFIXES)]:
            del paths[path]
        token_scopes = _token_scopes(app)
        for path, item in paths.items():
            for method, operation in item.items():
                _token_security(operation, token_scopes.get((path, method)))
                _problem_responses(operation)
                _public(operation)
                _page_parameters(operation, settings.page_size_default, settings.page_size_max)
                if settings.rate_limit_requests_per_minute:
                    _rate_limited(operation)
                if method == "post" and operation.get("operationId") not in NOT_IDEMPOTENT:
                    _idempotency(operation)
        # The webhooks are declared as routes too, so FastAPI gives each its default 422,
        # which a receiver never answers and whose schema is dropped below.
        for item in spec.get("webhooks", {}).values():
            for operation in item.values():
                _problem_responses(operation)
                _public(operation)
        components = spec.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        _examples_with_nulls(app, schemas)
        schemas["Problem"] = PROBLEM_SCHEMA
        schemas["ProblemFieldError"] = PROBLEM_FIELD_ERROR_SCHEMA
        security_schemes = components.setdefault("securitySchemes", {})
        for scheme in {
            needs.scheme.scheme_name: needs.scheme for needs in token_scopes.values()
        }.values():
            security_schemes[scheme.scheme_name] = jsonable_encoder(
                scheme.model, by_alias=True, exclude_none=True
            )
        security_schemes.update(SECURITY_SCHEMES)
        components["parameters"] = {"IdempotencyKey": IDEMPOTENCY_PARAMETER}
        components["headers"] = {
            "IdempotentReplayed": REPLAYED_HEADER,
            "RetryAfter": RETRY_AFTER_HEADER,
        }
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
