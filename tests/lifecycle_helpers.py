"""Driving a deal through the real services, for lifecycle tests: one transaction per step,
as a request or a job would run it."""

import json
import re
import uuid
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker import settlement
from dealbroker.auth.service import Principal
from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals import repository as deal_rows
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal, DealStatusChange
from dealbroker.deals.schemas import DealCreate
from dealbroker.events.models import Event
from dealbroker.integrations import service as integrations
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers import service as offers
from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment
from dealbroker.payments.tasks import make_pending_calls
from dealbroker.signatures.service import SignatureStatus, SignatureType, record

SETTINGS = Settings(database_url="sqlite://", environment="sandbox")
SELLER = {"firstname": "Kari", "lastname": "Nordmann", "email": "kari@example.com"}


@dataclass
class DealDriver:
    sessionmaker: async_sessionmaker[AsyncSession]
    deal_id: uuid.UUID
    integration_id: uuid.UUID

    async def step(self, action, *args):  # type: ignore[no-untyped-def]
        """Run ``action(session, deal, *args)`` on the locked deal in one transaction, then the
        provider calls it queued, as the worker would."""
        try:
            async with self.sessionmaker() as session, session.begin():
                deal = await deal_rows.by_id_for_update(session, self.deal_id)
                return await action(session, deal, *args)
        finally:
            await run_provider_calls(self.sessionmaker)

    async def fire(self, trigger: Trigger, actor: Actor) -> None:
        await self.step(lambda s, d: flows.fire(s, d, trigger, actor, SETTINGS))

    async def deal(self) -> Deal:
        async with self.sessionmaker() as session:
            deal = await deal_rows.by_id(session, self.deal_id)
            assert deal is not None
            return deal

    async def status(self) -> str:
        return (await self.deal()).status

    async def payment(self) -> Payment | None:
        async with self.sessionmaker() as session:
            return await session.scalar(
                select(Payment)
                .where(Payment.deal_id == self.deal_id)
                .order_by(Payment.created_at.desc())
                .limit(1)
            )

    async def events(self, kind: str | None = None) -> list[Event]:
        async with self.sessionmaker() as session:
            stmt = select(Event).where(Event.deal_id == self.deal_id).order_by(Event.seq)
            if kind:
                stmt = stmt.where(Event.kind == kind)
            return list(await session.scalars(stmt))

    async def history(self) -> list[DealStatusChange]:
        async with self.sessionmaker() as session:
            return await deal_rows.history(session, self.deal_id)

    # --- the steps of a deal, as the seller, buyer, provider and carrier take them ---------

    async def offer(self, shipping: str = "Carrier", price_minor: int = 450_000) -> uuid.UUID:
        async def run(session, deal):  # type: ignore[no-untyped-def]
            offer = await offers.submit(
                session,
                deal,
                price_minor=price_minor,
                shipping_type=shipping,
                buyer_name="Ola",
                buyer_email=f"ola-{uuid.uuid4().hex[:6]}@example.com",
            )
            return offer.id

        return await self.step(run)

    async def approve(self, offer_id: uuid.UUID | None = None) -> None:
        async def run(session, deal):  # type: ignore[no-untyped-def]
            offer = await offers.pending_offer(session, deal, offer_id)
            await offers.approve(session, deal, offer, SETTINGS)

        await self.step(run)

    async def sign(self, party: SignatureType, actor: Actor) -> None:
        await self.step(
            lambda s, d: record(s, d, party, SignatureStatus.COMPLETED, actor, SETTINGS)
        )

    async def pay(self, outcome: str = "succeeded") -> None:
        await self.step(lambda s, d: payments.start(s, d, SETTINGS))
        await self.step(lambda s, d: settlement.settle_payment(s, d, outcome, SETTINGS))

    async def to_signed(self, shipping: str = "Carrier") -> None:
        offer_id = await self.offer(shipping)
        await self.approve(offer_id)
        await self.sign(SignatureType.SELLER, Actor.SELLER)
        await self.sign(SignatureType.BUYER, Actor.BUYER)

    async def payout_account(self, number: str = "NO9386011117947") -> None:
        """The seller says where the money goes; a change of an account already set is
        confirmed through the link e-mailed to them, as the seller would."""

        async def register(session, deal):  # type: ignore[no-untyped-def]
            return await payments.register_payout_account(session, deal, number, "Kari Nordmann")

        request = await self.step(register)
        if request.outcome == "confirm":
            async with self.sessionmaker() as session:
                body = await session.scalar(
                    select(OutboxMessage.body)
                    .where(
                        OutboxMessage.deal_id == self.deal_id,
                        OutboxMessage.kind == "confirm_payout_account",
                    )
                    .order_by(OutboxMessage.created_at.desc())
                    .limit(1)
                )
            token = re.search(r"/payout-account/([\w-]+)", body or "").group(1)  # type: ignore[union-attr]
            await self.step(lambda s, d: payments.confirm_payout_account(s, d, token))


async def run_provider_calls(sessionmaker: async_sessionmaker[AsyncSession]) -> None:
    """Make every queued refund and payout, as the worker's provider-call job does."""
    await make_pending_calls(sessionmaker, SETTINGS)


async def new_deal(
    sessionmaker: async_sessionmaker[AsyncSession], price: float = 4500
) -> DealDriver:
    async with sessionmaker() as session, session.begin():
        created = await integrations.create(session, "Lifecycle")
        principal = Principal(created.integration.id, frozenset({"deals:read", "deals:write"}))
        deal = await deals.create(
            session, principal, DealCreate(name="Bike", price=price, seller=SELLER), "NOK"
        )
    return DealDriver(sessionmaker, deal.id, created.integration.id)


async def assert_events_match_changes(driver: DealDriver) -> None:
    """No status change without its event, no event without its change."""
    history = await driver.history()
    statuses = [e for e in await driver.events("deal.status")]
    import json

    assert [h.to_status for h in history] == [
        json.loads(e.payload)["data"]["status"] for e in statuses
    ]


async def count(sessionmaker: async_sessionmaker[AsyncSession], model: type) -> int:
    async with sessionmaker() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


OLA = "ola@example.com"


async def paid(
    sessionmaker,
    shipping: str,
    *,
    buyer_locale: str | None = None,
    seller_locale: str | None = None,
) -> DealDriver:
    """A deal paid by ``OLA``, who offered without a link (their reminder says so)."""
    d = await new_deal(sessionmaker)

    async def offer(session, deal):  # type: ignore[no-untyped-def]
        deal.seller_locale = seller_locale
        made = await offers.submit(
            session,
            deal,
            price_minor=450_000,
            shipping_type=shipping,
            buyer_name="Ola",
            buyer_email=OLA,
            locale=buyer_locale,
        )
        return made.id

    await d.approve(await d.step(offer))
    await d.sign(SignatureType.SELLER, Actor.SELLER)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    await d.pay()
    return d


def payment_statuses(events) -> list[str]:
    return [json.loads(e.payload)["data"]["status"] for e in events]
