"""All queries on access tokens."""

import uuid
from datetime import datetime

from sqlalchemy import Row, delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.auth.models import AccessToken
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
