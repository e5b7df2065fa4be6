"""Reconciliation: our payments, refunds and payouts against the provider's records of a period.

Each kind of the provider's records comes from a ``Source``; ``sources`` lists them. Stripe's
(``StripePayIns``) holds its PaymentIntents and Refunds; the payouts' bank transfer files and the
bank's status reports (``BankFilePayouts``, from ``payments.bank_file.reconcile``) are another.
A source returns every difference it finds:

- a record on one side only ("missing here", "missing at the provider");
- a different amount or currency;
- a status that disagrees about the money: the provider took it and we do not hold it, or we
  hold it and the provider did not take it; a refund we count as made that the provider has
  not made;
- and, on our side alone, money not conserved: a refund of less than the amount, a payout that
  is not the amount less the fee.

A record is in a period by its creation time on its side. A payment made just before a period
ends may have its PaymentIntent created just after: widen the period when an edge shows one.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core import money
from dealbroker.core.errors import Conflict, NotFound, found
from dealbroker.core.settings import Settings
from dealbroker.payments import bank_file, repository, service
from dealbroker.payments.escrow import deal_side
from dealbroker.payments.models import Payment, ProviderCall
from dealbroker.payments.provider import provider_for
from dealbroker.payments.service import CallKind, PaymentStatus
from dealbroker.payments.stripe_provider import Record, StripeProvider

P = PaymentStatus
# Our statuses in which the buyer's money has come in (and may since have gone out again).
MONEY_IN = frozenset(
    {P.PAID, P.PENDING_PAYOUT, P.PAID_OUT, P.PAYOUT_FAILED, P.PAYOUT_CANCELLED, P.REFUNDED}
)


@dataclass(frozen=True)
class Difference:
    kind: str  # "payment", "refund" or "payout"
    ref: str  # the provider's id, or ours when the provider has none
    what: str

    def line(self) -> str:
        return f"{self.kind} {self.ref}: {self.what}"


class Source(Protocol):
    name: str

    async def differences(
        self, sessionmaker: async_sessionmaker[AsyncSession], since: datetime, until: datetime
    ) -> list[Difference]:
        """Every difference in ``[since, until)``. The provider is asked first, with no
        transaction open; our rows are read after."""
        ...


def _amount(minor: int, currency: str) -> str:
    return f"{currency} {money.to_string(minor)}"


class StripePayIns:
    """Stripe's PaymentIntents and Refunds against our payments and refund calls."""

    name = "stripe"

    def __init__(self, provider: StripeProvider) -> None:
        self.provider = provider

    async def differences(
        self, sessionmaker: async_sessionmaker[AsyncSession], since: datetime, until: datetime
    ) -> list[Difference]:
        records = await self.provider.records(since, until)
        async with sessionmaker() as session:
            ours = [
                p
                for p in await repository.payments_between(session, since, until)
                if p.provider == "stripe"
            ]
            refunds = [
                c
                for c in await repository.succeeded_calls(session, [p.id for p in ours])
                if c.kind == CallKind.REFUND
            ]
        found = _payments(ours, [r for r in records if r.kind == "payment"])
        found += _refunds(ours, refunds, [r for r in records if r.kind == "refund"])
        found += _conservation(ours)
        return found


def _payments(ours: list[Payment], theirs: list[Record]) -> list[Difference]:
    found: list[Difference] = []
    their_ids = {r.id: r for r in theirs}
    for payment in ours:
        intent = their_ids.pop(payment.stripe_payment_intent_id or "", None)
        if intent is None:
            if payment.stripe_payment_intent_id is not None:
                found.append(
                    Difference(
                        "payment",
                        payment.stripe_payment_intent_id,
                        f"missing at the provider (our payment {payment.id})",
                    )
                )
            continue
        if (intent.amount_minor, intent.currency) != (payment.amount_minor, payment.currency):
            found.append(
                Difference(
                    "payment",
                    intent.id,
                    f"amount {_amount(payment.amount_minor, payment.currency)} here, "
                    f"{_amount(intent.amount_minor, intent.currency)} at the provider",
                )
            )
        ours_in = PaymentStatus(payment.status) in MONEY_IN
        theirs_in = intent.status == "succeeded"
        if ours_in != theirs_in:
            found.append(
                Difference(
                    "payment",
                    intent.id,
                    f"status {payment.status} here, {intent.status} at the provider",
                )
            )
    for intent in their_ids.values():
        state = f"{_amount(intent.amount_minor, intent.currency)}, {intent.status}"
        found.append(Difference("payment", intent.id, f"missing here ({state})"))
    return found


def _refunds(
    ours: list[Payment], calls: list[ProviderCall], theirs: list[Record]
) -> list[Difference]:
    found: list[Difference] = []
    their_ids = {r.id: r for r in theirs}
    payments = {p.id: p for p in ours}
    by_intent = {p.stripe_payment_intent_id: p for p in ours if p.stripe_payment_intent_id}
    for call in calls:
        payment = payments[call.payment_id]
        refund = their_ids.pop(call.provider_ref or "", None)
        if refund is None:
            found.append(
                Difference(
                    "refund",
                    call.provider_ref or str(call.id),
                    f"missing at the provider (our payment {payment.id})",
                )
            )
            continue
        if (refund.amount_minor, refund.currency) != (payment.amount_minor, payment.currency):
            found.append(
                Difference(
                    "refund",
                    refund.id,
                    f"amount {_amount(payment.amount_minor, payment.currency)} here, "
                    f"{_amount(refund.amount_minor, refund.currency)} at the provider",
                )
            )
        if refund.status not in ("succeeded", "pending"):
            found.append(
                Difference("refund", refund.id, f"made here, {refund.status} at the provider")
            )
    for refund in their_ids.values():
        refunded = by_intent.get(refund.payment_intent_id or "")
        whose = f"of our payment {refunded.id}" if refunded else "of no payment of ours"
        found.append(
            Difference(
                "refund",
                refund.id,
                f"missing here ({_amount(refund.amount_minor, refund.currency)}, {whose})",
            )
        )
    return found


def _conservation(ours: list[Payment]) -> list[Difference]:
    """Money in equals money out, on our rows: a refund returns the amount, a payout is the
    amount less the fee, and never both."""
    found: list[Difference] = []
    for p in ours:
        ref = p.stripe_payment_intent_id or str(p.id)
        if p.status == P.REFUNDED and (p.refunded_minor, p.paid_out_minor) != (p.amount_minor, 0):
            found.append(Difference("payment", ref, "refunded, but not the whole amount"))
        if p.status == P.PAID_OUT and (
            p.paid_out_minor + p.fee_minor != p.amount_minor or p.refunded_minor
        ):
            found.append(Difference("payout", ref, "paid out, but not the amount less the fee"))
    return found


class BankFilePayouts:
    """The payouts in our bank files against the bank's status reports."""

    name = "bank files"

    async def differences(
        self, sessionmaker: async_sessionmaker[AsyncSession], since: datetime, until: datetime
    ) -> list[Difference]:
        async with sessionmaker() as session, session.begin():
            found = await bank_file.reconcile(session, since, until)
        return [
            Difference("payout", d.end_to_end_id or str(d.payment_id), f"{d.kind}: {d.detail}")
            for d in found
        ]


def sources(settings: Settings, bank_files: bool = True) -> list[Source]:
    """The provider's records to compare with ours: Stripe's pay-ins and refunds, and (unless
    ``bank_files`` is False: a caller that shows ``bank_file.reconcile`` itself) the bank's
    answers to our payout files."""
    provider = provider_for(settings)
    found: list[Source] = [StripePayIns(provider)] if isinstance(provider, StripeProvider) else []
    if bank_files and settings.payout_rail == "bank_file":
        found.append(BankFilePayouts())
    return found


@dataclass(frozen=True)
class LateRefund:
    payment_id: str
    deal_id: str
    queued: bool  # False: its refund was under way or made already


async def refund_taken_late(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings, intent_id: str
) -> LateRefund:
    """Refund the money Stripe took on PaymentIntent ``intent_id`` for a payment of ours that
    does not pay for its deal (a ``status ... here, succeeded at the provider`` line of
    ``reconcile`` for a payment still open or closed). Stripe is asked first, with no
    transaction open; the refund is queued in one (``payments.refund_taken_late``), once."""
    provider = provider_for(settings)
    if not isinstance(provider, StripeProvider):
        raise Conflict("Late payments are refunded this way with the Stripe provider only.")
    async with sessionmaker() as session:
        payment = await repository.by_stripe_intent(session, intent_id)
    if payment is None:
        raise NotFound(f"No payment of ours has PaymentIntent {intent_id}.")
    record = await provider.payment_record(intent_id)
    if record is None or record.status != "succeeded":
        state = "unknown" if record is None else record.status
        raise Conflict(f"PaymentIntent {intent_id} is {state} at Stripe: no money to refund.")
    if (record.amount_minor, record.currency) != (payment.amount_minor, payment.currency):
        raise Conflict(
            f"PaymentIntent {intent_id} took {_amount(record.amount_minor, record.currency)}, "
            f"not our payment's {_amount(payment.amount_minor, payment.currency)}: refund it by "
            "hand."
        )
    async with sessionmaker() as session, session.begin():
        deal = found(
            await deal_side().lock(session, payment.deal_id), f"No deal {payment.deal_id}."
        )
        locked = await repository.payment(session, payment.id, fresh=True)
        queued = await service.refund_taken_late(session, deal, locked)
    return LateRefund(str(payment.id), str(payment.deal_id), queued)


async def reconcile(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    since: datetime,
    until: datetime,
    *,
    bank_files: bool = True,
) -> list[Difference]:
    """Every difference between our records of ``[since, until)`` and the provider's (and the
    bank's, unless ``bank_files`` is False)."""
    found: list[Difference] = []
    for source in sources(settings, bank_files):
        found += await source.differences(sessionmaker, since, until)
    return found
