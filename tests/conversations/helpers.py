"""A deal with offer links, for the conversation tests that call the services directly."""

import uuid
from urllib.parse import parse_qs, urlsplit

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.deals.models import Deal
from dealbroker.offers import service as offers
from dealbroker.offers.models import OfferLink
from tests.conftest import Caller, create_deal


async def offer_link(client: httpx.AsyncClient, caller: Caller, deal_id: str) -> str:
    """A new offer link of the deal: its URL, as the integration gets it."""
    response = await client.post(
        f"/deals/v1/deals/{deal_id}/offer", json={}, headers=caller.headers
    )
    assert response.status_code == 201, response.text
    return str(response.json()["url"])


async def resolved(session: AsyncSession, url: str) -> tuple[OfferLink, Deal]:
    parts = urlsplit(url)
    token = parts.path.rsplit("/", 1)[-1]
    found = await offers.resolve(session, token, parse_qs(parts.query)["offer"][0])
    assert found is not None
    return found


async def deal_with_links(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    links: int = 2,
) -> tuple[uuid.UUID, list[str]]:
    deal = await create_deal(client, caller)
    urls = [await offer_link(client, caller, deal["id"]) for _ in range(links)]
    return uuid.UUID(deal["id"]), urls
