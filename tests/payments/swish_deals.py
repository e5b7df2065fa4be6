"""SEK deals whose seller is paid to a Swish number, driven through the real services (as
``tests.lifecycle_helpers`` does) with the Swish payouts settings of the test: the payout is
decided by these settings, and made only by whoever runs the provider calls with them (the test,
or a real worker)."""

import re
import uuid
from typing import Any

import httpx
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.auth.service import Principal
from dealbroker.core import clock
from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals import repository as deal_rows
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.schemas import DealCreate
from dealbroker.integrations import service as integrations
from dealbroker.integrations.service import deployment_links
from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment, ProviderCall
from dealbroker.signatures.service import SignatureType
from tests.lifecycle_helpers import SELLER, DealDriver
from tests.processes import run_on

SWISH_NUMBER = "070-123 45 67"
PAYEE_ALIAS = "46701234567"
SSN = "19811218-9876"
PAYEE_SSN = "198112189876"


async def in_deal(
    sessionmaker: async_sessionmaker[AsyncSession], deal_id: uuid.UUID, action: Any
) -> Any:
    """``action(session, deal)`` on the locked deal in one transaction (no provider call made)."""
    async with sessionmaker() as session, session.begin():
        deal = await deal_rows.by_id_for_update(session, deal_id)
        return await action(session, deal)


async def swish_deal(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    *,
    number: str = SWISH_NUMBER,
    ssn: str = SSN,
    price_minor: int = 250_000,
) -> DealDriver:
    """A paid SEK pickup deal whose seller gave a Swish number, approved by the buyer: its
    payout is queued for the Swish rail."""
    d = await paid_sek_deal(sessionmaker, price_minor)
    payee = payments.SwishPayee(ssn, settings)
    await in_deal(
        sessionmaker,
        d.deal_id,
        lambda s, deal: payments.register_payout_account(s, deal, number, "Karin Svensson", payee),
    )
    await approved(sessionmaker, d.deal_id, settings)
    payment = await d.payment()
    assert payment is not None
    assert payment.status == "PendingPayOut"
    return d


async def approved(
    sessionmaker: async_sessionmaker[AsyncSession], deal_id: uuid.UUID, settings: Settings
) -> None:
    """The buyer approves the item: the deal completes and its payout is decided."""
    await in_deal(
        sessionmaker,
        deal_id,
        lambda s, deal: flows.fire(s, deal, Trigger.BUYER_APPROVED, Actor.BUYER, settings),
    )


async def paid_sek_deal(
    sessionmaker: async_sessionmaker[AsyncSession], price_minor: int = 250_000
) -> DealDriver:
    """A SEK pickup deal, agreed, signed and paid (by the sandbox's simulated provider)."""
    async with sessionmaker() as session, session.begin():
        created = await integrations.create(session, "Swish payouts")
        principal = Principal(created.integration.id, frozenset({"deals:read", "deals:write"}))
        deal = await deals.create(
            session, principal, DealCreate(name="Cykel", price=2500, seller=SELLER), "SEK"
        )
    d = DealDriver(sessionmaker, deal.id, created.integration.id)
    await d.approve(await d.offer("Pickup", price_minor))
    await d.sign(SignatureType.SELLER, Actor.SELLER)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    await d.pay()
    return d


async def payout_calls(
    sessionmaker: async_sessionmaker[AsyncSession], deal_id: uuid.UUID
) -> list[ProviderCall]:
    async with sessionmaker() as session:
        return list(
            await session.scalars(
                select(ProviderCall)
                .where(ProviderCall.deal_id == deal_id, ProviderCall.kind == "payout")
                .order_by(ProviderCall.created_at)
            )
        )


async def due_now(sessionmaker: async_sessionmaker[AsyncSession], deal_id: uuid.UUID) -> None:
    """The deal's provider calls and Swish polls are due now (a clock brought forward)."""
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(ProviderCall)
            .where(ProviderCall.deal_id == deal_id)
            .values(next_attempt_at=clock.now())
        )


async def payment_of(sessionmaker: async_sessionmaker[AsyncSession], deal_id: uuid.UUID) -> Payment:
    async with sessionmaker() as session:
        payment = await session.scalar(select(Payment).where(Payment.deal_id == deal_id))
        assert payment is not None
        return payment


class SellerPage:
    """The seller's page of one deal, on the running server, as a browser without script uses
    it."""

    def __init__(self, db_url: str, settings: Settings, deal_id: uuid.UUID) -> None:
        async def links(sessionmaker: Any) -> Any:
            async with sessionmaker() as session, session.begin():
                return await deployment_links(session, settings)

        self.links = run_on(db_url, links)
        self.url = self.links.deal_url(deal_id)
        self.path = httpx.URL(self.url).path

    def get(self) -> str:
        answer = httpx.get(self.url, timeout=15)
        assert answer.status_code == 200, answer.text
        return answer.text

    def give_swish(self, number: str, ssn: str, holder: str = "Karin Svensson") -> httpx.Response:
        version = re.search(r'name="version" value="(\d+)"', self.get())
        assert version is not None
        return httpx.post(
            f"{self.url}/-/account",
            data={
                "csrf": self.links.form_token(self.path),
                "version": version.group(1),
                "payout_kind": "swish",
                "swish_holder": holder,
                "swish": number,
                "ssn": ssn,
            },
            timeout=15,
        )
