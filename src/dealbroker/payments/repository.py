"""All queries on payments and payout accounts."""

import uuid
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.payments.models import Payment, PayoutAccount, PayoutAccountChange, ProviderCall


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


async def payout_account(session: AsyncSession, deal_id: uuid.UUID) -> PayoutAccount | None:
    return await session.scalar(select(PayoutAccount).where(PayoutAccount.deal_id == deal_id))


def add_change(session: AsyncSession, change: PayoutAccountChange) -> None:
    session.add(change)


async def pending_changes(session: AsyncSession, deal_id: uuid.UUID) -> list[PayoutAccountChange]:
    return list(
        await session.scalars(
            select(PayoutAccountChange)
            .where(PayoutAccountChange.deal_id == deal_id, PayoutAccountChange.status == "pending")
            .order_by(PayoutAccountChange.requested_at)
            .with_for_update()
        )
    )


async def change_by_token(
    session: AsyncSession, deal_id: uuid.UUID, token_hash: str
) -> PayoutAccountChange | None:
    return await session.scalar(
        select(PayoutAccountChange)
        .where(
            PayoutAccountChange.deal_id == deal_id,
            PayoutAccountChange.token_hash == token_hash,
        )
        .with_for_update()
    )


async def account_changes(session: AsyncSession, deal_id: uuid.UUID) -> list[PayoutAccountChange]:
    """A deal's payout-account audit trail, oldest first."""
    return list(
        await session.scalars(
            select(PayoutAccountChange)
            .where(PayoutAccountChange.deal_id == deal_id)
            .order_by(PayoutAccountChange.requested_at, PayoutAccountChange.id)
        )
    )


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


async def payments_of(session: AsyncSession, deal_id: uuid.UUID) -> list[Payment]:
    return list(
        await session.scalars(
            select(Payment).where(Payment.deal_id == deal_id).order_by(Payment.created_at)
        )
    )


async def calls_of(session: AsyncSession, deal_id: uuid.UUID) -> list[ProviderCall]:
    return list(
        await session.scalars(
            select(ProviderCall)
            .where(ProviderCall.deal_id == deal_id)
            .order_by(ProviderCall.created_at)
        )
    )
