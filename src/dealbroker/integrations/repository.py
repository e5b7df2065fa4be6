"""All queries on integrations and their access tokens."""

import uuid

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

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
    await session.execute(delete(AccessToken).where(AccessToken.integration_id == integration_id))


async def instance_setting(session: AsyncSession, key: str) -> str | None:
    return await session.scalar(select(InstanceSetting.value).where(InstanceSetting.key == key))


async def by_webhook_secret_hash(session: AsyncSession, secret_hash: str) -> Integration | None:
    return await session.scalar(
        select(Integration).where(Integration.webhook_secret_hash == secret_hash)
    )
