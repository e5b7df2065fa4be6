"""All queries on payments and payout accounts."""

import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.deals.models import Deal
from dealbroker.payments.models import Payment, PayoutAccount


def add(session: AsyncSession, payment: Payment) -> None:
    session.add(payment)


def add_account(session: AsyncSession, account: PayoutAccount) -> None:
    session.add(account)


async def current(session: AsyncSession, deal_id: uuid.UUID) -> Payment | None:
    """The deal's latest payment, row locked."""
    return await session.scalar(
        select(Payment)
        .where(Payment.deal_id == deal_id)
        .order_by(Payment.created_at.desc(), Payment.id.desc())
        .limit(1)
        .with_for_update()
    )


async def by_provider_ref(session: AsyncSession, ref: str) -> Payment | None:
    return await session.scalar(
        select(Payment).where(Payment.provider_ref == ref).with_for_update()
    )


async def payout_account(session: AsyncSession, user_id: uuid.UUID) -> PayoutAccount | None:
    return await session.scalar(select(PayoutAccount).where(PayoutAccount.user_id == user_id))


async def waiting_for_payout(
    session: AsyncSession, seller_user_id: uuid.UUID
) -> list[tuple[Deal, Payment]]:
    rows = await session.execute(
        select(Deal, Payment)
        .join(Payment, Payment.deal_id == Deal.id)
        .where(
            Deal.seller_user_id == seller_user_id,
            Payment.status.in_(["PendingPayOut", "PayoutFailed"]),
        )
        .with_for_update()
    )
    return [(r[0], r[1]) for r in rows]
