"""All queries on offer links."""

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.deals.models import Deal
from dealbroker.offers.models import OfferLink


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
