"""Every query of the audit trail."""

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit.models import AuditRecord


async def page(session: AsyncSession, offset: int, limit: int) -> Sequence[AuditRecord]:
    """Records newest first, ``limit`` of them from ``offset``."""
    rows = await session.scalars(
        select(AuditRecord).order_by(AuditRecord.id.desc()).offset(offset).limit(limit)
    )
    return rows.all()


async def count(session: AsyncSession) -> int:
    return int(await session.scalar(select(func.count()).select_from(AuditRecord)) or 0)


async def older_than(
    session: AsyncSession, before_id: int | None, limit: int
) -> Sequence[AuditRecord]:
    """Up to ``limit`` records newest first, all older than ``before_id`` (from the newest when
    None): the export's batches, which stay correct while records are added."""
    query = select(AuditRecord).order_by(AuditRecord.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(AuditRecord.id < before_id)
    return (await session.scalars(query)).all()
