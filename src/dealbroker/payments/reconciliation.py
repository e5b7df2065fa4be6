"""Reconciliation: our payments, refunds and payouts against the provider's records of a period.

Each kind of the provider's records comes from a ``Source``; ``sources`` lists them. Stripe's
(``StripePayIns``) holds its PaymentIntents and Refunds; Vipps MobilePay's (``VippsPayIns``) its
record of each of our Vipps payments, and its funds ledger (``VippsLedger``) every capture and
refund it made, known to our database or not; Swish's (``SwishPayIns``) its payment requests and
refunds; the payouts' bank transfer files and the bank's status reports (``BankFilePayouts``,
from ``payments.bank_file.reconcile``) are another, and Swish's record of each Swish payout
(``SwishPayoutRecords``) a third.
A source returns every difference it finds:

- a record on one side only ("missing here", "missing at the provider");
- a different amount or currency;
- a status that disagrees about the money: the provider took it and we do not hold it, or we
  hold it and the provider did not take it; a refund we count as made that the provider has
  not made;
- and, on our side alone, money not conserved: a refund of less than the amount, a payout that
  is not the amount less fee and shipping (``core.money.Escrowed``).

A source whose records cannot be read (the provider times out, answers 5xx, or refuses our
credentials) is one difference of its own, ``source <name>: could not be read: ...``; the other
sources are compared as ever, so one provider down neither hides the rest nor ends the run.

A record is in a period by its creation time on its side. A payment made just before a period
ends may have its PaymentIntent created just after: widen the period when an edge shows one.

The Vipps ledger (``VippsLedger``) is what names Vipps money our database does not know (after
a restore to an earlier moment): the ePayment API lists no payments, so ``VippsPayIns`` can only
ask about the payments we hold. The ledger's capture and refund entries of our references are
in the period by their ``time``, read from the ledger dates the period touches (days in
``DEALBROKER_TIME_ZONE``, at most ``vipps.MAX_LEDGER_DATES``: a longer period is one ``source``
line saying so, and the other sources are compared). The payments of the period are left to
``VippsPayIns``, which compares all of Vipps's record of them; for the others it names a capture
or refund of a payment we have no row of, a capture of a payment not captured here, and refunds
that are not what we count refunded. A reservation never captured moves no money and is in no
ledger: it lapses by itself at Vipps, and the buyer's money is released.

A ledger date Vipps has not closed yet (``tryLater``: the day still running, or just over) is
compared on the entries booked so far, and is not a difference of its own: every source reads
the provider's records as they are when it runs, and a run over a period reaching now (each
run after a restore) would otherwise never be clean, so ``reconcile`` would exit 1 whatever the
money. A date Vipps has no report of yet (404) is one ``source`` line: none of its entries were
compared. The report trails the ePayment API by a second or so, by hours when Vipps has
trouble: a run right after money moved may not see it yet.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

import httpx
import stripe
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.audit.service import Actor
from dealbroker.core import clock, money
from dealbroker.core.errors import Conflict, NotFound, found
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import PaymentStatus
from dealbroker.payments import bank_file, methods, repository, service, swish_payouts
from dealbroker.payments.escrow import deal_side
from dealbroker.payments.models import Payment, PayoutAccount, ProviderCall
from dealbroker.payments.provider import (
    ProviderError,
    provider_for,
    provider_named,
    provider_of,
    rail_name,
)
from dealbroker.payments.service import CallKind
from dealbroker.payments.stripe_provider import Record, StripeProvider
from dealbroker.payments.swish import SwishUnavailable, instruction
from dealbroker.payments.vipps import (
    LedgerEntry,
    LedgerPeriodTooLong,
    VippsClient,
    VippsPayment,
    VippsProvider,
    VippsUnavailable,
    ledger_dates,
    payment_id_of,
)
from dealbroker.payments.vipps import reference as vipps_reference

if TYPE_CHECKING:
    from dealbroker.payments.swish import SwishProvider

log = logging.getLogger("dealbroker.payments")
P = PaymentStatus
# What a source raises when its provider cannot be read now: a refusal, a timeout, a 5xx.
UNREADABLE: tuple[type[BaseException], ...] = (
    ProviderError,
    VippsUnavailable,
    SwishUnavailable,
    stripe.StripeError,
    httpx.HTTPError,
    OSError,
    TimeoutError,
)
# Our statuses in which the buyer's money has come in (and may since have gone out again).
MONEY_IN = frozenset(
    {P.PAID, P.PENDING_PAYOUT, P.PAID_OUT, P.PAYOUT_FAILED, P.PAYOUT_CANCELLED, P.REFUNDED}
)


@dataclass(frozen=True)
class Difference:
    kind: str  # "payment", "refund", "payout", or "source" (one that could not be read)
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


def _other_amount(kind: str, payment: Payment, theirs: Record) -> list[Difference]:
    """The difference when the provider's record of ``payment`` (its PaymentIntent, or its
    refund) is of another amount than ours."""
    ours = payment.refund_minor if kind == "refund" else payment.amount_minor
    if (theirs.amount_minor, theirs.currency) == (ours, payment.currency):
        return []
    here = _amount(ours, payment.currency)
    there = _amount(theirs.amount_minor, theirs.currency)
    return [Difference(kind, theirs.id, f"amount {here} here, {there} at the provider")]


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
            ours = await repository.payments_between(session, "stripe", since, until)
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
        found.extend(_other_amount("payment", payment, intent))
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
        found.extend(_other_amount("refund", payment, refund))
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
    """Money in equals money out, on our rows (``amount = refunded + paid out + fee + shipping
    kept``): a refund returns the amount (less the shipping for a parcel the buyer did not
    collect), a payout is the amount less fee and shipping, and never both."""
    found: list[Difference] = []
    for p in ours:
        ref = p.stripe_payment_intent_id or str(p.id)
        if p.status == P.REFUNDED and (p.refunded_minor, p.paid_out_minor) != (p.refund_minor, 0):
            found.append(Difference("payment", ref, "refunded, but not the amount due"))
        if p.status == P.PAID_OUT and (p.paid_out_minor, p.refunded_minor) != (p.payout_minor, 0):
            found.append(
                Difference("payout", ref, "paid out, but not the amount less fee and shipping")
            )
    return found


class VippsPayIns:
    """Our Vipps MobilePay payments of the period against Vipps's record of each (``GET``; the
    ePayment API lists no payments): what Vipps holds reserved, captured, cancelled and refunded
    must be what our status says, to the cent."""

    name = "vipps"

    def __init__(self, settings: Settings) -> None:
        self.client = VippsClient(settings)

    async def differences(
        self, sessionmaker: async_sessionmaker[AsyncSession], since: datetime, until: datetime
    ) -> list[Difference]:
        async with sessionmaker() as session:
            ours = await repository.payments_between(session, "vipps", since, until)
        found: list[Difference] = []
        for payment in ours:  # the provider first, with no transaction open
            theirs = await self.client.get(payment.id)
            found.extend(vipps_difference(payment, theirs))
        return found + _conservation(ours)


def vipps_difference(payment: Payment, theirs: VippsPayment | None) -> list[Difference]:
    """How Vipps's record of ``payment`` disagrees with ours (none when they agree)."""
    ref = vipps_reference(payment.id)
    status = PaymentStatus(payment.status)
    if theirs is None:
        if status in MONEY_IN:
            return [Difference("payment", ref, f"missing at the provider ({payment.status} here)")]
        return []  # never created at Vipps: the buyer did not open its checkout
    if (theirs.amount, theirs.currency) != (payment.amount_minor, payment.currency):
        here = _amount(payment.amount_minor, payment.currency)
        there = _amount(theirs.amount, theirs.currency)
        return [Difference("payment", ref, f"amount {here} here, {there} at the provider")]
    # What Vipps holds for us (reserved or captured, less refunds) against what we hold.
    held_there = theirs.authorized - theirs.cancelled - theirs.refunded
    held_here = payment.amount_minor - payment.refunded_minor if status in MONEY_IN else 0
    if status in service.OPEN and theirs.state == "AUTHORIZED":
        held_here = held_there  # approved, not yet applied here: the webhook or polling will
    found = []
    if held_here != held_there:
        there = _amount(held_there, theirs.currency)
        found.append(
            Difference(
                "payment",
                ref,
                f"{payment.status} here holds {_amount(held_here, payment.currency)}, "
                f"{theirs.state} at the provider holds {there}",
            )
        )
    if (payment.captured_at is not None) != (theirs.captured > 0):
        found.append(
            Difference(
                "payment",
                ref,
                f"captured {'yes' if payment.captured_at else 'no'} here, "
                f"{_amount(theirs.captured, theirs.currency)} captured at the provider",
            )
        )
    return found


class VippsLedger:
    """Vipps MobilePay's funds ledger (the Report API) of the period against our payments: the
    money Vipps moved for references of ours (see the module's docstring)."""

    name = "vipps ledger"

    def __init__(self, settings: Settings) -> None:
        self.client = VippsClient(settings)
        self.zone = ZoneInfo(settings.time_zone)

    async def differences(
        self, sessionmaker: async_sessionmaker[AsyncSession], since: datetime, until: datetime
    ) -> list[Difference]:
        try:
            dates = ledger_dates(since, until, self.zone, clock.now())
        except LedgerPeriodTooLong as exc:
            return [Difference("source", self.name, f"not read: {exc}")]
        report = await self.client.funds(dates)  # the provider first, with no transaction open
        moved: dict[uuid.UUID, list[LedgerEntry]] = {}
        for entry in sorted(report.entries, key=lambda e: e.time):
            payment_id = payment_id_of(entry.reference or "")
            if (
                entry.entry_type in ("capture", "refund")
                and payment_id is not None
                and since <= entry.time < until
            ):
                moved.setdefault(payment_id, []).append(entry)
        async with sessionmaker() as session:
            held = {p.id: p for p in await repository.payments_by_ids(session, list(moved))}
            refunded_in_period = {
                c.payment_id
                for c in await repository.succeeded_calls(session, list(held))
                if c.kind == CallKind.REFUND
                and c.finished_at is not None
                and since <= c.finished_at < until
            }
        found: list[Difference] = []
        for payment_id, entries in moved.items():
            payment = held.get(payment_id)
            if payment is not None and since <= payment.created_at < until:
                continue  # the period's own: VippsPayIns compares Vipps's whole record of it
            found.extend(
                _ledger_difference(payment_id, payment, entries, payment_id in refunded_in_period)
            )
        if report.missing_dates:
            days = ", ".join(d.isoformat() for d in report.missing_dates)
            found.append(
                Difference(
                    "source",
                    self.name,
                    f"no report of {days} at Vipps yet: its entries were not compared; "
                    "reconcile again later",
                )
            )
        return found


def _ledger_difference(
    payment_id: uuid.UUID,
    payment: Payment | None,
    entries: list[LedgerEntry],
    refunded_in_period: bool,
) -> list[Difference]:
    """How the ledger's captures and refunds of one payment (not of the period) disagree with
    our row of it, or with its having none. The period's refund entries are compared with what
    our refund made in the period (``refunded_in_period``: its call finished in it), so a second
    refund of a payment refunded before the period is named too."""
    ref = vipps_reference(payment_id)
    captures = [e for e in entries if e.entry_type == "capture"]
    refunds = [e for e in entries if e.entry_type == "refund"]
    found: list[Difference] = []
    if payment is None:
        if captures:
            what = f"captured {_moved(captures)} at Vipps {_when(captures)}, no payment here"
            found.append(Difference("payment", ref, what))
        if refunds:
            what = f"refunded {_moved(refunds)} at Vipps {_when(refunds)}, no payment here"
            found.append(Difference("refund", ref, what))
        return found
    captured = sum(e.amount for e in captures if e.currency == payment.currency)
    # A refund less the shipping made before the capture captures the shipping we keep, and our
    # row records it as refunded, not captured: that capture is no difference.
    kept = (
        payment.status == P.REFUNDED and captured == payment.amount_minor - payment.refunded_minor
    )
    if captures and payment.captured_at is None and not kept:
        what = (
            f"captured {_moved(captures)} at Vipps {_when(captures)}, "
            f"not captured here ({payment.status})"
        )
        found.append(Difference("payment", ref, what))
    ours = payment.refunded_minor if refunded_in_period else 0
    if refunds and (
        any(e.currency != payment.currency for e in refunds)
        or -sum(e.amount for e in refunds) != ours
    ):
        here = _amount(ours, payment.currency)
        what = (
            f"refunded {_moved(refunds)} at Vipps {_when(refunds)}, "
            f"{here} refunded here in the period ({payment.status})"
        )
        found.append(Difference("refund", ref, what))
    return found


def _moved(entries: list[LedgerEntry]) -> str:
    """What ``entries`` moved, unsigned, per currency: ``NOK 450.00``."""
    totals: dict[str, int] = {}
    for entry in entries:
        totals[entry.currency] = totals.get(entry.currency, 0) + abs(entry.amount)
    return ", ".join(_amount(minor, currency) for currency, minor in sorted(totals.items()))


def _when(entries: list[LedgerEntry]) -> str:
    first = entries[0].time.isoformat(timespec="seconds")
    if len(entries) == 1:
        return f"on {first}"
    return f"in {len(entries)} entries from {first} to {entries[-1].time.isoformat(timespec='seconds')}"


class SwishPayIns:
    """Swish's payment requests and refunds against our Swish payments and refund calls. Swish
    lists neither, so each of ours is looked up by its id (the instruction UUID), and so is the
    next refund of each payment not refunded here, whose id is known before it is made: a
    refund Swish made that our database forgot is named. A payment Swish holds that we have no
    row of cannot be seen here (Swish's own report shows it)."""

    name = "swish"

    def __init__(self, provider: "SwishProvider") -> None:
        self.provider = provider

    async def differences(
        self, sessionmaker: async_sessionmaker[AsyncSession], since: datetime, until: datetime
    ) -> list[Difference]:
        async with sessionmaker() as session:
            ours = await repository.payments_between(session, "swish", since, until)
            refunds = [
                c
                for c in await repository.succeeded_calls(session, [p.id for p in ours])
                if c.kind == CallKind.REFUND
            ]
            next_ids = await service.next_money_out_ids(
                session, [p.id for p in ours], CallKind.REFUND
            )
        found: list[Difference] = []
        for payment in ours:
            if payment.swish_callback_hash is None:
                continue  # no request was made
            theirs = await self.provider.payment_request(payment)
            ref = payment.id.hex.upper()
            if theirs is None:
                found.append(Difference("payment", ref, "missing at the provider"))
                continue
            if (theirs.amount_minor, theirs.currency) != (payment.amount_minor, payment.currency):
                found.append(Difference("payment", ref, "amount differs at the provider"))
            if (PaymentStatus(payment.status) in MONEY_IN) != (theirs.status == "PAID"):
                found.append(
                    Difference(
                        "payment",
                        ref,
                        f"status {payment.status} here, {theirs.status} at the provider",
                    )
                )
        by_id = {p.id: p for p in ours}
        for call in refunds:
            payment = by_id[call.payment_id]
            theirs = await self.provider.refund_record(instruction(call.id))
            ref = call.id.hex.upper()
            if theirs is None:
                found.append(
                    Difference("refund", ref, f"missing at the provider (our payment {payment.id})")
                )
            elif theirs.status != "PAID":
                found.append(
                    Difference("refund", ref, f"made here, {theirs.status} at the provider")
                )
            elif theirs.amount_minor not in (None, payment.refund_minor):
                found.append(Difference("refund", ref, "amount differs at the provider"))
        found += await self._forgotten_refunds(ours, next_ids)
        return found + _conservation(ours)

    async def _forgotten_refunds(
        self, ours: list[Payment], next_ids: dict[uuid.UUID, uuid.UUID]
    ) -> list[Difference]:
        """Refunds Swish made that our database has no call of (made after the moment it was
        restored to): the next refund's id of each payment not refunded here is known
        (``service.money_out_call_id``), so Swish is asked about it."""
        open_ = [p for p in ours if p.swish_callback_hash is not None and p.status != P.REFUNDED]
        found: list[Difference] = []
        for payment in open_:
            ident = instruction(next_ids[payment.id])
            theirs = await self.provider.refund_record(ident)
            if theirs is not None and theirs.status != "ERROR":
                there = _swish_amount(theirs.amount_minor, theirs.currency)
                found.append(_forgotten_at_swish("refund", ident, theirs.status, there, payment))
        return found


def _swish_amount(minor: int | None, currency: str | None) -> str:
    return "?" if minor is None else _amount(minor, currency or "SEK")


def _forgotten_at_swish(
    kind: str, ident: str, status: str, there: str, payment: Payment
) -> Difference:
    """A refund or payout Swish has under the next id of ``payment``, which we have no call of."""
    what = f"{status} at Swish ({there}), missing here (our payment {payment.id}, "
    return Difference(kind, ident, what + f"{payment.status} here)")


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


# Payments whose seller may have been paid out since our last record of them.
NOT_PAID_OUT = frozenset({P.PAID, P.PENDING_PAYOUT, P.PAYOUT_FAILED})


class SwishPayoutRecords:
    """Our Swish payouts against Swish's record of each (a ``GET`` per payout instruction), and
    the next payout of each payment of the period not paid out here (its id is known before it
    is made): a payout Swish made that our database forgot is named."""

    name = "swish payouts"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def differences(
        self, sessionmaker: async_sessionmaker[AsyncSession], since: datetime, until: datetime
    ) -> list[Difference]:
        async with sessionmaker() as session:
            calls = await repository.swish_payout_calls(session, swish_payouts.RAIL, since, until)
            # Read, not locked: changing a payment locks its deal first, and this changes nothing.
            payments = {
                c.id: await repository.payment_unlocked(session, c.payment_id) for c in calls
            }
        client = swish_payouts.SwishPayoutsClient(self.settings)
        found: list[Difference] = []
        for call in calls:
            ref = swish_payouts.instruction_id(call.id)
            record = await client.get(ref)  # SwishUnavailable: reconcile again later
            payment = payments[call.id]
            assert payment is not None  # a call's payment is never deleted
            found.extend(_swish_payout(call, payment, ref, record))
        return found + await self._forgotten(client, sessionmaker, since, until)

    async def _forgotten(
        self,
        client: swish_payouts.SwishPayoutsClient,
        sessionmaker: async_sessionmaker[AsyncSession],
        since: datetime,
        until: datetime,
    ) -> list[Difference]:
        """Payouts Swish made that our database has no call of (made after the moment it was
        restored to): for each payment of the period not paid out here, the next payout's id
        is known (``service.money_out_call_id``), so Swish is asked about it."""
        async with sessionmaker() as session:
            unpaid = await repository.payments_in_status(session, NOT_PAID_OUT, since, until)
            next_ids = await service.next_money_out_ids(
                session, [p.id for p in unpaid], CallKind.PAYOUT
            )
        found: list[Difference] = []
        for payment in unpaid:
            ident = swish_payouts.instruction_id(next_ids[payment.id])
            theirs = await client.get(ident)
            if theirs is not None and theirs.status != "ERROR":
                there = _swish_amount(theirs.amount_minor, theirs.currency)
                there += f" to {theirs.payee_alias}"
                found.append(_forgotten_at_swish("payout", ident, theirs.status, there, payment))
        return found


def _swish_payout(
    call: ProviderCall, payment: Payment, ref: str, theirs: swish_payouts.Record | None
) -> list[Difference]:
    if theirs is None:
        if call.status == "failed":  # refused before Swish took it: nothing to compare
            return []
        return [Difference("payout", ref, f"{call.status} here, missing at Swish")]
    found = []
    if theirs.amount_minor is not None and (theirs.amount_minor, theirs.currency) != (
        payment.payout_minor,
        payment.currency,
    ):
        here = _amount(payment.payout_minor, payment.currency)
        there = _amount(theirs.amount_minor, theirs.currency or "?")
        found.append(Difference("payout", ref, f"amount {here} here, {there} at Swish"))
    agree = {
        "succeeded": theirs.status == "PAID",
        "failed": theirs.status == "ERROR",
        "submitted": theirs.status in ("CREATED", "DEBITED"),
        "pending": theirs.status in ("CREATED", "DEBITED"),
    }.get(call.status, False)
    if not agree:
        found.append(Difference("payout", ref, f"{call.status} here, {theirs.status} at Swish"))
    return found


def sources(settings: Settings, bank_files: bool = True) -> list[Source]:
    """The provider's records to compare with ours: Stripe's pay-ins and refunds, Vipps's
    payments and funds ledger, Swish's payments and payouts, and (unless
    ``bank_files`` is False: a caller that shows ``bank_file.reconcile`` itself) the bank's
    answers to our payout files."""
    provider = provider_for(settings)
    found: list[Source] = [StripePayIns(provider)] if isinstance(provider, StripeProvider) else []
    if "vipps" in methods.provider_names(settings):
        found += [VippsPayIns(settings), VippsLedger(settings)]
    if "swish" in methods.provider_names(settings):
        from dealbroker.payments.swish import SwishProvider

        swish = provider_named(settings, "swish")
        assert isinstance(swish, SwishProvider)
        found.append(SwishPayIns(swish))
    if bank_files and settings.payout_rail == "bank_file":
        found.append(BankFilePayouts())
    if settings.swish_payouts:
        found.append(SwishPayoutRecords(settings))
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


@dataclass(frozen=True)
class Recorded:
    call_id: str
    kind: str
    payment_id: str
    deal_id: str
    provider_ref: str
    checked: str  # what the provider's record showed, or why no provider could be asked


REF_LIMIT = 100  # characters of a provider's reference the operator may give


async def record_made(
    sessionmaker: async_sessionmaker[AsyncSession],
    settings: Settings,
    deal_id: uuid.UUID,
    kind: CallKind,
    provider_ref: str,
    *,
    checked_by_hand: bool = False,
) -> Recorded:
    """Record that the provider made ``deal_id``'s refund or payout (``kind``: its newest call
    of that kind) as ``provider_ref``, though our database says it has not: the money left
    after the moment a restore went back to (or its answer was lost for good), and
    ``reconcile`` names it. The call is then never made again (``service.record_made``). The
    provider's record of ``provider_ref`` is read first, with no transaction open, and must be
    that money: a refund of the payment's PaymentIntent at Stripe, for the refund due; Vipps's
    record of the payment (``provider_ref`` our reference of it) showing the refund due given
    back; for Swish, the call's own instruction (the same refund or payout decided again has the
    same id), paid, of the amount due, of this payment or to the seller's number. A bank file's
    payout has no provider to ask: its end-to-end id must be the call's own, and it is recorded
    only ``checked_by_hand`` (the operator read it on the bank's statement). A call still to be
    made is recorded only while money out is held (``service.record_made``).
    ``Conflict`` when the deal has no such call to record (bring the deal to its refund or
    payout first: the hold keeps the call from being made meanwhile), when the record does not
    match, or when the provider cannot be read now; nothing is changed then."""
    ref = provider_ref.strip()
    if not 0 < len(ref) <= REF_LIMIT or not ref.isprintable():
        raise Conflict(f"A provider's reference is 1 to {REF_LIMIT} printable characters.")
    if kind not in service.RECORDABLE:
        raise Conflict(f"A {kind} moves no money out: only refunds and payouts are recorded.")
    async with sessionmaker() as session:
        call = await repository.deal_latest_call(session, deal_id, kind.value)
        payment = (
            None if call is None else await repository.payment_unlocked(session, call.payment_id)
        )
        account = (
            None
            if call is None or call.account_id is None
            else await repository.account_by_id(session, call.account_id)
        )
    if call is None or payment is None:
        raise Conflict(
            f"Deal {deal_id} has no {kind} to record: bring the deal to it first (its deadline, "
            "or a dispute's decision); while money out is held, it waits there unmade."
        )
    service.recordable(call, payment)
    due = payment.refund_minor if kind is CallKind.REFUND else payment.payout_minor
    try:
        ref, checked = await _made_at_provider(
            settings, call, payment, account, ref, checked_by_hand
        )
    except UNREADABLE as exc:
        raise Conflict(
            f"The provider's record of {ref} could not be read now ({str(exc)[:200]}): nothing "
            "was recorded; try again."
        ) from exc
    async with sessionmaker() as session, session.begin():
        deal = found(await deal_side().lock(session, deal_id), f"No deal {deal_id}.")
        locked = found(await repository.call_for_update(session, call.id), f"No call {call.id}.")
        await service.record_made(session, deal, locked, ref, checked, due, Actor.system())
    return Recorded(str(call.id), call.kind, str(payment.id), str(deal_id), ref, checked)


def _own_id(call: ProviderCall, ref: str, own: str, at: str) -> None:
    """``Conflict`` unless ``ref`` names ``call``'s own instruction (``own``, written as ``at``
    writes it; dashes and case aside). A refund or payout's id is the payment's n-th, derived
    (``service.money_out_call_id``): decided again after a restore, it is the call the
    provider made, so no other id is the money this call was to move."""
    if ref.replace("-", "").lower() != own.replace("-", "").lower():
        raise Conflict(
            f"{at} knows this {call.kind} as {own}, the call's own id (the same {call.kind} "
            f"decided again has the same id): {ref} is another."
        )


async def _made_at_provider(
    settings: Settings,
    call: ProviderCall,
    payment: Payment,
    account: PayoutAccount | None,
    ref: str,
    checked_by_hand: bool,
) -> tuple[str, str]:
    """The provider's reference as we keep it, and what its record shows, when ``ref`` is the
    money ``call`` was to move; ``Conflict`` saying why not otherwise."""
    if call.kind == CallKind.PAYOUT:
        return await _payout_made(settings, call, payment, account, ref, checked_by_hand)
    due = _amount(payment.refund_minor, payment.currency)
    provider = provider_of(settings, payment)
    if isinstance(provider, StripeProvider):
        if not ref.startswith("re_") or payment.stripe_payment_intent_id is None:
            raise Conflict(f"Stripe has no refund {ref} of this payment's PaymentIntent.")
        refund = await provider.refund_record(ref)
        if refund is None or refund.payment_intent_id != payment.stripe_payment_intent_id:
            raise Conflict(f"Stripe has no refund {ref} of this payment's PaymentIntent.")
        if refund.status not in ("succeeded", "pending"):
            raise Conflict(f"Stripe's refund {ref} is {refund.status}: no money was given back.")
        if (refund.amount_minor, refund.currency) != (payment.refund_minor, payment.currency):
            there = _amount(refund.amount_minor, refund.currency)
            raise Conflict(f"Stripe's refund {ref} is of {there}, not the {due} due.")
        return ref, f"Stripe refund {ref}: {refund.status}, {due}"
    if isinstance(provider, VippsProvider):
        # Vipps keeps one record per payment, under our reference; its refunds have no id of
        # their own in the ePayment API (the ledger's pspReference is the accountant's).
        own = vipps_reference(payment.id)
        _own_id(call, ref, own, "Vipps")
        theirs = await provider.client.get(payment.id)
        if theirs is None:
            raise Conflict(f"Vipps has no payment {own}.")
        kept = theirs.captured - theirs.refunded
        if theirs.reserved or kept != payment.amount_minor - payment.refund_minor:
            raise Conflict(
                f"Vipps still holds {_amount(kept + theirs.reserved, theirs.currency)} of payment "
                f"{own} ({theirs.state}): the {due} due was not given back."
            )
        return own, f"Vipps payment {own}: {theirs.state}, {due} given back"
    if provider.name == "swish":
        from dealbroker.payments.swish import SwishProvider

        assert isinstance(provider, SwishProvider)
        own = instruction(call.id)
        _own_id(call, ref, own, "Swish")
        swish_refund = await provider.refund_record(own)
        if swish_refund is None or swish_refund.payer_payment_reference != payment.id.hex.upper():
            raise Conflict(f"Swish has no refund {own} of this payment.")
        if swish_refund.status != "PAID":
            raise Conflict(f"Swish's refund {own} is {swish_refund.status}: it was not paid.")
        if swish_refund.amount_minor != payment.refund_minor:
            raise Conflict(f"Swish's refund {own} is not of the {due} due.")
        return own, f"Swish refund {own}: PAID, {due}"
    raise Conflict(f"The {provider.name} provider keeps no record to check a refund against.")


async def _payout_made(
    settings: Settings,
    call: ProviderCall,
    payment: Payment,
    account: PayoutAccount | None,
    ref: str,
    checked_by_hand: bool,
) -> tuple[str, str]:
    due = _amount(payment.payout_minor, payment.currency)
    if account is None:
        raise Conflict(f"Payment {payment.id}'s payout has no account it was paid to.")
    rail = rail_name(settings, account)
    if rail == "swish":
        own = swish_payouts.instruction_id(call.id)
        _own_id(call, ref, own, "Swish")
        theirs = await swish_payouts.SwishPayoutsClient(settings).get(own)
        if theirs is None or theirs.payee_alias != account.number:
            raise Conflict(f"Swish has no payout {own} to the seller's number.")
        if theirs.status != "PAID":
            raise Conflict(f"Swish's payout {own} is {theirs.status}: it was not paid.")
        if (theirs.amount_minor, theirs.currency) != (payment.payout_minor, payment.currency):
            raise Conflict(f"Swish's payout {own} is not of the {due} due.")
        return own, f"Swish payout {own}: PAID, {due}"
    if rail == "bank_file":
        own = bank_file.end_to_end_id(call.id)
        _own_id(call, ref, own, "The bank")
        if not checked_by_hand:
            raise Conflict(
                "A bank file's payout cannot be checked with the bank: read it on the bank's "
                "statement, then record it as checked by hand."
            )
        return own, f"bank transfer {own}: {due}, checked by hand on the bank's statement"
    raise Conflict(f"The {rail} payout rail keeps no record to check a payout against.")


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
        try:
            found += await source.differences(sessionmaker, since, until)
        except UNREADABLE as exc:
            log.warning("reconciliation: %s could not be read: %r", source.name, exc)
            what = f"could not be read: {str(exc)[:300] or type(exc).__name__}"
            found.append(Difference("source", source.name, what))
    return found
