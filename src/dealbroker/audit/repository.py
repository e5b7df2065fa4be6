"""Every query of the audit trail."""

import uuid
from collections.abc import Sequence
from typing import TypeVarTuple

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit.models import AuditRecord

Ts = TypeVarTuple("Ts")


def _of(query: Select[*Ts], integration_id: uuid.UUID | None) -> Select[*Ts]:
    if integration_id is None:
        return query
    return query.where(AuditRecord.integration_id == integration_id)


async def page(
    session: AsyncSession, offset: int, limit: int, integration_id: uuid.UUID | None = None
) -> Sequence[AuditRecord]:
    """Records newest first, ``limit`` of them from ``offset`` (of one integration's, when
    given)."""
    query = select(AuditRecord).order_by(AuditRecord.id.desc()).offset(offset).limit(limit)
    return (await session.scalars(_of(query, integration_id))).all()


async def count(session: AsyncSession, integration_id: uuid.UUID | None = None) -> int:
    query = _of(select(func.count()).select_from(AuditRecord), integration_id)
    return int(await session.scalar(query) or 0)


async def older_than(
    session: AsyncSession, before_id: int | None, limit: int
) -> Sequence[AuditRecord]:
    """Up to ``limit`` records newest first, all older than ``before_id`` (from the newest when
    None): the export's batches, which stay correct while records are added."""
    query = select(AuditRecord).order_by(AuditRecord.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(AuditRecord.id < before_id)
    return (await session.scalars(query)).all()
