"""All queries on offer links."""

import uuid

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.db import oldest_first
from dealbroker.deals.models import Deal
from dealbroker.offers.models import Offer, OfferLink, OfferStatus


def add(session: AsyncSession, link: OfferLink) -> None:
    session.add(link)


async def by_token_hash(session: AsyncSession, token_hash: str) -> tuple[OfferLink, Deal] | None:
    row = (
        await session.execute(
            select(OfferLink, Deal)
            .join(Deal, Deal.id == OfferLink.deal_id)
            .where(OfferLink.token_hash == token_hash)
        )
    ).one_or_none()
    return None if row is None else (row[0], row[1])


def add_offer(session: AsyncSession, offer: Offer) -> None:
    session.add(offer)


async def offer(session: AsyncSession, deal_id: uuid.UUID, offer_id: uuid.UUID) -> Offer | None:
    return await session.scalar(
        select(Offer).where(Offer.id == offer_id, Offer.deal_id == deal_id).with_for_update()
    )


async def pending_offers(session: AsyncSession, deal_id: uuid.UUID) -> list[Offer]:
    """The deal's pending offers, oldest first."""
    return list(
        await session.scalars(
            select(Offer)
            .where(Offer.deal_id == deal_id, Offer.status == OfferStatus.PENDING)
            .order_by(Offer.created_at, Offer.id)
            .with_for_update()
        )
    )


async def offers_of(session: AsyncSession, deal_id: uuid.UUID) -> list[Offer]:
    return await oldest_first(session, Offer.created_at, Offer.deal_id == deal_id)


async def page_of(
    session: AsyncSession, deal_id: uuid.UUID, offset: int, limit: int
) -> list[Offer]:
    """A slice of the deal's offers, newest first."""
    return list(
        await session.scalars(
            select(Offer)
            .where(Offer.deal_id == deal_id)
            .order_by(Offer.created_at.desc(), Offer.id.desc())
            .offset(offset)
            .limit(limit)
        )
    )


async def count_of(session: AsyncSession, deal_id: uuid.UUID) -> int:
    """How many offers the deal has (a few: one deal's, by its index)."""
    return int(
        await session.scalar(
            select(func.count()).select_from(Offer).where(Offer.deal_id == deal_id)
        )
        or 0
    )


async def offers_from_link(session: AsyncSession, link_id: uuid.UUID) -> list[Offer]:
    return list(
        await session.scalars(
            select(Offer)
            .where(Offer.offer_link_id == link_id)
            .order_by(Offer.created_at.desc(), Offer.id)
        )
    )


async def buyer_names(
    session: AsyncSession, link_ids: list[uuid.UUID]
) -> dict[uuid.UUID, str | None]:
    """Each link's buyer name: the latest offer's through it, else the one the link was made
    with (None when neither gave one)."""
    if not link_ids:
        return {}
    names: dict[uuid.UUID, str | None] = {}
    latest = await session.execute(
        select(Offer.offer_link_id, Offer.buyer_name)
        .where(Offer.offer_link_id.in_(link_ids), Offer.buyer_name.is_not(None))
        .order_by(Offer.created_at.desc(), Offer.id)
    )
    for link_id, name in latest.all():
        if link_id is not None:
            names.setdefault(link_id, name)
    prefilled = await session.execute(
        select(OfferLink.id, OfferLink.buyer_name).where(OfferLink.id.in_(link_ids))
    )
    for link_id, name in prefilled.all():
        names.setdefault(link_id, name)
    return names


async def approved_offer(session: AsyncSession, deal_id: uuid.UUID) -> Offer | None:
    """The offer the seller approved (a deal has at most one)."""
    return await session.scalar(
        select(Offer).where(Offer.deal_id == deal_id, Offer.status == OfferStatus.APPROVED)
    )


async def link(session: AsyncSession, link_id: uuid.UUID) -> OfferLink | None:
    return await session.get(OfferLink, link_id)


async def links_of(
    session: AsyncSession, deal_id: uuid.UUID, link_ids: list[uuid.UUID]
) -> list[OfferLink]:
    """Those of ``link_ids`` that are links of ``deal_id`` (another deal's are left out)."""
    if not link_ids:
        return []
    return list(
        await session.scalars(
            select(OfferLink).where(OfferLink.deal_id == deal_id, OfferLink.id.in_(link_ids))
        )
    )
