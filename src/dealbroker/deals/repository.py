"""All queries on deals, their history and their counters."""

import random
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, Row, bindparam, func, select, true
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

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


# --- the reads of GET /deals/v1/deals and /deals/v1/deals/{id} ---------------------------------
# Core statements built once: no ORM objects, rows named as ``Deal``'s attributes (what
# ``deals.schemas.deal_out`` and ``deals.actions.allowed_actions`` read), one round trip each.

_deals = Deal.__table__
_counters = DealCounter.__table__
# What rendering a deal reads (``buyer_user_id``: whether it still takes offers).
_READ = [
    _deals.c[name]
    for name in (
        "id",
        "name",
        "description",
        "price_minor",
        "currency",
        "images",
        "package_type",
        "status",
        "seller",
        "payment_status",
        "buyer_user_id",
        "created_at",
        "updated_at",
    )
]
_ONE = select(*_READ).where(
    _deals.c.id == bindparam("deal_id"), _deals.c.integration_id == bindparam("integration_id")
)
_TOTAL = (
    select(func.coalesce(func.sum(_counters.c.count), 0).label("total"))
    .where(_counters.c.integration_id == bindparam("integration_id"))
    .subquery("t")
)
_SLICE = (
    select(*_READ)
    .where(_deals.c.integration_id == bindparam("integration_id"))
    .order_by(_deals.c.created_at.desc(), _deals.c.id.desc())
    .limit(bindparam("limit", type_=Integer))
    .offset(bindparam("offset", type_=Integer))
    .subquery("d")
)
# The total and the page in one statement: one row of the total, joined to the page's rows
# (the total alone, its deal columns NULL, when the page is past the end).
_PAGE = (
    select(_TOTAL.c.total, *_SLICE.c)
    .select_from(_TOTAL.outerjoin(_SLICE, true()))
    .order_by(_SLICE.c.created_at.desc(), _SLICE.c.id.desc())
)


async def read_one(
    conn: AsyncConnection, integration_id: uuid.UUID, deal_id: uuid.UUID
) -> Row[Any] | None:
    """One deal of this integration as a row, or ``None``."""
    result = await conn.execute(_ONE, {"deal_id": deal_id, "integration_id": integration_id})
    return result.one_or_none()


async def read_page(
    conn: AsyncConnection, integration_id: uuid.UUID, offset: int, limit: int
) -> tuple[int, list[Row[Any]]]:
    """How many deals this integration has (a sum over at most ``SLOTS`` counter rows) and a
    slice of them as rows, newest first (served by the covering index)."""
    params = {"integration_id": integration_id, "offset": offset, "limit": limit}
    rows = (await conn.execute(_PAGE, params)).all()
    total = int(rows[0].total)
    return total, [row for row in rows if row.id is not None]


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
