"""Every query of the disputes' proposals."""

import uuid
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.db import oldest_first
from dealbroker.disputes.models import DisputeProposal

PENDING = "pending"


async def by_id(session: AsyncSession, proposal_id: uuid.UUID) -> DisputeProposal | None:
    return await session.get(DisputeProposal, proposal_id)


async def pending_of(session: AsyncSession, deal_id: uuid.UUID) -> DisputeProposal | None:
    """The deal's proposal waiting for a second operator, if any (at most one)."""
    return await session.scalar(
        select(DisputeProposal).where(
            DisputeProposal.deal_id == deal_id, DisputeProposal.status == PENDING
        )
    )


async def pending_by_deal(
    session: AsyncSession, deal_ids: list[uuid.UUID]
) -> dict[uuid.UUID, DisputeProposal]:
    """The waiting proposals of these deals, by deal (the queue's column)."""
    if not deal_ids:
        return {}
    rows = await session.scalars(
        select(DisputeProposal).where(
            DisputeProposal.deal_id.in_(deal_ids), DisputeProposal.status == PENDING
        )
    )
    return {row.deal_id: row for row in rows}


async def of_deal(session: AsyncSession, deal_id: uuid.UUID) -> list[DisputeProposal]:
    """Every proposal of a deal, oldest first."""
    return await oldest_first(
        session, DisputeProposal.proposed_at, DisputeProposal.deal_id == deal_id
    )


async def settle(
    session: AsyncSession,
    proposal_id: uuid.UUID,
    status: str,
    by: str,
    decider_id: uuid.UUID | None,
    at: datetime,
) -> bool:
    """Move a pending proposal to ``status``, once: a conditional update, so of two operators
    racing (on PostgreSQL the second waits for the first's row lock, on SQLite for its write
    lock) exactly one changes the row. Whether this call did."""
    result = await session.execute(
        update(DisputeProposal)
        .where(DisputeProposal.id == proposal_id, DisputeProposal.status == PENDING)
        .values(status=status, decided_by=by, decider_id=decider_id, decided_at=at)
        .execution_options(synchronize_session=False)
    )
    assert isinstance(result, CursorResult)
    changed = result.rowcount == 1
    if changed:
        row = await session.get(DisputeProposal, proposal_id)
        if row is not None:
            await session.refresh(row)
    return changed
