"""The back office's deal search: one query, a deal id or an e-mail address, never a scan.

A deal id finds that deal; an e-mail address (compared case-insensitively, whole) finds the
deals it sells and those it is the buyer of (the approved offer's buyer), newest first, at
most ``MAX_RESULTS``. Deals carry no reference of the integration's own: the deal id is what an
integration keeps. Anything else finds nothing."""

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.deals import repository

MAX_QUERY = 254  # the longest e-mail address
MAX_RESULTS = 50


@dataclass(frozen=True)
class Found:
    """A deal as the search lists it."""

    id: uuid.UUID
    name: str | None
    status: str
    price_minor: int | None
    currency: str
    created_at: datetime
    integration: str
    seller_email: str | None
    buyer_email: str | None


def _deal_id(query: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(query)
    except ValueError:
        return None


async def search(session: AsyncSession, query: str) -> list[Found]:
    """The deals ``query`` names (see the module's docstring)."""
    query = query.strip()[: MAX_QUERY + 1]
    if not query or len(query) > MAX_QUERY:
        return []
    deal_id = _deal_id(query)
    if deal_id is not None:
        rows = await repository.search(session, deal_id=deal_id, limit=MAX_RESULTS)
    elif "@" in query:
        rows = await repository.search(session, email=query.lower(), limit=MAX_RESULTS)
    else:
        return []
    return [
        Found(
            id=row.id,
            name=row.name,
            status=str(row.status),
            price_minor=row.price_minor,
            currency=row.currency,
            created_at=row.created_at,
            integration=row.integration,
            seller_email=row.seller_email,
            buyer_email=row.buyer_email,
        )
        for row in rows
    ]
