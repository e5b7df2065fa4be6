"""Every query of the portal's members, their login links and sessions."""

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.integrations.models import Integration
from dealbroker.portal.models import PortalLoginLink, PortalMember, PortalSession


async def member(session: AsyncSession, member_id: uuid.UUID) -> PortalMember | None:
    return await session.get(PortalMember, member_id)


async def member_for_update(session: AsyncSession, member_id: uuid.UUID) -> PortalMember | None:
    return await session.scalar(
        select(PortalMember).where(PortalMember.id == member_id).with_for_update()
    )


async def member_by_email(
    session: AsyncSession, integration_id: uuid.UUID, email_key: str
) -> PortalMember | None:
    return await session.scalar(
        select(PortalMember).where(
            PortalMember.integration_id == integration_id, PortalMember.email_key == email_key
        )
    )


async def members_of(session: AsyncSession, integration_id: uuid.UUID) -> Sequence[PortalMember]:
    return (
        await session.scalars(
            select(PortalMember)
            .where(PortalMember.integration_id == integration_id)
            .order_by(PortalMember.email_key)
        )
    ).all()


async def owners_for_update(session: AsyncSession, integration_id: uuid.UUID) -> list[uuid.UUID]:
    """The integration's owners, locked: two owners demoting each other at once cannot leave
    it with none."""
    return list(
        (
            await session.scalars(
                select(PortalMember.id)
                .where(PortalMember.integration_id == integration_id, PortalMember.role == "owner")
                .order_by(PortalMember.id)
                .with_for_update()
            )
        ).all()
    )


async def memberships(
    session: AsyncSession, email_key: str
) -> Sequence[tuple[PortalMember, Integration]]:
    """The address's members in active integrations, with their integration, by its name."""
    rows = await session.execute(
        select(PortalMember, Integration)
        .join(Integration, Integration.id == PortalMember.integration_id)
        .where(PortalMember.email_key == email_key, Integration.active.is_(True))
        .order_by(Integration.name, Integration.client_id)
    )
    return [(m, i) for m, i in rows]


async def remember_locale(session: AsyncSession, email_key: str, locale: str) -> None:
    await session.execute(
        update(PortalMember).where(PortalMember.email_key == email_key).values(locale=locale)
    )


async def known_locale(session: AsyncSession, email_key: str) -> str | None:
    return await session.scalar(
        select(PortalMember.locale)
        .where(PortalMember.email_key == email_key, PortalMember.locale.is_not(None))
        .limit(1)
    )


async def links_since(session: AsyncSession, email_key: str, since: datetime) -> int:
    return int(
        await session.scalar(
            select(func.count()).where(
                PortalLoginLink.email_key == email_key, PortalLoginLink.created_at > since
            )
        )
        or 0
    )


async def link_for_update(session: AsyncSession, token_hash: str) -> PortalLoginLink | None:
    return await session.scalar(
        select(PortalLoginLink).where(PortalLoginLink.token_hash == token_hash).with_for_update()
    )


async def session_row(session: AsyncSession, token_hash: str) -> PortalSession | None:
    return await session.get(PortalSession, token_hash)


async def end_session(session: AsyncSession, token_hash: str) -> None:
    await session.execute(delete(PortalSession).where(PortalSession.token_hash == token_hash))


async def end_member_sessions(session: AsyncSession, member_id: uuid.UUID) -> None:
    await session.execute(delete(PortalSession).where(PortalSession.member_id == member_id))


async def drop_expired(session: AsyncSession, now: datetime, links_before: datetime) -> None:
    """Sessions past their end; links expired and made before ``links_before`` (younger ones
    still count toward their address's bound)."""
    await session.execute(delete(PortalSession).where(PortalSession.expires_at <= now))
    await session.execute(
        delete(PortalLoginLink).where(
            PortalLoginLink.expires_at <= now, PortalLoginLink.created_at < links_before
        )
    )
