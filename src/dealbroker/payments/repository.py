"""All queries on payments and payout accounts."""

import uuid
from datetime import datetime

from sqlalchemy import exists, func, select, true, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from dealbroker.core.db import oldest_first
from dealbroker.core.statuses import PaymentStatus
from dealbroker.payments.hold import HELD_KINDS
from dealbroker.payments.models import (
    Payment,
    PayoutAccount,
    PayoutAccountChange,
    PayoutFile,
    PayoutStatusEntry,
    PayoutTransfer,
    ProviderCall,
    StripeEvent,
)

IDS_PER_QUERY = 500


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


async def change_by_id(
    session: AsyncSession, deal_id: uuid.UUID, change_id: uuid.UUID
) -> PayoutAccountChange | None:
    return await session.scalar(
        select(PayoutAccountChange).where(
            PayoutAccountChange.deal_id == deal_id, PayoutAccountChange.id == change_id
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
    return await oldest_first(
        session, PayoutAccountChange.requested_at, PayoutAccountChange.deal_id == deal_id
    )


async def payment(session: AsyncSession, payment_id: uuid.UUID, *, fresh: bool = False) -> Payment:
    """A payment by id, row locked; ``fresh`` reads it anew even if this session read it
    before the lock (another transaction may have changed it since)."""
    query = select(Payment).where(Payment.id == payment_id).with_for_update()
    if fresh:
        query = query.execution_options(populate_existing=True)
    return (await session.scalars(query)).one()


async def account_by_id(session: AsyncSession, account_id: uuid.UUID) -> PayoutAccount | None:
    return await session.get(PayoutAccount, account_id)


def add_call(session: AsyncSession, call: ProviderCall) -> None:
    session.add(call)


async def pending_call(
    session: AsyncSession, payment_id: uuid.UUID, kind: str
) -> ProviderCall | None:
    """The payment's call of ``kind`` still under way: queued, or submitted to a rail whose
    answer comes later (a payout in a bank file)."""
    return await session.scalar(
        select(ProviderCall).where(
            ProviderCall.payment_id == payment_id,
            ProviderCall.kind == kind,
            ProviderCall.status.in_(("pending", "submitted")),
        )
    )


async def claim_due_calls(
    session: AsyncSession,
    now: datetime,
    lease_until: datetime,
    limit: int,
    money_out: bool = True,
) -> list[ProviderCall]:
    """Up to ``limit`` due pending calls, leased to this worker until ``lease_until`` (another
    worker skips them, and takes them again if this one dies); each counts one more attempt.
    ``money_out`` False leaves the payout and refund calls where they are (``payments.hold``).

    One payment's refund waits while its capture is pending (due, leased or backing off): the
    refund decides on what the provider holds, so it must not run beside the capture that
    changes it (docs/decisions/0028-vipps-capture.md). The capture's end wakes the job."""
    capture = aliased(ProviderCall)
    capture_pending = exists().where(
        capture.payment_id == ProviderCall.payment_id,
        capture.kind == "capture",
        capture.status == "pending",
    )
    calls = list(
        await session.scalars(
            select(ProviderCall)
            .where(
                ProviderCall.status == "pending",
                ProviderCall.next_attempt_at <= now,
                ~((ProviderCall.kind == "refund") & capture_pending),
                true() if money_out else ProviderCall.kind.not_in(HELD_KINDS),
            )
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
    """A call, row locked and read anew (this session may have read it before the lock)."""
    return await session.scalar(
        select(ProviderCall)
        .where(ProviderCall.id == call_id)
        .with_for_update()
        .execution_options(populate_existing=True)
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


async def by_stripe_intent(session: AsyncSession, intent_id: str) -> Payment | None:
    """The payment a Stripe PaymentIntent takes, unlocked (lock its deal first, then
    ``current``, as every payment change does)."""
    return await session.scalar(
        select(Payment).where(Payment.stripe_payment_intent_id == intent_id)
    )


async def by_provider_ref_unlocked(session: AsyncSession, ref: str) -> Payment | None:
    """The payment behind a checkout token, read without a lock: the checkout calls the
    provider next, and no row lock is held across a provider call."""
    return await session.scalar(select(Payment).where(Payment.provider_ref == ref))


async def stripe_event_seen(session: AsyncSession, event_id: str) -> bool:
    return await session.get(StripeEvent, event_id) is not None


def add_stripe_event(session: AsyncSession, event: StripeEvent) -> None:
    session.add(event)


async def payments_between(
    session: AsyncSession, provider: str, since: datetime, until: datetime
) -> list[Payment]:
    """Payments made through ``provider`` in ``[since, until)``, oldest first."""
    return await oldest_first(
        session,
        Payment.created_at,
        Payment.provider == provider,
        Payment.created_at >= since,
        Payment.created_at < until,
    )


async def payments_by_ids(session: AsyncSession, ids: list[uuid.UUID]) -> list[Payment]:
    """Those of ``ids`` that are payments of ours, not locked (reconciliation reads them), in a
    query per ``IDS_PER_QUERY`` ids (a database bounds the parameters of one)."""
    found: list[Payment] = []
    for start in range(0, len(ids), IDS_PER_QUERY):
        chunk = ids[start : start + IDS_PER_QUERY]
        found.extend(await session.scalars(select(Payment).where(Payment.id.in_(chunk))))
    return found


async def call_counts(
    session: AsyncSession, payment_ids: list[uuid.UUID], kind: str
) -> dict[uuid.UUID, int]:
    """How many calls of ``kind`` each of these payments has had, whatever became of them."""
    counts: dict[uuid.UUID, int] = dict.fromkeys(payment_ids, 0)
    for start in range(0, len(payment_ids), IDS_PER_QUERY):
        chunk = payment_ids[start : start + IDS_PER_QUERY]
        rows = await session.execute(
            select(ProviderCall.payment_id, func.count())
            .where(ProviderCall.payment_id.in_(chunk), ProviderCall.kind == kind)
            .group_by(ProviderCall.payment_id)
        )
        counts.update({payment_id: n for payment_id, n in rows.tuples()})
    return counts


async def payments_in_status(
    session: AsyncSession, statuses: frozenset[str], since: datetime, until: datetime
) -> list[Payment]:
    """Payments of any provider created in ``[since, until)`` now in one of ``statuses``,
    oldest first."""
    return await oldest_first(
        session,
        Payment.created_at,
        Payment.status.in_(sorted(statuses)),
        Payment.created_at >= since,
        Payment.created_at < until,
    )


async def succeeded_calls(
    session: AsyncSession, payment_ids: list[uuid.UUID]
) -> list[ProviderCall]:
    """The refunds and payouts the provider made for these payments."""
    if not payment_ids:
        return []
    return list(
        await session.scalars(
            select(ProviderCall).where(
                ProviderCall.payment_id.in_(payment_ids), ProviderCall.status == "succeeded"
            )
        )
    )


# --- the bank-file payout rail -------------------------------------------------------------


async def calls_to_export(session: AsyncSession, limit: int) -> list[ProviderCall]:
    """Payouts submitted to the bank-file rail and in no file yet, oldest first, row locked.
    Rows another export holds are skipped, and the export marks each row it takes (its
    ``payout_file_id``), so two exports racing never put one payout in two files."""
    return list(
        await session.scalars(
            select(ProviderCall)
            .where(
                ProviderCall.kind == "payout",
                ProviderCall.status == "submitted",
                ProviderCall.payout_file_id.is_(None),
                ProviderCall.rail.is_distinct_from("swish"),  # paid by Swish, not by a file
            )
            .order_by(ProviderCall.created_at, ProviderCall.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )


async def swish_requests_to_poll(
    session: AsyncSession, since: datetime, until: datetime, limit: int
) -> list[uuid.UUID]:
    """Open Swish payments whose payment request was asked for (a callback hash kept), last
    changed between ``since`` and ``until``, oldest change first."""
    return list(
        await session.scalars(
            select(Payment.id)
            .where(
                Payment.provider == "swish",
                Payment.status.in_([PaymentStatus.CREATED.value, PaymentStatus.PROCESSING.value]),
                Payment.swish_callback_hash.is_not(None),
                Payment.updated_at > since,
                Payment.updated_at < until,
            )
            .order_by(Payment.updated_at, Payment.id)
            .limit(limit)
        )
    )


async def swish_payouts_to_poll(
    session: AsyncSession, rail: str, now: datetime, limit: int
) -> list[ProviderCall]:
    """Payouts submitted to ``rail`` whose answer is due (``next_attempt_at``), oldest first,
    row locked; rows another worker holds are skipped."""
    return list(
        await session.scalars(
            select(ProviderCall)
            .where(
                ProviderCall.kind == "payout",
                ProviderCall.status == "submitted",
                ProviderCall.rail == rail,
                ProviderCall.next_attempt_at <= now,
            )
            .order_by(ProviderCall.next_attempt_at, ProviderCall.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )


async def swish_payout_calls(
    session: AsyncSession, rail: str, since: datetime, until: datetime
) -> list[ProviderCall]:
    """Payouts handed to ``rail`` that were created in ``[since, until)`` (reconciliation)."""
    return list(
        await session.scalars(
            select(ProviderCall)
            .where(
                ProviderCall.kind == "payout",
                ProviderCall.rail == rail,
                ProviderCall.created_at >= since,
                ProviderCall.created_at < until,
            )
            .order_by(ProviderCall.created_at)
        )
    )


def add_payout_file(
    session: AsyncSession, payout_file: PayoutFile, transfers: list[PayoutTransfer]
) -> None:
    session.add(payout_file)
    session.add_all(transfers)


async def payout_file(session: AsyncSession, message_id: str) -> PayoutFile | None:
    return await session.scalar(select(PayoutFile).where(PayoutFile.message_id == message_id))


async def transfer(session: AsyncSession, end_to_end_id: str) -> PayoutTransfer | None:
    return await session.get(PayoutTransfer, end_to_end_id)


async def transfers_in_file(session: AsyncSession, message_id: str) -> list[PayoutTransfer]:
    return list(
        await session.scalars(
            select(PayoutTransfer)
            .join(PayoutFile, PayoutFile.id == PayoutTransfer.file_id)
            .where(PayoutFile.message_id == message_id)
            .order_by(PayoutTransfer.end_to_end_id)
        )
    )


async def report_imported(session: AsyncSession, message_id: str) -> bool:
    return bool(
        await session.scalar(
            select(exists().where(PayoutStatusEntry.report_message_id == message_id))
        )
    )


def add_status_entry(session: AsyncSession, entry: PayoutStatusEntry) -> None:
    session.add(entry)


async def exported_without_answer(
    session: AsyncSession, since: datetime, until: datetime
) -> list[tuple[PayoutTransfer, PayoutFile]]:
    """Transfers in files written in the period whose payout the bank has not settled yet."""
    rows = await session.execute(
        select(PayoutTransfer, PayoutFile)
        .join(PayoutFile, PayoutFile.id == PayoutTransfer.file_id)
        .join(ProviderCall, ProviderCall.id == PayoutTransfer.call_id)
        .where(
            PayoutFile.created_at >= since,
            PayoutFile.created_at < until,
            ProviderCall.status == "submitted",
        )
        .order_by(PayoutFile.created_at, PayoutTransfer.end_to_end_id)
    )
    return [(t, f) for t, f in rows]


async def status_entries(
    session: AsyncSession, since: datetime, until: datetime
) -> list[tuple[PayoutStatusEntry, PayoutTransfer | None]]:
    """Statuses imported in the period, each with its transfer (None for an id not ours)."""
    rows = await session.execute(
        select(PayoutStatusEntry, PayoutTransfer)
        .outerjoin(PayoutTransfer, PayoutTransfer.end_to_end_id == PayoutStatusEntry.end_to_end_id)
        .where(PayoutStatusEntry.imported_at >= since, PayoutStatusEntry.imported_at < until)
        .order_by(PayoutStatusEntry.imported_at, PayoutStatusEntry.end_to_end_id)
    )
    return [(e, t) for e, t in rows]


async def paid_out_without_confirmation(
    session: AsyncSession, since: datetime, until: datetime
) -> list[Payment]:
    """Payments that became ``PaidOut`` in the period with no bank status that paid them."""
    confirmed = (
        select(PayoutTransfer.payment_id)
        .join(
            PayoutStatusEntry,
            PayoutStatusEntry.end_to_end_id == PayoutTransfer.end_to_end_id,
        )
        .where(PayoutStatusEntry.outcome == "paid")
    )
    return list(
        await session.scalars(
            select(Payment)
            .where(
                Payment.status == "PaidOut",
                Payment.updated_at >= since,
                Payment.updated_at < until,
                Payment.id.not_in(confirmed),
            )
            .order_by(Payment.updated_at)
        )
    )


async def transfers_differing_from_payment(
    session: AsyncSession, since: datetime, until: datetime
) -> list[tuple[PayoutTransfer, Payment]]:
    """Transfers in files of the period whose amount is not the payment's payout."""
    rows = await session.execute(
        select(PayoutTransfer, Payment)
        .join(PayoutFile, PayoutFile.id == PayoutTransfer.file_id)
        .join(Payment, Payment.id == PayoutTransfer.payment_id)
        .where(
            PayoutFile.created_at >= since,
            PayoutFile.created_at < until,
            PayoutTransfer.amount_minor != Payment.payout_minor,
        )
    )
    return [(t, p) for t, p in rows]


async def call(session: AsyncSession, call_id: uuid.UUID) -> ProviderCall | None:
    """A provider call, unlocked (lock its deal first, then ``call_for_update``)."""
    return await session.get(ProviderCall, call_id)


async def latest_call(session: AsyncSession, payment_id: uuid.UUID, kind: str) -> ProviderCall:
    """The payment's newest call of ``kind`` (the caller knows there is one)."""
    found = await session.scalar(
        select(ProviderCall)
        .where(ProviderCall.payment_id == payment_id, ProviderCall.kind == kind)
        .order_by(ProviderCall.created_at.desc(), ProviderCall.id.desc())
        .limit(1)
    )
    assert found is not None
    return found


async def deal_latest_call(
    session: AsyncSession, deal_id: uuid.UUID, kind: str
) -> ProviderCall | None:
    """The deal's newest call of ``kind``, of any of its payments, unlocked; None if none."""
    return await session.scalar(
        select(ProviderCall)
        .where(ProviderCall.deal_id == deal_id, ProviderCall.kind == kind)
        .order_by(ProviderCall.created_at.desc(), ProviderCall.id.desc())
        .limit(1)
    )


async def payouts_not_in_a_file(session: AsyncSession) -> list[tuple[ProviderCall, Payment]]:
    """Payout calls under way and in no bank file yet (queued for the rail, or handed to it and
    waiting for the next export), oldest first, with their payments."""
    rows = await session.execute(
        select(ProviderCall, Payment)
        .join(Payment, Payment.id == ProviderCall.payment_id)
        .where(
            ProviderCall.kind == "payout",
            ProviderCall.status.in_(("pending", "submitted")),
            ProviderCall.payout_file_id.is_(None),
        )
        .order_by(ProviderCall.created_at, ProviderCall.id)
    )
    return [(c, p) for c, p in rows]


async def newest_payout_files(session: AsyncSession, limit: int) -> list[PayoutFile]:
    return list(
        await session.scalars(
            select(PayoutFile)
            .order_by(PayoutFile.created_at.desc(), PayoutFile.id.desc())
            .limit(limit)
        )
    )


async def transfers_with_state(
    session: AsyncSession, file_ids: list[uuid.UUID]
) -> list[tuple[PayoutTransfer, str]]:
    """The files' transfers, each with its payout call's status (``submitted`` until the bank's
    report settles it, then ``succeeded`` or ``failed``)."""
    rows = await session.execute(
        select(PayoutTransfer, ProviderCall.status)
        .join(ProviderCall, ProviderCall.id == PayoutTransfer.call_id)
        .where(PayoutTransfer.file_id.in_(file_ids))
        .order_by(PayoutTransfer.file_id, PayoutTransfer.end_to_end_id)
    )
    return [(t, s) for t, s in rows]


# The refused call, beside the newer calls of its payment it is compared with.
_refused = aliased(ProviderCall)


async def refused_calls(session: AsyncSession, limit: int) -> list[tuple[ProviderCall, Payment]]:
    """Calls the provider refused for good and nobody has tried again since (no newer call of
    the same kind for the payment), newest first, with their payments."""
    newer = (
        select(ProviderCall.id)
        .where(
            ProviderCall.payment_id == _refused.payment_id,
            ProviderCall.kind == _refused.kind,
            ProviderCall.created_at > _refused.created_at,
        )
        .exists()
    )
    rows = await session.execute(
        select(_refused, Payment)
        .join(Payment, Payment.id == _refused.payment_id)
        .where(_refused.status == "failed", ~newer)
        .order_by(_refused.finished_at.desc(), _refused.id)
        .limit(limit)
    )
    return [(c, p) for c, p in rows]


async def payment_unlocked(session: AsyncSession, payment_id: uuid.UUID) -> Payment | None:
    """A payment by id, not locked (lock its deal first, then the payment, to change it)."""
    return await session.scalar(select(Payment).where(Payment.id == payment_id))
