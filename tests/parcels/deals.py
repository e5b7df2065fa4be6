"""Carrier deals for the parcel tests: paid, with the addresses a booking needs, driven through
the real services (``tests.lifecycle_helpers``) on the test database."""

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core.settings import Settings
from dealbroker.deals.models import Deal
from dealbroker.notifications.models import OutboxMessage
from dealbroker.parcels import service as parcels
from dealbroker.parcels.models import Parcel
from tests.lifecycle_helpers import DealDriver, paid

SELLER_ADDRESS = {
    "address": "Storgata 1",
    "postcode": "0155",
    "town": "Oslo",
    "phone": "+4790000001",
}
BUYER_CONTACT = {
    "name": "Ola Nordmann",
    "email": "ola@example.com",
    "phone": "+4790000002",
    "address": "Kongens gate 2",
    "postcode": "7011",
    "town": "Trondheim",
}


def carrier_settings(db_url: str, carrier: str = "simulated", **more: Any) -> Settings:
    return Settings(
        database_url=db_url,
        environment="sandbox",
        carrier=carrier,  # type: ignore[arg-type]
        secret_key="parcel-tests-" + "k" * 32,
        **more,
    )


async def shipping_pending(sessionmaker: async_sessionmaker[AsyncSession]) -> DealDriver:
    """A paid Carrier deal (``Shipping_Pending``) whose seller and buyer gave their addresses."""
    d = await paid(sessionmaker, "Carrier")

    async def addresses(session: AsyncSession, deal: Deal) -> None:
        deal.seller = {**(deal.seller or {}), **SELLER_ADDRESS}
        deal.buyer_contact = dict(BUYER_CONTACT)

    await d.step(addresses)
    assert await d.status() == "Shipping_Pending"
    return d


async def book(d: DealDriver, settings: Settings, delivery: str = "pickup_point") -> uuid.UUID:
    """The seller asks for a label (what the seller page's booking does)."""
    from dealbroker.carriers.base import Delivery

    async def ask(session: AsyncSession, deal: Deal) -> uuid.UUID:
        parcel = await parcels.request_booking(session, deal, Delivery(delivery), settings)
        return parcel.id

    return await d.step(ask)


async def parcels_of(d: DealDriver) -> list[Parcel]:
    async with d.sessionmaker() as session:
        return list(
            await session.scalars(
                select(Parcel).where(Parcel.deal_id == d.deal_id).order_by(Parcel.created_at)
            )
        )


async def messages(d: DealDriver, kind: str) -> list[OutboxMessage]:
    async with d.sessionmaker() as session:
        return list(
            await session.scalars(
                select(OutboxMessage).where(
                    OutboxMessage.deal_id == d.deal_id, OutboxMessage.kind == kind
                )
            )
        )
