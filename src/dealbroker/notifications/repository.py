"""All queries on the outbox of messages."""

import uuid
from datetime import datetime

from sqlalchemy import Select, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.db import delete_batch, oldest_batch
from dealbroker.notifications.models import OutboxMessage


def add(session: AsyncSession, message: OutboxMessage) -> None:
    session.add(message)


async def of_deal(session: AsyncSession, deal_id: uuid.UUID) -> list[OutboxMessage]:
    """Every message about one deal, oldest first."""
    return list(
        await session.scalars(
            select(OutboxMessage)
            .where(OutboxMessage.deal_id == deal_id)
            .order_by(OutboxMessage.created_at, OutboxMessage.id)
        )
    )


async def newest(session: AsyncSession, limit: int) -> list[OutboxMessage]:
    """The ``limit`` newest messages of the whole outbox, newest first."""
    return list(
        await session.scalars(
            select(OutboxMessage)
            .order_by(OutboxMessage.created_at.desc(), OutboxMessage.id)
            .limit(limit)
        )
    )


async def sent_to(
    session: AsyncSession, deal_id: uuid.UUID, kinds: list[str], email: str
) -> list[OutboxMessage]:
    """The messages of ``kinds`` about one deal sent to ``email`` (any case), oldest first."""
    return list(
        await session.scalars(
            select(OutboxMessage)
            .where(
                OutboxMessage.deal_id == deal_id,
                OutboxMessage.kind.in_(kinds),
                func.lower(OutboxMessage.to_email) == email.strip().lower(),
            )
            .order_by(OutboxMessage.created_at, OutboxMessage.id)
        )
    )


async def pending_count(session: AsyncSession, cap: int) -> int:
    """Messages not yet sent nor given up (counted up to ``cap``), on the outbox's partial index."""
    pending = (
        select(OutboxMessage.id).where(OutboxMessage.next_attempt_at.is_not(None)).limit(cap)
    ).subquery()
    return int(await session.scalar(select(func.count()).select_from(pending)) or 0)


async def claim_due(
    session: AsyncSession, now: datetime, lease_until: datetime, limit: int
) -> list[OutboxMessage]:
    """Up to ``limit`` messages due to be sent, leased to this worker until ``lease_until``
    (another worker skips them, and takes them again if this one dies); each counts one more
    attempt."""
    messages = list(
        await session.scalars(
            select(OutboxMessage)
            .where(OutboxMessage.next_attempt_at <= now)
            .order_by(OutboxMessage.next_attempt_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )
    if messages:
        await session.execute(
            update(OutboxMessage)
            .where(OutboxMessage.id.in_([m.id for m in messages]))
            .values(next_attempt_at=lease_until, attempts=OutboxMessage.attempts + 1)
            .execution_options(synchronize_session=False)
        )
    return messages


async def finish(
    session: AsyncSession,
    message_id: uuid.UUID,
    *,
    sent_at: datetime | None,
    error: str | None,
    next_attempt_at: datetime | None,
) -> None:
    """Record how an attempt went: sent, failed for now (tried again at ``next_attempt_at``),
    or given up (neither)."""
    await session.execute(
        update(OutboxMessage)
        .where(OutboxMessage.id == message_id, OutboxMessage.sent_at.is_(None))
        .values(sent_at=sent_at, last_error=error, next_attempt_at=next_attempt_at)
        .execution_options(synchronize_session=False)
    )


def purgeable_messages(before: datetime, limit: int) -> Select[uuid.UUID]:
    """The oldest ``limit`` messages sent before ``before``, through ``ix_outbox_messages_sent``
    (which holds sent messages only); messages still to send, or given up, never qualify."""
    query = select(OutboxMessage.id).where(
        OutboxMessage.sent_at.is_not(None), OutboxMessage.sent_at < before
    )
    return oldest_batch(query, OutboxMessage.sent_at, limit)


async def purge_sent(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete one batch of ``purgeable_messages``; returns how many went."""
    chosen = OutboxMessage.id.in_(purgeable_messages(before, limit))
    return await delete_batch(session, OutboxMessage, chosen)
