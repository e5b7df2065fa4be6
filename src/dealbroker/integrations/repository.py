"""All queries on integrations and their access tokens."""

import uuid
from datetime import datetime

from sqlalchemy import and_, delete, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from dealbroker.auth import token_cache
from dealbroker.auth.models import AccessToken
from dealbroker.integrations.models import InstanceSetting, Integration


async def by_client_id(session: AsyncSession, client_id: str) -> Integration | None:
    return await session.scalar(select(Integration).where(Integration.client_id == client_id))


async def is_active(session: AsyncSession, integration_id: uuid.UUID) -> bool:
    return bool(
        await session.scalar(select(Integration.active).where(Integration.id == integration_id))
    )


async def all_integrations(session: AsyncSession) -> list[Integration]:
    return list(await session.scalars(select(Integration).order_by(Integration.created_at)))


async def any_exists(session: AsyncSession) -> bool:
    return await session.scalar(select(Integration.id).limit(1)) is not None


async def revoke_tokens(session: AsyncSession, integration_id: uuid.UUID) -> None:
    """Delete the integration's tokens; every server process forgets them when this commits
    (the one way tokens are revoked: the token caches rely on it)."""
    await session.execute(delete(AccessToken).where(AccessToken.integration_id == integration_id))
    await token_cache.notify_revoked(session, integration_id)


async def instance_setting(session: AsyncSession, key: str) -> str | None:
    return await session.scalar(select(InstanceSetting.value).where(InstanceSetting.key == key))


async def by_id_for_update(session: AsyncSession, integration_id: uuid.UUID) -> Integration | None:
    """The integration, row locked, its attributes read again under the lock (the session may
    hold it from before, and a concurrent change may have committed since)."""
    return await session.scalar(
        select(Integration)
        .where(Integration.id == integration_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


async def by_webhook_secret_hash(
    session: AsyncSession, secret_hash: str, now: datetime
) -> Integration | None:
    """The integration whose current webhook secret, or previous one still inside its overlap
    window at ``now``, has this hash (secrets are random: at most one integration has it)."""
    return await session.scalar(
        select(Integration).where(
            or_(
                Integration.webhook_secret_hash == secret_hash,
                and_(
                    Integration.previous_webhook_secret_hash == secret_hash,
                    Integration.previous_webhook_secret_expires_at > now,
                ),
            )
        )
    )


async def add_clock_offset(session: AsyncSession, integration: Integration, seconds: int) -> None:
    """Move the integration's sandbox clock ``seconds`` on, in one UPDATE, so that two moves at
    once both count; ``integration`` is refreshed with the sum."""
    offset = await session.scalar(
        update(Integration)
        .where(Integration.id == integration.id)
        .values(clock_offset_seconds=Integration.clock_offset_seconds + seconds)
        .returning(Integration.clock_offset_seconds)
        .execution_options(synchronize_session=False)
    )
    set_committed_value(integration, "clock_offset_seconds", offset)
