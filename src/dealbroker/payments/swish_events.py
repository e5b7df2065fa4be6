"""Swish's answers about our payment requests, applied: the only way a Swish payment becomes
paid.

An answer reaches us two ways: Swish's callback (``POST /payments/v1/swish/callback``,
``web.swish_checkout``), and the checkout page that refreshes itself while the buyer waits.
Either way what is applied is the payment request as Swish's API shows it over mutual TLS
(``SwishProvider.payment_request``), never a body someone posted: a callback is first checked
(its ``callbackIdentifier`` header, the value we set on that one request, compared in constant
time with the hash we kept), then only prompts that retrieval.

- ``PAID``: ``Paid`` through the settlement handler (the deal moves on), Swish's
  ``paymentReference`` kept (a refund names it);
- ``DECLINED``, ``ERROR`` (``TM01``: the buyer did not answer within 3 minutes, ``RF07``,
  ``BANKIDCL`` ...): ``PaymentFailed`` (the buyer may pay again: a new payment, a new request);
- ``CANCELLED``: ``PaymentCancelled``.

Applied once: a payment no longer open is left as it is, so a repeated callback is
acknowledged and changes nothing. An answer of another amount or currency than the payment's is
logged and never applied. Money paid for a payment that no longer pays for its deal (the deal
was cancelled, or moved on) goes back in full (``payments.refund_late``).

A callback may never come (our endpoint down through Swish's retries, a callback refused) while
the buyer has closed the checkout page: ``SwishPollJob`` asks Swish about every open payment
whose request is older than ``POLL_AFTER`` and applies what it finds, like the callback.

Refunds' callbacks name a refund call of ours (its id is the refund's instruction UUID): the
provider-call job is woken to look the refund up; the callback itself changes nothing.
"""

import hashlib
import hmac
import json
import logging
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.errors import DomainError
from dealbroker.core.jobs import ShortJob
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import PaymentStatus
from dealbroker.payments import repository
from dealbroker.payments import service as payments
from dealbroker.payments.escrow import Outcome as PaymentOutcome
from dealbroker.payments.escrow import deal_side
from dealbroker.payments.models import Payment, ProviderCall
from dealbroker.payments.provider import ProviderUnavailable, provider_named
from dealbroker.payments.swish import (
    CANCELLED,
    DECLINED,
    ERROR,
    FINAL,
    PAID,
    Request,
    SwishProvider,
    SwishRefused,
    SwishUnavailable,
    instruction,
    read_request,
)

log = logging.getLogger("dealbroker.payments")

# A callback is a payment request object of a dozen short fields: well under 4 KB.
MAX_CALLBACK_BYTES = 16 * 1024
OUTCOMES = {
    PAID: PaymentOutcome.SUCCEEDED,
    DECLINED: PaymentOutcome.FAILED,
    ERROR: PaymentOutcome.FAILED,
    CANCELLED: PaymentOutcome.CANCELLED,
}


class MalformedCallback(ValueError):
    """A body that is not a Swish payment request or refund we can read: answered 400."""


class Outcome(StrEnum):
    APPLIED = "applied"
    IGNORED = "ignored"  # under way still, or applied before (the payment is no longer open)
    UNMATCHED = "unmatched"  # not as we asked (amount, currency): logged, not applied


def callback_hash(identifier: str) -> str:
    return hashlib.sha256(identifier.encode()).hexdigest()


def parse(body: bytes) -> Request:
    """The object in a callback's body, bounded and type-checked, or ``MalformedCallback``."""
    if len(body) > MAX_CALLBACK_BYTES:
        raise MalformedCallback(f"larger than {MAX_CALLBACK_BYTES} bytes")
    try:
        # Flat JSON: Swish's objects nest no deeper than one level; parse_float keeps öre exact.
        decoded = json.loads(body.decode("utf-8"), parse_float=Decimal)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedCallback("not JSON") from exc
    found = read_request(decoded)
    if found is None:
        raise MalformedCallback("not a payment request or refund: no id or status")
    return found


def _our_id(swish_id: str) -> uuid.UUID | None:
    try:
        ours = uuid.UUID(hex=swish_id)
    except ValueError:
        return None
    return ours if instruction(ours) == swish_id.upper() else None


async def payment_of(session: AsyncSession, swish_id: str) -> Payment | None:
    """Our Swish payment whose request ``swish_id`` is, or None."""
    ours = _our_id(swish_id)
    payment = None if ours is None else await repository.payment_unlocked(session, ours)
    return payment if payment is not None and payment.provider == "swish" else None


async def refund_call_of(session: AsyncSession, swish_id: str) -> ProviderCall | None:
    """Our refund call of a Swish payment whose refund ``swish_id`` is, or None."""
    ours = _our_id(swish_id)
    call = None if ours is None else await repository.call(session, ours)
    if call is None or call.kind != payments.CallKind.REFUND:
        return None
    payment = await repository.payment_unlocked(session, call.payment_id)
    return call if payment is not None and payment.provider == "swish" else None


def identified(payment: Payment, header: str | None) -> bool:
    """Whether a callback's ``callbackIdentifier`` header is the one we set on ``payment``'s
    request (compared in constant time, as hashes)."""
    if payment.swish_callback_hash is None or not header or len(header) > 64:
        return False
    return hmac.compare_digest(callback_hash(header), payment.swish_callback_hash)


async def wake_refund(session: AsyncSession, call_id: uuid.UUID) -> None:
    """A refund's callback came: its call is looked up by the worker now."""
    call = await repository.call_for_update(session, call_id)
    if call is not None:
        await payments.wake_call(session, call)


async def apply(
    session: AsyncSession, settings: Settings, payment_id: uuid.UUID, state: Request
) -> Outcome:
    """Apply Swish's retrieved ``state`` of ``payment_id``'s request, at most once."""
    payment = await repository.payment_unlocked(session, payment_id)
    if payment is None or state.status not in OUTCOMES:
        return Outcome.IGNORED
    # The deal first, then the payment: the order every payment change locks in.
    deal = await deal_side().lock(session, payment.deal_id)
    if deal is None:
        return Outcome.IGNORED
    payment = await repository.payment(session, payment.id, fresh=True)
    if state.amount_minor != payment.amount_minor or state.currency != payment.currency:
        log.error(
            "swish payment request %s is not for payment %s's amount; not applied",
            state.id,
            payment.id,
        )
        return Outcome.UNMATCHED
    paid = state.status == PAID
    if paid:
        if state.payment_reference is None:
            log.error("swish payment request %s is PAID without a paymentReference", state.id)
            return Outcome.UNMATCHED
        payment.swish_payment_reference = state.payment_reference
        await session.flush()  # before any fresh read of the row (a refund names it)
    current = await payments.current(session, deal)
    if current is None or current.id != payment.id or current.status not in payments.OPEN:
        if paid and PaymentStatus(payment.status) in payments.CLOSED_UNPAID:
            return await _refund_late(session, deal.id, payment.id)
        return Outcome.IGNORED
    payment_id, deal_id = payment.id, deal.id  # a rolled-back savepoint expires the rows
    try:
        async with session.begin_nested():
            await deal_side().settle(session, deal, OUTCOMES[state.status], settings)
    except DomainError as exc:
        log.warning(
            "swish %s for payment %s of deal %s not applied: %s",
            state.status,
            payment_id,
            deal_id,
            exc.detail,
        )
        if not paid:
            return Outcome.UNMATCHED
        return await _refund_late(session, deal_id, payment_id)
    if state.error_code:
        log.info("swish payment request %s: %s", state.id, state.reason)
    return Outcome.APPLIED


async def _refund_late(session: AsyncSession, deal_id: uuid.UUID, payment_id: uuid.UUID) -> Outcome:
    """Swish took the money of a payment that does not pay for its deal: refund it whole."""
    deal = await deal_side().lock(session, deal_id)
    payment = await repository.payment(session, payment_id, fresh=True)
    assert deal is not None  # locked by this transaction since it was read
    if not await payments.refund_late(session, deal, payment):
        return Outcome.IGNORED
    log.warning(
        "swish: money came in for payment %s after deal %s stopped waiting for it; refunding",
        payment_id,
        deal_id,
    )
    return Outcome.APPLIED


POLL_AFTER = timedelta(minutes=1)  # a callback usually comes within seconds
# Swish ends a request the payer has not answered within 3 minutes (``TM01``): one still open a
# day on is one Swish does not have (its making failed), not one to keep asking about.
POLL_WINDOW = timedelta(days=1)
POLL_EVERY = 30.0  # seconds between two questions about one payment (this process's)
POLL_BATCH = 20
POLL_CANDIDATES = 500


class SwishPollJob(ShortJob):
    """Asks Swish about our open payments whose request is older than ``POLL_AFTER`` and
    applies a final answer (``apply``, as the callback does): a callback that never came (lost,
    refused, our endpoint down) does not leave a buyer's paid payment unapplied once they have
    closed the page. Runs at the worker's poll; each payment is asked about at most every
    ``POLL_EVERY`` seconds by this process (the questions' times are kept in memory)."""

    name = "swish-poll"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._asked: dict[uuid.UUID, float] = {}

    async def run_once(self) -> int:
        self.more = False
        if not self.settings.swish_merchant_number:
            return 0
        now, moment = clock.now(), time.monotonic()
        async with self.sessionmaker() as session:
            found = await repository.swish_requests_to_poll(
                session, now - POLL_WINDOW, now - POLL_AFTER, POLL_CANDIDATES
            )
        self._asked = {i: t for i, t in self._asked.items() if i in set(found)}
        due = [i for i in found if moment - self._asked.get(i, -POLL_EVERY) >= POLL_EVERY]
        if not due:
            return 0
        try:
            provider = provider_named(self.settings, "swish")
        except ProviderUnavailable as exc:
            log.warning("swish: open payment requests not polled: %s", exc.detail)
            return 0
        assert isinstance(provider, SwishProvider)
        done = 0
        for payment_id in due[:POLL_BATCH]:
            self._asked[payment_id] = moment
            done += await self._poll(provider, payment_id)
        self.more = len(due) > POLL_BATCH
        return done

    async def _poll(self, provider: SwishProvider, payment_id: uuid.UUID) -> int:
        async with self.sessionmaker() as session:
            payment = await repository.payment_unlocked(session, payment_id)
        if payment is None:
            return 0
        try:
            state = await provider.payment_request(payment)
        except (SwishUnavailable, SwishRefused) as exc:
            log.warning("swish: polling payment %s failed: %s", payment_id, exc)
            return 0
        if state is None or state.status not in FINAL:
            return 0
        async with self.sessionmaker() as session, session.begin():
            outcome = await apply(session, self.settings, payment_id, state)
        log.info("swish payment %s polled (%s): %s", payment_id, state.status, outcome)
        return 1
