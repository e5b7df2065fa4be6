"""OAuth 2.0 client credentials (RFC 6749 section 4.4) and bearer-token checks."""

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.auth import repository
from dealbroker.auth.models import AccessToken
from dealbroker.auth.token_cache import CachedToken, TokenCache
from dealbroker.core import clock
from dealbroker.core.security import hash_token, new_token, verify_secret
from dealbroker.integrations import repository as integrations
from dealbroker.integrations.models import Integration

# What a secret is verified against when no client has the given id, so that refusal does the
# same work as a wrong secret: a faster answer would tell which client ids exist.
_NO_CLIENT_HASH = hash_token(new_token())


class OAuthError(Exception):
    """An RFC 6749 section 5.2 error: rendered as ``{"error", "error_description"}``."""

    def __init__(
        self, status: int, error: str, description: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(description)
        self.status, self.error, self.description = status, error, description
        self.retry_after = retry_after


@dataclass(frozen=True)
class Principal:
    """The integration behind a valid access token, and the scopes the token grants."""

    integration_id: uuid.UUID
    scopes: frozenset[str]


@dataclass(frozen=True)
class IssuedToken:
    access_token: str
    expires_in: int
    scope: str


async def issue_token(
    session: AsyncSession,
    client_id: str,
    client_secret: str,
    requested_scope: str | None,
    lifetime_seconds: int,
) -> IssuedToken:
    """Check the client's credentials and issue an opaque access token."""
    integration = await integrations.by_client_id(session, client_id)
    stored = _NO_CLIENT_HASH if integration is None else integration.client_secret_hash
    # Verified whoever the client is, before anything else is decided: every refusal below does
    # the same work and gives the same answer.
    secret_ok = verify_secret(client_secret, stored)
    if integration is None or not integration.active or not secret_ok:
        raise OAuthError(401, "invalid_client", "Client authentication failed.")
    scopes = _granted_scopes(integration, requested_scope)
    now = clock.now()
    token = new_token()
    # Expired tokens of this client are dropped as new ones are issued, keeping the table small.
    await repository.delete_expired(session, integration.id, now)
    session.add(
        AccessToken(
            token_hash=hash_token(token),
            integration_id=integration.id,
            scopes=scopes,
            expires_at=now + timedelta(seconds=lifetime_seconds),
            created_at=now,
        )
    )
    await session.flush()
    return IssuedToken(token, lifetime_seconds, scopes)


def _granted_scopes(integration: Integration, requested: str | None) -> str:
    allowed = integration.scope_list
    if requested is None or not requested.strip():
        return " ".join(allowed)
    wanted = requested.split()
    if not set(wanted) <= set(allowed):
        raise OAuthError(
            400,
            "invalid_scope",
            f"Requested scope exceeds what this client may have: {' '.join(allowed)}.",
        )
    return " ".join(s for s in allowed if s in wanted)


class NotCached:
    """``cached_principal``'s answer for a token the cache does not hold."""


NOT_CACHED = NotCached()


def cached_principal(token: str, cache: TokenCache | None) -> Principal | None | NotCached:
    """``principal_for``'s answer for a token ``cache`` holds (its principal, or ``None`` once
    it has expired), without a coroutine: the token check of nearly every request on
    PostgreSQL. ``NOT_CACHED`` when the cache does not hold it (or there is none)."""
    if cache is None:
        return NOT_CACHED
    entry = cache.get(hash_token(token))
    if entry is None:
        return NOT_CACHED
    if entry.expires_at <= clock.now():
        return None
    return Principal(entry.integration_id, entry.scopes)


async def principal_for(
    session: AsyncSession | Callable[[], AsyncSession], token: str, cache: TokenCache | None = None
) -> Principal | None:
    """The principal of a live token of an active integration, or ``None``. With ``cache``
    (PostgreSQL), a token checked before costs no query (see ``auth.token_cache``;
    ``cached_principal`` answers such a token without a coroutine).

    ``session`` may be a session factory: a session is then opened only if the token has to
    be read (not in the cache), and closed at once."""
    cached = cached_principal(token, cache)
    if not isinstance(cached, NotCached):
        return cached
    token_hash = hash_token(token)
    # Taken before the read: see TokenCache.put.
    generation = 0 if cache is None else cache.generation
    if isinstance(session, AsyncSession):
        row = await repository.live_token(session, token_hash)
    else:
        async with session() as own:
            row = await repository.live_token(own, token_hash)
    if row is None or row.expires_at <= clock.now():
        return None
    principal = Principal(row.integration_id, frozenset(row.scopes.split()))
    if cache is not None:
        entry = CachedToken(principal.integration_id, principal.scopes, row.expires_at)
        cache.put(token_hash, entry, generation)
    return principal
