"""All queries on access tokens."""

import uuid
from datetime import datetime

from sqlalchemy import Row, Select, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.auth.models import AccessToken
from dealbroker.core.db import delete_batch, oldest_batch
from dealbroker.integrations.models import Integration


async def live_token(session: AsyncSession, token_hash: str) -> Row | None:  # type: ignore[type-arg]
    """``(integration_id, scopes, expires_at)`` of a token whose integration is active."""
    result = await session.execute(
        select(AccessToken.integration_id, AccessToken.scopes, AccessToken.expires_at)
        .join(Integration, Integration.id == AccessToken.integration_id)
        .where(AccessToken.token_hash == token_hash, Integration.active.is_(True))
    )
    return result.one_or_none()


async def delete_expired(session: AsyncSession, integration_id: uuid.UUID, now: datetime) -> None:
    await session.execute(
        delete(AccessToken).where(
            AccessToken.integration_id == integration_id, AccessToken.expires_at <= now
        )
    )


def purgeable_tokens(before: datetime, limit: int) -> Select[str]:
    """The ``limit`` tokens that expired longest before ``before``, through
    ``ix_access_tokens_expires_at``."""
    query = select(AccessToken.token_hash).where(AccessToken.expires_at < before)
    return oldest_batch(query, AccessToken.expires_at, limit)


async def purge_expired_tokens(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete one batch of ``purgeable_tokens``; returns how many went."""
    chosen = AccessToken.token_hash.in_(purgeable_tokens(before, limit))
    return await delete_batch(session, AccessToken, chosen)
