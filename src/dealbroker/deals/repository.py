"""All queries on deals, their history and their counters."""

import random
import uuid
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.idempotency import insert_for
from dealbroker.deals.lifecycle import DISPUTES
from dealbroker.deals.models import Deal, DealCounter, DealStatusChange, DealTimer


async def add(session: AsyncSession, deal: Deal, first_change: DealStatusChange) -> None:
    """Store a new deal with its first history row, and count it."""
    session.add(deal)
    await session.flush()
    session.add(first_change)
    insert = insert_for(session)
    stmt = insert(DealCounter).values(
        integration_id=deal.integration_id, slot=random.randrange(DealCounter.SLOTS), count=1
    )
    await session.execute(
        stmt.on_conflict_do_update(
            index_elements=[DealCounter.integration_id, DealCounter.slot],
            set_={"count": DealCounter.count + 1},
        )
    )


async def get(
    session: AsyncSession,
    integration_id: uuid.UUID,
    deal_id: uuid.UUID,
    *,
    for_update: bool = False,
) -> Deal | None:
    """One deal of this integration; with ``for_update`` the row stays locked until commit."""
    stmt = select(Deal).where(Deal.id == deal_id, Deal.integration_id == integration_id)
    if for_update:
        stmt = stmt.with_for_update()
    return await session.scalar(stmt)


async def page(
    session: AsyncSession, integration_id: uuid.UUID, offset: int, limit: int
) -> list[Deal]:
    """A slice of this integration's deals, newest first (served by the covering index)."""
    stmt = (
        select(Deal)
        .where(Deal.integration_id == integration_id)
        .order_by(Deal.created_at.desc(), Deal.id.desc())
        .offset(offset)
        .limit(limit)
    )
    return list(await session.scalars(stmt))


async def count(session: AsyncSession, integration_id: uuid.UUID) -> int:
    """How many deals this integration has: a sum over at most ``SLOTS`` counter rows."""
    total = await session.scalar(
        select(func.coalesce(func.sum(DealCounter.count), 0)).where(
            DealCounter.integration_id == integration_id
        )
    )
    return int(total or 0)


async def history(session: AsyncSession, deal_id: uuid.UUID) -> list[DealStatusChange]:
    stmt = (
        select(DealStatusChange)
        .where(DealStatusChange.deal_id == deal_id)
        .order_by(DealStatusChange.deal_version, DealStatusChange.created_at)
    )
    return list(await session.scalars(stmt))


def add_change(session: AsyncSession, change: DealStatusChange) -> None:
    session.add(change)


async def by_id(session: AsyncSession, deal_id: uuid.UUID) -> Deal | None:
    """A deal by id alone, for pages whose capability link already proved the right to see it."""
    return await session.get(Deal, deal_id)


async def by_id_for_update(session: AsyncSession, deal_id: uuid.UUID) -> Deal | None:
    """A deal by id alone, row locked (for jobs and pages, which act for no integration)."""
    return await session.scalar(select(Deal).where(Deal.id == deal_id).with_for_update())


def add_timer(session: AsyncSession, timer: DealTimer) -> None:
    session.add(timer)


async def claim_due_timer(session: AsyncSession, now: datetime) -> DealTimer | None:
    """One due, unfired timer, row locked; timers another worker holds are skipped."""
    return await session.scalar(
        select(DealTimer)
        .where(DealTimer.fired_at.is_(None), DealTimer.due_at <= now)
        .order_by(DealTimer.due_at)
        .limit(1)
        .with_for_update(skip_locked=True)
    )


async def due_timers(session: AsyncSession, now: datetime, cap: int) -> tuple[int, datetime | None]:
    """How many unfired timers are due (counted up to ``cap``), and the oldest one's due time."""
    due = (
        select(DealTimer.due_at)
        .where(DealTimer.fired_at.is_(None), DealTimer.due_at <= now)
        .order_by(DealTimer.due_at)
        .limit(cap)
        .subquery()
    )
    count, oldest = (await session.execute(select(func.count(), func.min(due.c.due_at)))).one()
    return int(count), oldest


async def pending_timers(session: AsyncSession, integration_id: uuid.UUID) -> list[DealTimer]:
    return list(
        await session.scalars(
            select(DealTimer)
            .where(DealTimer.integration_id == integration_id, DealTimer.fired_at.is_(None))
            .with_for_update()
        )
    )


async def in_dispute(session: AsyncSession) -> list[Deal]:
    return list(
        await session.scalars(
            select(Deal).where(Deal.status.in_(DISPUTES)).order_by(Deal.updated_at)
        )
    )


async def next_deadline(session: AsyncSession, deal_id: uuid.UUID) -> DealTimer | None:
    """The deal's earliest deadline still to come (or due and not yet fired)."""
    return await session.scalar(
        select(DealTimer)
        .where(DealTimer.deal_id == deal_id, DealTimer.fired_at.is_(None))
        .order_by(DealTimer.due_at)
        .limit(1)
    )


async def timers_of(session: AsyncSession, deal_id: uuid.UUID) -> list[DealTimer]:
    return list(
        await session.scalars(
            select(DealTimer).where(DealTimer.deal_id == deal_id).order_by(DealTimer.created_at)
        )
    )
