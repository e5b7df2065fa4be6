"""All queries on payments and payout accounts."""

import uuid
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.deals.models import Deal
from dealbroker.payments.models import Payment, PayoutAccount, ProviderCall


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


async def payment(session: AsyncSession, payment_id: uuid.UUID) -> Payment:
    """A payment by id, row locked."""
    return (
        await session.scalars(select(Payment).where(Payment.id == payment_id).with_for_update())
    ).one()


async def account_by_id(session: AsyncSession, account_id: uuid.UUID) -> PayoutAccount | None:
    return await session.get(PayoutAccount, account_id)


def add_call(session: AsyncSession, call: ProviderCall) -> None:
    session.add(call)


async def pending_call(
    session: AsyncSession, payment_id: uuid.UUID, kind: str
) -> ProviderCall | None:
    return await session.scalar(
        select(ProviderCall).where(
            ProviderCall.payment_id == payment_id,
            ProviderCall.kind == kind,
            ProviderCall.status == "pending",
        )
    )


async def claim_due_calls(
    session: AsyncSession, now: datetime, lease_until: datetime, limit: int
) -> list[ProviderCall]:
    """Up to ``limit`` due pending calls, leased to this worker until ``lease_until`` (another
    worker skips them, and takes them again if this one dies); each counts one more attempt."""
    calls = list(
        await session.scalars(
            select(ProviderCall)
            .where(ProviderCall.status == "pending", ProviderCall.next_attempt_at <= now)
            .order_by(ProviderCall.next_attempt_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )
    if calls:
        await session.execute(
            update(ProviderCall)
            .where(ProviderCall.id.in_([c.id for c in calls]))
            .values(next_attempt_at=lease_until, attempts=ProviderCall.attempts + 1)
        )
    return calls


async def call_for_update(session: AsyncSession, call_id: uuid.UUID) -> ProviderCall | None:
    return await session.scalar(
        select(ProviderCall).where(ProviderCall.id == call_id).with_for_update()
    )
