"""Payments: the buyer's money in escrow, then paid out to the seller or refunded to the buyer.

The payment's status moves only along ``PAYMENT_TRANSITIONS``; every change is a
``payment.status`` event. Amount, fee and shipping are fixed on the payment when it is created
(``amounts``): the seller's payout is exactly amount less fee and shipping, and a refund
returns the whole amount, or the amount less the shipping for a parcel the buyer did not
collect; ``core.money.Escrowed`` is that arithmetic, and nothing else computes it. The
provider is behind ``PaymentProvider``, chosen by ``provider_for``; the built-in one is simulated
and exists only in the sandbox.

A deal is an ``EscrowDeal`` here: what its status allows (to be paid, paid out, refunded) is the
deal's to say (``escrow``), and what a payment's outcome does to the deal and its parties is the
application's settlement handler's (``escrow.deal_side``).
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession
from stdnum import iban
from stdnum.exceptions import (
    InvalidChecksum,
    InvalidComponent,
    InvalidLength,
    ValidationError,
)
from stdnum.no import kontonr

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core import clock, money, wakeup
from dealbroker.core.errors import BadRequest, Conflict, FieldError, NotFound
from dealbroker.core.i18n import _
from dealbroker.core.security import hash_token, new_token
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import PaymentStatus
from dealbroker.events import envelope
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind
from dealbroker.payments import hold, repository, swish_payouts
from dealbroker.payments.escrow import Escrow, EscrowDeal, Outcome, deal_side
from dealbroker.payments.methods import Method
from dealbroker.payments.models import Payment, PayoutAccount, PayoutAccountChange, ProviderCall
from dealbroker.payments.provider import provider_for

P = PaymentStatus
PAYMENT_TRANSITIONS: dict[P, frozenset[P]] = {
    P.CREATED: frozenset({P.PROCESSING, P.PAYMENT_FAILED, P.PAYMENT_CANCELLED}),
    P.PROCESSING: frozenset({P.PAID, P.PAYMENT_FAILED, P.PAYMENT_CANCELLED}),
    # A new attempt is a new payment. Money the provider takes anyway for a closed payment (a
    # charge that raced the deal's cancel) is given back whole: ``refund_late``.
    P.PAYMENT_FAILED: frozenset({P.REFUNDED}),
    P.PAYMENT_CANCELLED: frozenset({P.REFUNDED}),
    P.PAID: frozenset({P.REFUNDED, P.PENDING_PAYOUT}),
    P.PENDING_PAYOUT: frozenset({P.PAID_OUT, P.PAYOUT_FAILED, P.PAYOUT_CANCELLED}),
    P.PAYOUT_FAILED: frozenset({P.PENDING_PAYOUT}),
    P.PAYOUT_CANCELLED: frozenset({P.PENDING_PAYOUT}),
    P.REFUNDED: frozenset(),
    P.PAID_OUT: frozenset(),
}
OPEN = frozenset({P.CREATED, P.PROCESSING})
# Closed without paying for the deal: money the provider took for such a payment all the same is
# not the deal's (it never entered escrow) and goes back to the buyer whatever the deal's status.
CLOSED_UNPAID = frozenset({P.PAYMENT_FAILED, P.PAYMENT_CANCELLED})
# Money leaves escrow only at the end of a deal: to the seller once it is Completed, back to the
# buyer once it is being refunded. ``move`` holds every payment change to this, the sandbox's too.
PAYOUT = frozenset({P.PENDING_PAYOUT, P.PAID_OUT, P.PAYOUT_FAILED, P.PAYOUT_CANCELLED})
# The provider's final answer for an open payment, as the payment's status.
SETTLED_AS = {
    Outcome.SUCCEEDED: P.PAID,
    Outcome.FAILED: P.PAYMENT_FAILED,
    Outcome.CANCELLED: P.PAYMENT_CANCELLED,
}


def amounts(deal: EscrowDeal, settings: Settings) -> money.Escrowed:
    """Amount, fee and shipping in minor units for ``deal`` at its agreed price and shipping
    price, by who pays the shipping (``shipping_paid_by``): what a payment created now fixes."""
    return money.Escrowed.for_price(
        deal.price_minor or 0,
        deal.shipping_minor,
        settings.shipping_paid_by,
        settings.fee_percent,
        settings.fee_fixed,
    )


async def _emit(session: AsyncSession, deal: EscrowDeal, payment: Payment) -> None:
    data = envelope.payment_status(
        deal_id=deal.id,
        seller_user_id=deal.seller_user_id,
        buyer_user_id=deal.buyer_user_id,
        status=payment.status,
        amount_minor=payment.amount_minor,
        fee_minor=payment.fee_minor,
        currency=payment.currency,
    )
    await events.emit(session, deal.integration_id, EventKind.PAYMENT_STATUS, data, deal_id=deal.id)


def _check_escrow(deal: EscrowDeal, status: PaymentStatus) -> None:
    """Refuse a payment status that would let money leave escrow at this point of the deal."""
    if status in PAYOUT and deal.escrow is not Escrow.RELEASE:
        raise Conflict(
            f"Money is paid out only once the deal is Completed: payment status {status.value} "
            f"needs a Completed deal, and this one is {deal.status}.",
            extra={"currentStatus": deal.status},
        )
    if status is P.REFUNDED and deal.escrow is not Escrow.REFUND:
        raise Conflict(
            f"A payment is refunded only when the deal is being refunded (Refunded, or an "
            f"expiry or return on its way there); this one is {deal.status}.",
            extra={"currentStatus": deal.status},
        )


async def move(
    session: AsyncSession, deal: EscrowDeal, payment: Payment, status: PaymentStatus
) -> None:
    """Move ``payment`` to ``status`` along the table, mirror it on the deal, emit the event.

    A payment closed unpaid has its provider side (a Stripe PaymentIntent) cancelled by the
    worker, so that no browser holding its secret can still pay it. Money taken late for it
    (``refund_late``) moves it on to ``Refunded``: mirrored and announced only while it is the
    deal's latest payment (an older attempt's refund must not overwrite a newer one's ``Paid``).
    """
    source = PaymentStatus(payment.status)
    if source not in CLOSED_UNPAID:
        _check_escrow(deal, status)
    if status not in PAYMENT_TRANSITIONS[source]:
        raise Conflict(
            f"A payment in status {payment.status} cannot become {status.value}.",
            extra={"paymentStatus": payment.status},
        )
    now = clock.now()
    payment.status = status.value
    payment.updated_at = now
    if status is P.REFUNDED:
        payment.refunded_minor = payment.refund_minor
    if status is P.PAID_OUT:
        payment.paid_out_minor = payment.payout_minor
        await deal_side().paid_out(session, deal, payment.paid_out_minor)
    if status is P.PAYOUT_FAILED:
        await deal_side().payout_failed(session, deal, payment.payout_minor)
    if status in CLOSED_UNPAID and _has_provider_side(payment):
        await _queue_call(session, payment, CallKind.CANCEL)
    if status is P.PAYMENT_CANCELLED and payment.swish_callback_hash is not None:
        await _queue_call(session, payment, CallKind.CANCEL)  # its Swish payment request
    latest = await repository.current(session, deal.id) if source in CLOSED_UNPAID else payment
    if latest is not None and latest.id == payment.id:
        deal.payment_status = status.value
        deal.updated_at = now
        await _emit(session, deal, payment)
    await session.flush()


def _has_provider_side(payment: Payment) -> bool:
    """Whether the provider may hold a checkout of ``payment`` that a buyer could still pay
    (a Stripe PaymentIntent; a Vipps payment, created when the buyer opened its checkout)."""
    return payment.stripe_payment_intent_id is not None or payment.provider == "vipps"


def needs_capture(payment: Payment) -> bool:
    """Whether ``payment``'s money is only reserved: it must be captured before it is paid
    out (docs/decisions/0028-vipps-capture.md)."""
    return payment.reserved_until is not None and payment.captured_at is None


async def reserved(session: AsyncSession, payment: Payment, until: datetime) -> None:
    """The provider reserved ``payment``'s amount until ``until`` (before it is settled
    ``Paid``): its payout will wait for a capture, its deal's hand-over for the reservation."""
    if payment.reserved_until is None:
        payment.reserved_until = until
        await session.flush()


# A hand-over deadline falls this long before the reservation would lapse: the deal expires and
# the reservation is cancelled while it still holds.
RESERVATION_MARGIN = timedelta(days=1)


async def hand_over_by(session: AsyncSession, deal: EscrowDeal) -> datetime | None:
    """The latest a hand-over deadline of ``deal`` may fall: before its payment's reservation
    lapses (None when its money is not merely reserved)."""
    payment = await repository.current(session, deal.id)
    if payment is None or not needs_capture(payment):
        return None
    assert payment.reserved_until is not None
    return payment.reserved_until - RESERVATION_MARGIN


async def capture(session: AsyncSession, deal: EscrowDeal) -> None:
    """The item is handed over (to the carrier, or to the buyer at a pickup): a payment whose
    money is only reserved is captured now (a call the worker makes). Nothing for a payment
    charged at once."""
    payment = await repository.current(session, deal.id)
    if payment is not None and payment.status == P.PAID and needs_capture(payment):
        await _queue_call(session, payment, CallKind.CAPTURE)


async def _queue_payout(session: AsyncSession, payment: Payment, account: PayoutAccount) -> None:
    """The payout to ``account``, once the money is ours: a reserved payment is captured
    first, and the capture's success queues the payout (``call_succeeded``)."""
    if needs_capture(payment):
        await _queue_call(session, payment, CallKind.CAPTURE)
    else:
        await _queue_call(session, payment, CallKind.PAYOUT, account)


def _require_agreement(deal: EscrowDeal) -> None:
    if deal.buyer_user_id is None or deal.price_minor is None:
        raise Conflict(
            "A payment needs an approved offer (a buyer and a price) on the deal.",
            extra={"currentStatus": deal.status},
        )


async def _create(
    session: AsyncSession,
    deal: EscrowDeal,
    settings: Settings,
    method: Method,
    provider: str,
    ref: str,
) -> Payment:
    """A new ``Created`` payment for the deal's agreed price, its amount, fee and shipping fixed
    now."""
    fixed = amounts(deal, settings)
    now = clock.now()
    payment = Payment(
        id=uuid.uuid4(),
        deal_id=deal.id,
        integration_id=deal.integration_id,
        amount_minor=fixed.amount,
        fee_minor=fixed.fee,
        shipping_minor=fixed.shipping,
        refund_less_shipping=False,
        currency=deal.currency,
        status=P.CREATED.value,
        provider=provider,
        method=method.value,
        provider_ref=ref,
        refunded_minor=0,
        paid_out_minor=0,
        created_at=now,
        updated_at=now,
    )
    repository.add(session, payment)
    deal.payment_status = P.CREATED.value
    deal.updated_at = now
    await _emit(session, deal, payment)
    await session.flush()
    return payment


async def start(
    session: AsyncSession, deal: EscrowDeal, settings: Settings, method: Method = Method.CARD
) -> tuple[Payment, str]:
    """Start the buyer's payment for a ``Signed`` deal by ``method``: ``(payment, checkout
    token)``. An open payment by the same method is reused (its checkout link is issued anew);
    one by another method is closed (its provider's side cancelled, as ``close`` does), and a
    failed one leaves room for a new. ``ProviderUnavailable`` when no provider may take money
    here: nothing is stored then."""
    provider = provider_for(settings, method)
    if deal.escrow is not Escrow.AWAITING_PAYMENT:
        raise Conflict(
            f"A deal in status {deal.status} cannot be paid for; it must be Signed.",
            page_detail=_("This deal cannot be paid for now: only a signed deal can be."),
        )
    _require_agreement(deal)
    token = new_token()
    current = await repository.current(session, deal.id)
    if current is not None and PaymentStatus(current.status) in OPEN:
        if current.method == method.value and current.provider == provider.name:
            current.provider_ref = hash_token(token)
            await session.flush()
            return current, token
        await move(session, deal, current, P.PAYMENT_CANCELLED)  # its provider's side too
    payment = await _create(session, deal, settings, method, provider.name, hash_token(token))
    return payment, token


async def current(session: AsyncSession, deal: EscrowDeal) -> Payment | None:
    return await repository.current(session, deal.id)


async def record_stripe_intent(
    session: AsyncSession, payment_id: uuid.UUID, customer_id: str, intent_id: str
) -> Payment:
    """Keep Stripe's ids beside the payment (its deal locked by the caller), unless a
    concurrent checkout stored them first; the payment as it now stands."""
    payment = await repository.payment(session, payment_id, fresh=True)
    if payment.stripe_payment_intent_id is None:
        payment.stripe_customer_id = customer_id
        payment.stripe_payment_intent_id = intent_id
        await session.flush()
        if PaymentStatus(payment.status) not in OPEN:
            # Closed (the deal cancelled) while the intent was being created: cancel it too.
            await _queue_call(session, payment, CallKind.CANCEL)
    return payment


async def close(session: AsyncSession, deal: EscrowDeal) -> None:
    """The deal takes no payment any more (it is cancelled): its open payment becomes
    ``PaymentCancelled``, so no checkout can charge it, and the provider's side of it (a Stripe
    PaymentIntent) is cancelled by the worker, outside this transaction. Money the provider
    takes all the same is given back (``refund_late``)."""
    payment = await repository.current(session, deal.id)
    if payment is None or PaymentStatus(payment.status) not in OPEN:
        return
    await move(session, deal, payment, P.PAYMENT_CANCELLED)  # its PaymentIntent cancelled too


async def refund_late(session: AsyncSession, deal: EscrowDeal, payment: Payment) -> bool:
    """The provider took ``payment``'s whole amount when it no longer pays for the deal (the
    deal was cancelled, or no longer waits for a payment): the payment is closed if it was
    still open, the whole amount is refunded through the provider (a refund call, made by the
    worker; ``Refunded`` once made) and both parties are told. Once per payment: False when
    the refund is under way or made already, or the payment paid for the deal after all."""
    if PaymentStatus(payment.status) in OPEN:
        await move(session, deal, payment, P.PAYMENT_CANCELLED)
    if PaymentStatus(payment.status) not in CLOSED_UNPAID:
        return False
    if await repository.pending_call(session, payment.id, CallKind.REFUND.value) is not None:
        return False
    await _queue_call(session, payment, CallKind.REFUND)
    await deal_side().refunded_late(session, deal, payment.amount_minor)
    return True


async def processing(session: AsyncSession, deal_id: uuid.UUID, payment_id: uuid.UUID) -> None:
    """The provider is taking the buyer's money (a card was submitted, 3-D Secure may be
    asked): a ``Created`` payment becomes ``Processing``. Only the provider's confirmation
    makes it ``Paid``; an answer that came first (the webhook) is left as it is."""
    deal = await deal_side().lock(session, deal_id)
    payment = await repository.payment(session, payment_id, fresh=True)
    if deal is not None and payment.status == P.CREATED:
        await move(session, deal, payment, P.PROCESSING)


async def settle_open(session: AsyncSession, deal: EscrowDeal, outcome: Outcome) -> PaymentStatus:
    """The provider's final answer for the deal's open payment: it becomes ``Paid``,
    ``PaymentFailed`` or ``PaymentCancelled`` (through ``Processing``), and that status is
    returned; ``Conflict`` when the deal has no open payment. What it means for the deal is
    the caller's (``dealbroker.settlement``)."""
    payment = await repository.current(session, deal.id)
    if payment is None or PaymentStatus(payment.status) not in OPEN:
        raise Conflict("There is no open payment for this deal.")
    if payment.status == P.CREATED:
        await move(session, deal, payment, P.PROCESSING)
    final = SETTLED_AS[outcome]
    await move(session, deal, payment, final)
    return final


async def sandbox_set(
    session: AsyncSession, deal: EscrowDeal, status: PaymentStatus, settings: Settings
) -> Payment:
    """The sandbox's ``paymentStatus``: walk the deal's payment to ``status`` by the shortest
    legal path (creating the payment if needed), emitting each step's event (the payment's
    event again when it is there already). A payout or refund status the deal has not reached
    is refused before any step (the sandbox moves no money a real deal would not)."""
    _check_escrow(deal, status)
    _require_agreement(deal)
    payment = await repository.current(session, deal.id)
    if payment is None or (
        PaymentStatus(payment.status) in {P.PAYMENT_FAILED, P.PAYMENT_CANCELLED}
    ):
        payment = await _create(
            session, deal, settings, Method.CARD, "sandbox", hash_token(new_token())
        )
    steps = _path(PaymentStatus(payment.status), status)
    if not steps:
        await _emit(session, deal, payment)  # already there: a trigger always sends its event
    if status is P.REFUNDED and payment.status == P.PAID:
        # The refund the deal queued is made now, as the simulated provider would: the call is
        # closed with the refund, so the worker does not make it a second time.
        call = await repository.pending_call(session, payment.id, CallKind.REFUND.value)
        call = None if call is None else await repository.call_for_update(session, call.id)
        if call is not None and call.status == "pending":
            await call_succeeded(session, deal, call)
            return payment
    if status in PAYOUT and payment.status == P.PENDING_PAYOUT:
        # A payout the bank-file rail holds is settled by the trigger, as the bank's report
        # would settle it: no later file pays it, and a payout failed here can be retried.
        call = await repository.pending_call(session, payment.id, CallKind.PAYOUT.value)
        call = None if call is None else await repository.call_for_update(session, call.id)
        if call is not None and call.status == "submitted" and status is P.PAID_OUT:
            await call_succeeded(session, deal, call)
            return payment
        if call is not None and call.status == "submitted" and status is not P.PENDING_PAYOUT:
            _finish(call, "failed", f"settled by the sandbox trigger as {status.value}")
    for step in steps:
        await move(session, deal, payment, step)
    return payment


def _path(start: PaymentStatus, goal: PaymentStatus) -> list[PaymentStatus]:
    """The shortest sequence of legal moves from ``start`` to ``goal`` (empty when equal)."""
    frontier: list[tuple[PaymentStatus, list[PaymentStatus]]] = [(start, [])]
    seen = {start}
    while frontier:
        status, path = frontier.pop(0)
        if status is goal:
            return path
        if status in CLOSED_UNPAID:
            continue  # their way on is for money taken late, never a shortcut for the sandbox
        for nxt in sorted(PAYMENT_TRANSITIONS[status]):
            if nxt not in seen:
                seen.add(nxt)
                frontier.append((nxt, [*path, nxt]))
    raise Conflict(
        f"A payment in status {start.value} cannot become {goal.value}.",
        extra={"paymentStatus": start.value},
    )


async def refund(session: AsyncSession, deal: EscrowDeal, *, less_shipping: bool = False) -> None:
    """Give the buyer the whole amount back, or (``less_shipping``: a parcel the buyer did not
    collect) the amount less the shipping, fixed on the payment now: the provider's refund is
    queued here and made by the worker (``payments.tasks``); the payment becomes ``Refunded``
    when it has gone through."""
    payment = await repository.current(session, deal.id)
    if payment is None or payment.status != P.PAID:
        raise Conflict(f"Deal {deal.id} has no paid payment to refund.")
    payment.refund_less_shipping = less_shipping and payment.shipping_minor > 0
    await _queue_call(session, payment, CallKind.REFUND)


async def pay_out(session: AsyncSession, deal: EscrowDeal) -> None:
    """Queue the seller's payout (``PendingPayOut``); the provider is asked to pay at once if
    the seller has a payout account, else when they register one."""
    payment = await repository.current(session, deal.id)
    if payment is None or payment.status != P.PAID:
        raise Conflict(f"Deal {deal.id} has no paid payment to pay out.")
    await move(session, deal, payment, P.PENDING_PAYOUT)
    account = await repository.payout_account(session, deal.id)
    if account is not None:
        await _queue_payout(session, payment, account)
    elif needs_capture(payment):
        await _queue_call(session, payment, CallKind.CAPTURE)  # handed over: take the money


class CallKind(StrEnum):
    REFUND = "refund"
    PAYOUT = "payout"
    CANCEL = "cancel"  # the provider's side of a payment closed unpaid (a PaymentIntent)
    CAPTURE = "capture"  # a reservation taken at hand-over (Vipps)


# Money out: a call's id is its idempotency key at the provider (Stripe's refund, Vipps's
# refund, Swish's refund and payout instruction, the bank's end-to-end id), so the id of the
# n-th refund or payout of a payment is derived from the payment, the kind and n: the same
# call decided again (by a database restored to a moment before the first was made, and
# whose worker decides the deal's refund or payout anew) has the same id, the provider sees
# the instruction it has already and does not pay twice, and reconciliation can ask the
# provider about the next id, which our database does not know of (``money_out_call_id``).
# A retry of a refused call is the next attempt, so a new id (see ``retry_refused_call``).
MONEY_OUT = frozenset({CallKind.REFUND, CallKind.PAYOUT})
MONEY_OUT_IDS = uuid.UUID("6d1b6c2e-7f0a-5c1e-9a43-2f8e5d0b7c91")


def money_out_call_id(payment_id: uuid.UUID, kind: CallKind, attempt: int) -> uuid.UUID:
    """The id of ``payment_id``'s refund or payout call number ``attempt`` (0 the first)."""
    return uuid.uuid5(MONEY_OUT_IDS, f"{payment_id}:{kind.value}:{attempt}")


async def next_money_out_ids(
    session: AsyncSession, payment_ids: list[uuid.UUID], kind: CallKind
) -> dict[uuid.UUID, uuid.UUID]:
    """The id the next ``kind`` call (a refund or payout) of each payment will have."""
    counts = await repository.call_counts(session, payment_ids, kind.value)
    return {payment_id: money_out_call_id(payment_id, kind, n) for payment_id, n in counts.items()}


async def _queue_call(
    session: AsyncSession,
    payment: Payment,
    kind: CallKind,
    account: PayoutAccount | None = None,
) -> ProviderCall:
    """Record that the provider must make ``kind`` for ``payment``, unless it already must; the
    worker is woken once this transaction commits. The call under way."""
    under_way = await repository.pending_call(session, payment.id, kind.value)
    if under_way is not None:
        return under_way
    if kind is CallKind.CAPTURE:
        # A refund under way decides on the provider's record itself (it takes the part we keep
        # and releases the rest); a capture beside it would race it.
        refunding = await repository.pending_call(session, payment.id, CallKind.REFUND.value)
        if refunding is not None:
            return refunding
    now = clock.now()
    if kind in MONEY_OUT:
        call_id = (await next_money_out_ids(session, [payment.id], kind))[payment.id]
    else:
        call_id = uuid.uuid4()
    call = ProviderCall(
        id=call_id,
        payment_id=payment.id,
        deal_id=payment.deal_id,
        kind=kind.value,
        status="pending",
        account_id=account.id if account else None,
        attempts=0,
        next_attempt_at=now,
        error=None,
        provider_ref=None,
        created_at=now,
        finished_at=None,
    )
    repository.add_call(session, call)
    await session.flush()
    await wakeup.mark(session, wakeup.PROVIDER_CALLS)
    return call


async def call_succeeded(
    session: AsyncSession, deal: EscrowDeal, call: ProviderCall, provider_ref: str | None = None
) -> None:
    """The provider made ``call`` (both rows locked by the caller): apply it to the payment.
    ``provider_ref`` is what the provider calls the refund or payout, kept beside the call. A
    payout is ``PaidOut`` once only: a second call reported paid for a payment paid out already
    (which the single open call per payment rules out) is refused, not applied."""
    payment = await repository.payment(session, call.payment_id)
    _finish(call, "succeeded", None)
    call.provider_ref = provider_ref
    if call.kind == CallKind.REFUND:
        await move(session, deal, payment, P.REFUNDED)
        return
    if call.kind == CallKind.CANCEL:
        await session.flush()
        return
    if call.kind == CallKind.CAPTURE:
        payment.captured_at = clock.now()
        payment.updated_at = payment.captured_at
        await session.flush()
        await _wake_waiting_refund(session, payment)
        account = await repository.payout_account(session, deal.id)
        if payment.status in (P.PENDING_PAYOUT, P.PAYOUT_FAILED) and account is not None:
            await _queue_call(session, payment, CallKind.PAYOUT, account)  # it waited for this
        return
    if payment.status == P.PAYOUT_FAILED:
        await move(session, deal, payment, P.PENDING_PAYOUT)
    await move(session, deal, payment, P.PAID_OUT)  # Conflict if paid out already


# A call the provider may have made already in the operator's word (``record_made``): one still
# to be made, one a payout rail took, or one refused (Stripe refuses a refund of a PaymentIntent
# refunded already). Never one that succeeded: its money is recorded.
RECORDABLE = {
    CallKind.REFUND: ("pending", "failed"),
    CallKind.PAYOUT: ("pending", "submitted", "failed"),
}


def recordable(call: ProviderCall, payment: Payment) -> None:
    """``Conflict`` unless ``call`` is a refund or payout whose money the provider could have
    moved while our record says it has not (see ``record_made``)."""
    kind = CallKind(call.kind)
    if kind not in RECORDABLE:
        raise Conflict(
            f"Provider call {call.id} is a {call.kind}: only refunds and payouts move money out."
        )
    if call.status not in RECORDABLE[kind]:
        raise Conflict(f"Provider call {call.id} is {call.status}: there is nothing to record.")
    # A refund gives back money held, or money taken late for a payment closed unpaid.
    due = (
        {P.PAID, *CLOSED_UNPAID} if kind is CallKind.REFUND else {P.PENDING_PAYOUT, P.PAYOUT_FAILED}
    )
    if payment.status not in due:
        raise Conflict(
            f"Payment {payment.id} is {payment.status}: its {call.kind} is not due.",
            extra={"paymentStatus": payment.status},
        )


async def record_made(
    session: AsyncSession,
    deal: EscrowDeal,
    call: ProviderCall,
    provider_ref: str,
    checked: str,
    checked_minor: int,
    actor: Actor,
) -> None:
    """The operator's record that the provider made ``call`` (a refund or payout, both rows
    locked by the caller; its provider's record checked by the caller, ``checked`` saying
    what it showed): the money left, but our database has no word of it (it was restored to a
    moment before, or the answer was lost for good). Applied as the worker applies a call
    made (``call_succeeded``), so the payment and the deal move on and the parties are told,
    and the call is never made again. Refused (``Conflict``) for a call that does not move
    money out, is made already, or was retried by a newer one; for a call still to be made or
    under way at a rail unless money out is held (``payments.hold``: else the worker may make
    it meanwhile); and when the amount due is no longer ``checked_minor``, what the provider's
    record was checked against. In the audit trail with what the provider's record showed."""
    payment = await repository.payment(session, call.payment_id, fresh=True)
    recordable(call, payment)
    if call.status != "failed" and await hold.current(session) is None:
        # Not held, the worker may be making this very call (or an export filing it): its
        # answer would be dropped as applied already, and the money moved twice.
        raise Conflict(
            f"Provider call {call.id} is {call.status}: hold money out first "
            "(`dealbroker payments hold`), so that it is not made while it is recorded."
        )
    due = payment.refund_minor if call.kind == CallKind.REFUND else payment.payout_minor
    if due != checked_minor:
        raise Conflict(f"Payment {payment.id} changed while its provider was asked: try again.")
    latest = await repository.deal_latest_call(session, deal.id, call.kind)
    if latest is None or latest.id != call.id:
        raise Conflict(f"Provider call {call.id} is no longer the deal's newest {call.kind}.")
    before = {"status": call.status, "error": call.error, "paymentStatus": payment.status}
    await call_succeeded(session, deal, call, provider_ref)
    await audit.record(
        session,
        actor,
        "provider_call.record_made",
        "provider_call",
        call.id,
        before=before,
        after={
            "status": call.status,
            "providerRef": provider_ref,
            "checked": checked,
            "paymentStatus": payment.status,
            "dealId": deal.id,
        },
    )


async def refund_taken_late(session: AsyncSession, deal: EscrowDeal, payment: Payment) -> bool:
    """The operator's remedy for money the provider took (checked there by the caller) for a
    payment that does not pay for its deal, which no event of the provider will refund any more
    (the event was handled before ``refund_late`` existed): the same refund, once. Refused
    (``Conflict``) for a payment that paid for the deal, or that its deal still waits for."""
    status = PaymentStatus(payment.status)
    if status not in OPEN | CLOSED_UNPAID:
        raise Conflict(
            f"Payment {payment.id} is {payment.status}: it paid for the deal or was refunded "
            "already; it is not money taken late."
        )
    latest = await repository.current(session, deal.id)
    waiting = (
        latest is not None and latest.id == payment.id and deal.escrow is Escrow.AWAITING_PAYMENT
    )
    if status in OPEN and waiting:
        raise Conflict(
            f"Deal {deal.id} still waits for payment {payment.id}: the provider's event applies "
            "it; nothing is refunded."
        )
    return await refund_late(session, deal, payment)


async def call_found_paid(session: AsyncSession, deal: EscrowDeal, call: ProviderCall) -> None:
    """The provider could not cancel a closed payment's pay-in (``call``, both rows locked by
    the caller) because the buyer's money had come in first: the cancel is over, and the money
    goes back (``refund_late``), whether or not the provider's own event about it comes."""
    payment = await repository.payment(session, call.payment_id)
    _finish(call, "succeeded", "the money had come in first: refunded instead")
    await refund_late(session, deal, payment)
    await session.flush()


async def call_submitted(
    session: AsyncSession, deal: EscrowDeal, call: ProviderCall, rail: str | None = None
) -> None:
    """A payout rail took ``call`` and will answer later (the bank's status report, Swish's
    callback): the call stays open as ``submitted`` with its ``rail``, and the payment is
    ``PendingPayOut``, on its way (again, if an earlier payout failed), until the rail reports
    it paid or refused. A Swish payout no callback settles is asked about after a while."""
    payment = await repository.payment(session, call.payment_id)
    call.status, call.error, call.rail = "submitted", None, rail
    if rail == "swish":
        from dealbroker.payments.swish_payouts import POLL_AFTER

        call.next_attempt_at = clock.now() + POLL_AFTER
    if payment.status == P.PAYOUT_FAILED:
        await move(session, deal, payment, P.PENDING_PAYOUT)
    await session.flush()


async def _wake_waiting_refund(session: AsyncSession, payment: Payment) -> None:
    """A capture of ``payment`` is over: a refund that waited for it may be made now."""
    refunding = await repository.pending_call(session, payment.id, CallKind.REFUND.value)
    if refunding is not None:
        await wakeup.mark(session, wakeup.PROVIDER_CALLS)


async def call_refused(
    session: AsyncSession,
    deal: EscrowDeal,
    call: ProviderCall,
    reason: str,
    *,
    lapsed: bool = False,
) -> None:
    """The provider refused ``call`` for good. A refused payout is ``PayoutFailed`` (asked again
    when the seller registers an account again), never a lost payout; a refused refund leaves
    the money held, for the operator. The parties hear of a refused capture only when it is
    ``lapsed``: the provider's record showed the reservation gone; any other refusal is the
    operator's (the back office's refused calls)."""
    payment = await repository.payment(session, call.payment_id)
    _finish(call, "failed", reason)
    if call.kind == CallKind.PAYOUT and payment.status == P.PENDING_PAYOUT:
        await move(session, deal, payment, P.PAYOUT_FAILED)
    if call.kind == CallKind.CAPTURE:
        await _wake_waiting_refund(session, payment)
    refunding = await repository.pending_call(session, payment.id, CallKind.REFUND.value)
    if (
        call.kind == CallKind.CAPTURE
        and lapsed
        and needs_capture(payment)
        and payment.status != P.REFUNDED
        and refunding is None  # a refund cancelled the reservation first: nothing is owed
    ):
        # The reservation is gone before it was captured: nothing was taken, so nothing is
        # paid out (the payout waits for a capture); both parties and the operator are told.
        await deal_side().capture_failed(session, deal, payment.amount_minor)
    await session.flush()


@dataclass(frozen=True)
class Retry:
    """What retrying a refused call did: ``new_call_id`` is the call queued in its place, or
    None when it had been retried already (nothing queued again)."""

    call_id: uuid.UUID
    kind: str
    new_call_id: uuid.UUID | None


async def retry_refused_call(
    session: AsyncSession, call_id: uuid.UUID, actor: Actor, request_id: str | None = None
) -> Retry:
    """The operator's retry of a call the provider refused for good (a refund Stripe refused,
    a payout the bank rejected): queued again as a new call, which the provider-call job makes
    like any other. A new call has a new id, so a new idempotency key (the provider keeps its
    refusal under the old one: Stripe for 24 hours) and, for a payout, a new end-to-end id in
    the next bank file, never the refused transfer again.

    Once only: the deal is locked, then the call, as the job does; a call that is no longer the
    payment's newest of its kind was retried already, and two retries racing queue one call.
    ``Conflict`` when the payment has moved on so that the call no longer applies (a refund
    for a payment no longer held, a payout with no account to pay to). Recorded in the audit
    trail with the call before and the new call after."""
    found = await repository.call(session, call_id)
    deal = None if found is None else await deal_side().lock(session, found.deal_id)
    call = None if deal is None else await repository.call_for_update(session, call_id)
    if deal is None or call is None:
        raise NotFound(f"No provider call {call_id}.")
    if call.status != "failed":
        raise Conflict(f"Provider call {call_id} is {call.status}, not refused: nothing to retry.")
    if (call.error or "").startswith(swish_payouts.PAID_AFTER_REFUSAL):
        raise Conflict(f"Swish paid payout {call_id} after all: the seller has the money.")
    latest = await repository.latest_call(session, call.payment_id, call.kind)
    if latest.id != call.id:
        return Retry(call.id, call.kind, None)
    payment = await repository.payment(session, call.payment_id, fresh=True)
    kind = CallKind(call.kind)
    account = None
    if kind is CallKind.REFUND and payment.status != P.PAID:
        raise Conflict(f"Payment {payment.id} is {payment.status}: there is no money to refund.")
    if kind is CallKind.CANCEL and payment.status not in CLOSED_UNPAID:
        raise Conflict(f"Payment {payment.id} is {payment.status}: nothing to cancel.")
    if kind is CallKind.CAPTURE and not (
        needs_capture(payment) and payment.status in (P.PAID, P.PENDING_PAYOUT, P.PAYOUT_FAILED)
    ):
        raise Conflict(f"Payment {payment.id} is {payment.status}: nothing to capture.")
    if kind is CallKind.CAPTURE and await repository.pending_call(
        session, payment.id, CallKind.REFUND.value
    ):
        raise Conflict(f"Payment {payment.id} is being refunded: nothing to capture.")
    if kind is CallKind.PAYOUT:
        if payment.status not in (P.PENDING_PAYOUT, P.PAYOUT_FAILED):
            raise Conflict(f"Payment {payment.id} is {payment.status}: nothing to pay out.")
        account = await repository.payout_account(session, deal.id)
        if account is None:
            raise Conflict(f"Deal {deal.id} has no payout account to pay to.")
    queued = await _queue_call(session, payment, kind, account)
    await audit.record(
        session,
        actor,
        "provider_call.retry",
        "provider_call",
        call.id,
        before={"kind": call.kind, "status": call.status, "error": call.error},
        after={"call": queued.id, "status": queued.status, "dealId": deal.id},
        request_id=request_id,
    )
    return Retry(call.id, call.kind, queued.id)


async def refused_calls(session: AsyncSession, limit: int) -> list[tuple[ProviderCall, Payment]]:
    """The calls the provider refused that nobody has retried yet, newest first."""
    return await repository.refused_calls(session, limit)


def _finish(call: ProviderCall, status: str, error: str | None) -> None:
    call.status, call.error, call.finished_at = status, error, clock.now()


def normalise_account(number: str) -> tuple[str, str]:
    """``(kind, number)`` of a valid IBAN or Norwegian account number; raises ``FieldError``
    (``account``, the page's name for the field)."""
    compact = number.replace(" ", "").replace(".", "").upper()
    try:
        if compact[:2].isalpha():
            return "iban", iban.validate(compact)
        return "account", kontonr.validate(compact)
    except ValidationError as exc:
        # The library's reason is English: the page says it in its reader's words.
        refused = _("Not a valid IBAN or account number: %(reason)s.") % {"reason": _why(exc)}
        raise FieldError("account", refused, str(exc)) from exc


def _why(exc: ValidationError) -> str:
    """Why python-stdnum refused an account number, in the current locale's words."""
    if isinstance(exc, InvalidChecksum):
        return _("its check digits do not match the rest (a typing error?)")
    if isinstance(exc, InvalidLength):
        return _("it has too few or too many characters")
    if isinstance(exc, InvalidComponent):
        return _("a part of it, such as its country or bank code, does not exist")
    return _("it holds characters that do not belong in one")


CHANGE_CONFIRMATION_LIFETIME = timedelta(hours=24)


@dataclass(frozen=True)
class AccountRequest:
    """What registering an account did: ``saved`` at once (the deal had none, or it is the one
    in force), or ``confirm``: a change waits for the link sent to the seller's e-mail."""

    outcome: str
    change: PayoutAccountChange


@dataclass(frozen=True)
class SwishPayee:
    """A Swish payout account's second half: the payee's personal identity number (as typed),
    with the settings that allow Swish payouts and seal the number."""

    ssn: str
    settings: Settings


def swish_offered(settings: Settings, currency: str) -> bool:
    """Whether a seller may be paid by Swish here: Swish payouts on, and the deal in SEK."""
    return settings.swish_payouts and currency == "SEK" and settings.currency == "SEK"


def _normalise(
    deal: EscrowDeal, number: str, swish: SwishPayee | None
) -> tuple[str, str, str | None]:
    """``(kind, number, payee SSN)`` of the account the seller gave; ``FieldError`` if not
    valid, ``BadRequest`` for a Swish number where Swish does not pay."""
    if swish is None:
        return (*normalise_account(number), None)
    if not swish_offered(swish.settings, deal.currency):
        raise BadRequest(_("Payouts to Swish are not offered for this deal."))
    return "swish", swish_payouts.normalise_number(number), swish_payouts.normalise_ssn(swish.ssn)


def _same_payee(settings: Settings | None, sealed: str | None, ssn: str | None) -> bool:
    if ssn is None or sealed is None or settings is None:
        return ssn is None and sealed is None
    try:
        return swish_payouts.unseal(settings, sealed) == ssn
    except Exception:  # sealed under another secret key: a new number
        return False


async def register_payout_account(
    session: AsyncSession,
    deal: EscrowDeal,
    number: str,
    holder: str,
    swish: SwishPayee | None = None,
) -> AccountRequest:
    """Say where this deal's payout goes: a bank account, or (``swish``) a Swish number with
    its owner's personal identity number. The first account takes effect at once (and a payout
    waiting for it is queued); the same account again retries a failed payout; a different one
    only once the seller confirms it through the link with a one-time token that we send to
    their e-mail address (through the settlement handler), because whoever holds the page's
    link must not be able to redirect money alone. Every request is kept in the audit trail."""
    kind, normalised, ssn = _normalise(deal, number, swish)
    settings = swish.settings if swish else None
    sealed = swish_payouts.seal(swish.settings, ssn) if swish and ssn else None
    account = await repository.payout_account(session, deal.id)
    now = clock.now()
    if account is None:
        account = PayoutAccount(
            id=uuid.uuid4(),
            deal_id=deal.id,
            kind=kind,
            number=normalised,
            holder=holder,
            payee_ssn_sealed=sealed,
            created_at=now,
            updated_at=now,
        )
        repository.add_account(session, account)
        change = _audit(deal, kind, normalised, holder, "applied", None, sealed)
        repository.add_change(session, change)
        await session.flush()
        await _queue_waiting_payout(session, deal, account)
        return AccountRequest("saved", change)
    if (account.kind, account.number, account.holder) == (kind, normalised, holder) and (
        _same_payee(settings, account.payee_ssn_sealed, ssn)
    ):
        change = _audit(deal, kind, normalised, holder, "applied", None, sealed)
        repository.add_change(session, change)
        await session.flush()
        await _queue_waiting_payout(session, deal, account)  # a failed payout is tried again
        return AccountRequest("saved", change)
    for older in await repository.pending_changes(session, deal.id):
        older.status = "superseded"
    token = new_token()
    change = _audit(deal, kind, normalised, holder, "pending", hash_token(token), sealed)
    repository.add_change(session, change)
    await session.flush()
    await deal_side().confirm_account_change(
        session, deal, normalised[-4:], token, CHANGE_CONFIRMATION_LIFETIME
    )
    return AccountRequest("confirm", change)


def _audit(
    deal: EscrowDeal,
    kind: str,
    number: str,
    holder: str,
    status: str,
    token_hash: str | None,
    sealed: str | None = None,
) -> PayoutAccountChange:
    now = clock.now()
    return PayoutAccountChange(
        id=uuid.uuid4(),
        deal_id=deal.id,
        integration_id=deal.integration_id,
        status=status,
        kind=kind,
        number=number,
        holder=holder,
        token_hash=token_hash,
        payee_ssn_sealed=sealed,
        requested_at=now,
        applied_at=now if status == "applied" else None,
    )


async def pending_account_change(
    session: AsyncSession, deal: EscrowDeal
) -> PayoutAccountChange | None:
    """The change that waits for the seller's confirmation, if one does and is not too old."""
    pending = await repository.pending_changes(session, deal.id)
    latest = pending[-1] if pending else None
    if latest is None or clock.now() - latest.requested_at > CHANGE_CONFIRMATION_LIFETIME:
        return None
    return latest


async def confirm_payout_account(
    session: AsyncSession, deal: EscrowDeal, token: str
) -> PayoutAccount:
    """The seller confirms a change from the link we e-mailed: the deal's payout goes to the
    new account from now on (a payout waiting for one is queued to it)."""
    return await _apply_change(session, deal, await change_to_confirm(session, deal, token))


async def confirm_payout_change(
    session: AsyncSession, deal: EscrowDeal, change_id: uuid.UUID
) -> PayoutAccount:
    """As ``confirm_payout_account``, for the change the seller's eID confirmation was started
    for (from its link, whose token is not kept)."""
    change = await repository.change_by_id(session, deal.id, change_id)
    return await _apply_change(session, deal, change if _confirmable(change) else None)


async def _apply_change(
    session: AsyncSession, deal: EscrowDeal, change: PayoutAccountChange | None
) -> PayoutAccount:
    if change is None:
        raise NotFound(
            _("This confirmation link is not valid (any more). Ask for the change again.")
        )
    account = await repository.payout_account(session, deal.id)
    assert account is not None  # a change is only asked for when an account is set
    now = clock.now()
    account.kind, account.number, account.holder = change.kind, change.number, change.holder
    account.payee_ssn_sealed = change.payee_ssn_sealed
    account.updated_at = now
    change.status, change.applied_at = "applied", now
    await session.flush()
    await deal_side().account_changed(session, deal, change.number[-4:])
    await _queue_waiting_payout(session, deal, account)
    return account


async def change_to_confirm(
    session: AsyncSession, deal: EscrowDeal, token: str
) -> PayoutAccountChange | None:
    """The pending change a confirmation link stands for, while it may still be confirmed."""
    change = await repository.change_by_token(session, deal.id, hash_token(token))
    return change if _confirmable(change) else None


def _confirmable(change: PayoutAccountChange | None) -> bool:
    return (
        change is not None
        and change.status == "pending"
        and clock.now() - change.requested_at <= CHANGE_CONFIRMATION_LIFETIME
    )


async def _queue_waiting_payout(
    session: AsyncSession, deal: EscrowDeal, account: PayoutAccount
) -> None:
    payment = await repository.current(session, deal.id)
    if payment is not None and payment.status in (P.PENDING_PAYOUT, P.PAYOUT_FAILED):
        await _queue_payout(session, payment, account)


async def payout_failure(session: AsyncSession, deal: EscrowDeal) -> str | None:
    """Why the deal's payout failed (the rail's reason on its latest payout call), while the
    payment is ``PayoutFailed``."""
    payment = await repository.current(session, deal.id)
    if payment is None or payment.status != P.PAYOUT_FAILED:
        return None
    call = await repository.latest_call(session, payment.id, CallKind.PAYOUT.value)
    return call.error


async def payout_account_of(session: AsyncSession, deal: EscrowDeal) -> PayoutAccount | None:
    """The account this deal's payout goes to (never another deal's)."""
    return await repository.payout_account(session, deal.id)


async def by_checkout_token(session: AsyncSession, token: str) -> Payment | None:
    return await repository.by_provider_ref(session, hash_token(token))


async def by_checkout_token_unlocked(session: AsyncSession, token: str) -> Payment | None:
    """The payment behind a checkout token, read without a lock: the Stripe checkout calls the
    provider next, and no row lock is held across a provider call."""
    return await repository.by_provider_ref_unlocked(session, hash_token(token))


async def record_swish_callback(
    session: AsyncSession, deal: EscrowDeal, payment_id: uuid.UUID, callback_hash: str
) -> bool:
    """Keep the hash of the callback identifier about to be set on ``payment``'s Swish payment
    request (its deal locked by the caller), before the request is made, so its callback is
    recognised however soon it comes; False (nothing kept) when the payment is no longer open
    or its deal no longer waits for it. A hash kept already stays: a request Swish may have
    made with it (its answer lost) calls back with that identifier, never a later one."""
    payment = await repository.payment(session, payment_id, fresh=True)
    if PaymentStatus(payment.status) not in OPEN or deal.escrow is not Escrow.AWAITING_PAYMENT:
        return False
    if payment.swish_callback_hash is None:
        payment.swish_callback_hash = callback_hash
    await session.flush()
    return True


async def record_swish_request(
    session: AsyncSession, deal: EscrowDeal, payment_id: uuid.UUID, request_token: str | None
) -> None:
    """Swish took ``payment``'s request (its deal locked by the caller): the payment is
    ``Processing`` (only Swish's answer makes it ``Paid``) and keeps the token that opens the
    request in the app (None: not known from this attempt, made already by an earlier one:
    a token known stays). Closed meanwhile (the deal cancelled), the request is cancelled too."""
    payment = await repository.payment(session, payment_id, fresh=True)
    if request_token is not None:
        payment.swish_request_token = request_token
    if payment.status == P.CREATED:
        await move(session, deal, payment, P.PROCESSING)
    elif PaymentStatus(payment.status) not in OPEN:
        await _queue_call(session, payment, CallKind.CANCEL)
    await session.flush()


async def wake_call(session: AsyncSession, call: ProviderCall) -> None:
    """The provider says a pending call's outcome is known (a refund's callback): the
    provider-call job asks about it now instead of at its next backoff."""
    if call.status == "pending":
        call.next_attempt_at = clock.now()
        await session.flush()
        await wakeup.mark(session, wakeup.PROVIDER_CALLS)
