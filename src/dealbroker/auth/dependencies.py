"""The bearer-token check every integration endpoint depends on."""

import uuid
from typing import Annotated

from fastapi import Depends, Request
from fastapi.openapi.models import OAuthFlowClientCredentials, OAuthFlows
from fastapi.security import OAuth2

from dealbroker.auth.service import NotCached, Principal, cached_principal, principal_for
from dealbroker.core import callers, logs
from dealbroker.core.errors import Forbidden, TooManyRequests, Unauthorized
from dealbroker.core.openapi import ScopedDependency

SCOPES = {"deals:read": "Read your deals", "deals:write": "Create and change your deals"}
REALM = 'Bearer realm="dealbroker"'

# Declares the scheme in the OpenAPI document; the header itself is checked below.
oauth2_scheme = OAuth2(
    flows=OAuthFlows(
        clientCredentials=OAuthFlowClientCredentials(tokenUrl="/oauth2/token", scopes=SCOPES)
    ),
    scheme_name="OAuth2ClientCredentials",
    auto_error=False,
)


def _challenge(
    error: str | None = None, description: str | None = None, scope: str | None = None
) -> str:
    parts = [REALM]
    if error:
        parts.append(f'error="{error}"')
    if description:
        parts.append(f'error_description="{description}"')
    if scope:
        parts.append(f'scope="{scope}"')
    return ", ".join(parts)


async def limit_integration(request: Request, integration_id: uuid.UUID) -> None:
    """Count a request of the integration, in its request log too; 429 when it is over its
    rate limit."""
    callers.identify(request.scope, integration_id)
    limit = request.app.state.settings.rate_limit_requests_per_minute
    wait = await request.app.state.rate_limiter.take("api", f"api:{integration_id}", limit)
    if wait is not None:
        request.app.state.refusals.note("api", integration_id)
        raise TooManyRequests(
            f"This integration has made more than {limit} requests this minute; "
            f"try again in {wait} seconds.",
            wait,
        )


def _authorization(request: Request) -> str | None:
    """The request's first ``Authorization`` header, as ``request.headers.get`` reads it, off
    the scope (without building the request's ``Headers``, as a direct route does not)."""
    headers: list[tuple[bytes, bytes]] = request.scope["headers"]
    for name, value in headers:
        if name == b"authorization":
            return value.decode("latin-1")
    return None


async def authenticate(request: Request, scopes: tuple[str, ...]) -> Principal:
    """The caller's principal, having checked its token and that it holds ``scopes``."""
    header = _authorization(request)
    if not header:
        raise Unauthorized(
            "An access token is required: send Authorization: Bearer <token>.",
            headers={"WWW-Authenticate": _challenge()},
        )
    scheme, _sep, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(
            "The Authorization header must be 'Bearer <token>'.",
            headers={"WWW-Authenticate": _challenge("invalid_request")},
        )
    # No session of the request's: a cached token needs none, and the routes that read take
    # their connection themselves (``core.fastpath.statements``). A token not cached is read in a
    # session of its own, closed before the route runs.
    state = request.app.state
    token = token.strip()
    principal = cached_principal(token, state.token_cache)
    if isinstance(principal, NotCached):
        sessions = state.read_sessionmaker or state.sessionmaker
        principal = await principal_for(sessions, token, state.token_cache)
    if principal is None:
        description = "The access token is invalid, expired or revoked."
        raise Unauthorized(
            description, headers={"WWW-Authenticate": _challenge("invalid_token", description)}
        )
    logs.bind(integration_id=principal.integration_id)
    await limit_integration(request, principal.integration_id)
    if not principal.scopes.issuperset(scopes):
        missing = [s for s in scopes if s not in principal.scopes]
        scope = " ".join(scopes)
        raise Forbidden(
            f"This token lacks the scope {' '.join(missing)}.",
            headers={"WWW-Authenticate": _challenge("insufficient_scope", scope=scope)},
        )
    return principal


class Requires(ScopedDependency):
    """The dependency of a route that needs a token with ``scopes``.

    A plain dependency of the request alone: FastAPI's ``Security`` would resolve a scheme
    dependency and the route's scopes on every request (what that cost: ``bench/README.md``).
    The OpenAPI document still declares the scheme and the scopes on each
    such operation (``core.openapi`` reads them from each ``ScopedDependency``)."""

    scheme = oauth2_scheme

    def __init__(self, *scopes: str) -> None:
        self.scopes = scopes

    async def __call__(self, request: Request) -> Principal:
        return await authenticate(request, self.scopes)


Reader = Annotated[Principal, Depends(Requires("deals:read"))]
Writer = Annotated[Principal, Depends(Requires("deals:write"))]
