"""Queries of the eID signing flows."""

import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.signatures.models import EidSignature


def add(session: AsyncSession, flow: EidSignature) -> None:
    session.add(flow)


async def for_update(session: AsyncSession, flow_id: uuid.UUID) -> EidSignature | None:
    query = select(EidSignature).where(EidSignature.id == flow_id).with_for_update()
    return (await session.scalars(query)).one_or_none()


async def open_flows(
    session: AsyncSession, deal_id: uuid.UUID, signature_type: str
) -> list[EidSignature]:
    query = (
        select(EidSignature)
        .where(
            EidSignature.deal_id == deal_id,
            EidSignature.signature_type == signature_type,
            EidSignature.purpose == "sign",
            EidSignature.status == "Initiated",
        )
        .with_for_update()
    )
    return list((await session.scalars(query)).all())


async def completed(
    session: AsyncSession, deal_id: uuid.UUID, signature_type: str
) -> EidSignature | None:
    """The party's latest completed eID signature of the deal."""
    query = (
        select(EidSignature)
        .where(
            EidSignature.deal_id == deal_id,
            EidSignature.signature_type == signature_type,
            EidSignature.purpose == "sign",
            EidSignature.status == "Completed",
        )
        .order_by(EidSignature.finished_at.desc())
        .limit(1)
    )
    return (await session.scalars(query)).one_or_none()


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
