"""Every query of operators, their login links and sessions."""

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.operators.models import Operator, OperatorLoginLink, OperatorSession


async def by_email(session: AsyncSession, email: str) -> Operator | None:
    return await session.scalar(select(Operator).where(Operator.email_key == email.lower()))


async def by_id(session: AsyncSession, operator_id: uuid.UUID) -> Operator | None:
    return await session.get(Operator, operator_id)


async def every(session: AsyncSession) -> Sequence[Operator]:
    return (await session.scalars(select(Operator).order_by(Operator.email_key))).all()


async def link_for_update(session: AsyncSession, token_hash: str) -> OperatorLoginLink | None:
    return await session.scalar(
        select(OperatorLoginLink)
        .where(OperatorLoginLink.token_hash == token_hash)
        .with_for_update()
    )


async def session_row(session: AsyncSession, token_hash: str) -> OperatorSession | None:
    return await session.get(OperatorSession, token_hash)


async def end_sessions(session: AsyncSession, operator_id: uuid.UUID) -> None:
    """Log the operator out everywhere (disabled, or their roles changed)."""
    await session.execute(delete(OperatorSession).where(OperatorSession.operator_id == operator_id))


async def end_session(session: AsyncSession, token_hash: str) -> None:
    await session.execute(delete(OperatorSession).where(OperatorSession.token_hash == token_hash))


async def drop_expired(session: AsyncSession, now: datetime) -> None:
    await session.execute(delete(OperatorSession).where(OperatorSession.expires_at <= now))
    await session.execute(delete(OperatorLoginLink).where(OperatorLoginLink.expires_at <= now))
