"""Queries of the eID signing flows."""

import uuid
from datetime import datetime

from sqlalchemy import Select, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.db import delete_batch, oldest_batch
from dealbroker.signatures.models import EidSignature


def add(session: AsyncSession, flow: EidSignature) -> None:
    session.add(flow)


async def for_update(session: AsyncSession, flow_id: uuid.UUID) -> EidSignature | None:
    query = select(EidSignature).where(EidSignature.id == flow_id).with_for_update()
    return (await session.scalars(query)).one_or_none()


async def open_flows(
    session: AsyncSession, deal_id: uuid.UUID, signature_type: str
) -> list[EidSignature]:
    query = _signing(deal_id, signature_type, "Initiated").with_for_update()
    return list((await session.scalars(query)).all())


async def completed(
    session: AsyncSession, deal_id: uuid.UUID, signature_type: str
) -> EidSignature | None:
    """The party's latest completed eID signature of the deal."""
    query = _signing(deal_id, signature_type, "Completed")
    query = query.order_by(EidSignature.finished_at.desc()).limit(1)
    return (await session.scalars(query)).one_or_none()


def _signing(deal_id: uuid.UUID, signature_type: str, status: str) -> Select[EidSignature]:
    """The deal's flows that sign it for ``signature_type``'s party, in ``status``."""
    return select(EidSignature).where(
        EidSignature.deal_id == deal_id,
        EidSignature.signature_type == signature_type,
        EidSignature.purpose == "sign",
        EidSignature.status == status,
    )


async def completed_of_deal(session: AsyncSession, deal_id: uuid.UUID) -> list[EidSignature]:
    """The deal's completed eID signatures, earliest first."""
    query = (
        select(EidSignature)
        .where(
            EidSignature.deal_id == deal_id,
            EidSignature.purpose == "sign",
            EidSignature.status == "Completed",
        )
        .order_by(EidSignature.finished_at)
    )
    return list((await session.scalars(query)).all())


async def of_deal(session: AsyncSession, deal_id: uuid.UUID) -> list[EidSignature]:
    """Every eID flow of the deal (signatures and payout confirmations), earliest first."""
    query = (
        select(EidSignature)
        .where(EidSignature.deal_id == deal_id)
        .order_by(EidSignature.started_at, EidSignature.id)
    )
    return list((await session.scalars(query)).all())


async def abandoned(session: AsyncSession, before: datetime, limit: int) -> list[EidSignature]:
    """Up to ``limit`` flows still waiting for their party's return that started before
    ``before``, oldest first, locked (another worker skips them)."""
    query = (
        select(EidSignature)
        .where(EidSignature.status == "Initiated", EidSignature.started_at < before)
        .order_by(EidSignature.started_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list((await session.scalars(query)).all())


def purgeable_unfinished(before: datetime, limit: int) -> Select[uuid.UUID]:
    """The oldest ``limit`` flows that started before ``before`` and did not complete (failed,
    or never back), through ``ix_eid_signatures_started_at``."""
    query = select(EidSignature.id).where(
        EidSignature.started_at < before, EidSignature.status != "Completed"
    )
    return oldest_batch(query, EidSignature.started_at, limit)


async def purge_unfinished(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete one batch of ``purgeable_unfinished``; returns how many went."""
    chosen = EidSignature.id.in_(purgeable_unfinished(before, limit))
    return await delete_batch(session, EidSignature, chosen)


def forgettable_evidence(before: datetime, limit: int) -> Select[uuid.UUID]:
    """The oldest ``limit`` completed signatures finished before ``before`` that still name
    their person, through ``ix_eid_signatures_finished_at``."""
    query = select(EidSignature.id).where(
        EidSignature.finished_at < before,
        EidSignature.status == "Completed",
        EidSignature.subject.is_not(None),
    )
    return oldest_batch(query, EidSignature.finished_at, limit)


async def forget_evidence(session: AsyncSession, before: datetime, limit: int) -> int:
    """Clear the person of one batch of ``forgettable_evidence`` (name, birth date, the
    number's hash, the subject); the issuer, level, token id and time stay. How many."""
    result = await session.execute(
        update(EidSignature)
        .where(EidSignature.id.in_(forgettable_evidence(before, limit)))
        .values(name=None, birthdate=None, national_id_hash=None, subject=None)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
