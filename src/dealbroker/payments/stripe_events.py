"""Stripe's webhook events, applied to our payments: the only way a Stripe payment becomes paid.

The route (``web.stripe_checkout.stripe_webhook``) has verified the signature; this module
applies each event once, through the same functions every other payment change goes through
(the settlement handler's ``settle``, which moves the deal too, and ``payments.move``):

- ``payment_intent.succeeded``: ``Paid`` (the deal moves on to shipping or pickup);
- ``payment_intent.payment_failed``: ``PaymentFailed`` (a declined card, a failed 3-D Secure);
- ``payment_intent.canceled``: ``PaymentCancelled``;
- ``payment_intent.processing`` and ``payment_intent.requires_action`` (3-D Secure asked):
  ``Processing``, while the money is not yet ours nor refused;
- ``refund.failed`` and ``refund.updated`` with a failed refund: logged for the operator (the
  refund was taken as made when Stripe accepted it; ``payments reconcile`` shows it too).

An event is applied only if it matches our row: the PaymentIntent we stored for the payment,
the same amount and currency. Anything else is logged and acknowledged, never applied.

Money that comes in for a payment that no longer pays for its deal (a ``succeeded`` for a
payment closed by the deal's cancel, or for a deal that no longer waits for it) is refunded in
full at once (``payments.refund_late``), never left at Stripe.

A signed body is still read as hostile (``parse``): bounded in size and nesting before it is
decoded, and every field this module reads is type-checked; what fails is ``MalformedEvent``
(the route answers 400), never an error deeper down.
"""

import json
import logging
import re
import uuid
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.errors import DomainError
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import PaymentStatus
from dealbroker.payments import repository
from dealbroker.payments import service as payments
from dealbroker.payments.escrow import Outcome as PaymentOutcome
from dealbroker.payments.escrow import deal_side
from dealbroker.payments.models import StripeEvent

log = logging.getLogger("dealbroker.payments")

OUTCOMES = {
    "payment_intent.succeeded": PaymentOutcome.SUCCEEDED,
    "payment_intent.payment_failed": PaymentOutcome.FAILED,
    "payment_intent.canceled": PaymentOutcome.CANCELLED,
}
UNDER_WAY = frozenset({"payment_intent.processing", "payment_intent.requires_action"})
REFUND_EVENTS = frozenset({"refund.failed", "refund.updated"})
HANDLED = frozenset({*OUTCOMES, *UNDER_WAY, *REFUND_EVENTS})


# Stripe's events are a few kilobytes and a few levels deep; far more is not Stripe's.
MAX_EVENT_BYTES = 256 * 1024
MAX_DEPTH = 32
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class MalformedEvent(ValueError):
    """A signed body that is not a Stripe event we can read: answered 400, applied never."""


@dataclass(frozen=True)
class Event:
    """The parts of a Stripe event this module reads, each of the type it is read as.
    ``amount`` and ``currency`` are the PaymentIntent's (None for other objects); ``status``,
    ``payment_intent`` and ``failure_reason`` a Refund's."""

    id: str
    type: str
    object_id: str | None = None
    amount: int | None = None
    currency: str | None = None
    status: str | None = None
    payment_intent: str | None = None
    failure_reason: str | None = None


def _too_deep(payload: str) -> bool:
    """Whether ``payload``'s arrays and objects nest deeper than ``MAX_DEPTH``, found without
    decoding it (strings taken out first: their brackets are text), stopping at the first
    bracket too deep."""
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _STRING.sub("", payload)):
        if bracket in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _text(value: object, what: str, limit: int = 255) -> str:
    """``value`` if it is a string we can store and compare: non-empty, at most ``limit``
    characters, no NUL, valid UTF-8 (a lone surrogate from a ``\\ud800`` escape is not)."""
    if not isinstance(value, str) or not 0 < len(value) <= limit or "\x00" in value:
        raise MalformedEvent(f"{what} is not a string of at most {limit} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MalformedEvent(f"{what} is not valid text") from exc
    return value


def _maybe_text(value: object, what: str, limit: int = 255) -> str | None:
    return None if value is None else _text(value, what, limit)


def parse(payload: str) -> Event:
    """The event in a verified body, or ``MalformedEvent``. The envelope (``id``, ``type``,
    ``data.object``) must be well formed; the object's fields are checked for the types this
    module handles, so an event of another type is well formed with any object."""
    if len(payload) > MAX_EVENT_BYTES or _too_deep(payload):
        raise MalformedEvent(f"larger than {MAX_EVENT_BYTES} bytes or {MAX_DEPTH} levels deep")
    try:
        event = json.loads(payload)
    except ValueError as exc:  # also a number too long to convert
        raise MalformedEvent("not JSON") from exc
    if not isinstance(event, dict):
        raise MalformedEvent("not a JSON object")
    event_id = _text(event.get("id"), "id")
    kind = _text(event.get("type"), "type", 100)
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    if not isinstance(obj, dict):
        raise MalformedEvent("data.object is not an object")
    if kind in OUTCOMES or kind in UNDER_WAY:
        amount = obj.get("amount")
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise MalformedEvent("data.object.amount is not an integer")
        return Event(
            event_id,
            kind,
            object_id=_text(obj.get("id"), "data.object.id"),
            amount=amount,
            currency=_text(obj.get("currency"), "data.object.currency", 3),
        )
    if kind in REFUND_EVENTS:
        return Event(
            event_id,
            kind,
            object_id=_text(obj.get("id"), "data.object.id"),
            status=_maybe_text(obj.get("status"), "data.object.status", 50),
            payment_intent=_maybe_text(obj.get("payment_intent"), "data.object.payment_intent"),
            failure_reason=_maybe_text(obj.get("failure_reason"), "data.object.failure_reason"),
        )
    return Event(event_id, kind)


class Outcome(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"  # this event id was handled before
    IGNORED = "ignored"  # a type we do not subscribe to, or nothing to change
    UNMATCHED = "unmatched"  # not one of our payments, or not as we made it: logged


async def handle(session: AsyncSession, settings: Settings, event: Event) -> Outcome:
    """Apply one verified, parsed event, at most once."""
    kind, event_id = event.type, event.id
    if kind not in HANDLED:
        return Outcome.IGNORED
    if kind in REFUND_EVENTS:
        return await _refund_event(session, event)
    assert event.object_id is not None  # parse checked it for these types
    payment = await repository.by_stripe_intent(session, event.object_id)
    if payment is None:
        log.warning("stripe event %s (%s) for an unknown PaymentIntent", event_id, kind)
        return Outcome.UNMATCHED
    # The deal first, then the payment: the order every payment change locks in.
    deal = await deal_side().lock(session, payment.deal_id)
    if deal is None:
        return Outcome.IGNORED
    if await repository.stripe_event_seen(session, event_id):
        return Outcome.DUPLICATE
    _record(session, event_id, kind, payment.id)
    payment = await repository.payment(session, payment.id, fresh=True)  # as it is now, locked
    current = await payments.current(session, deal)
    if event.amount != payment.amount_minor or (event.currency or "").upper() != payment.currency:
        log.error(
            "stripe event %s: PaymentIntent %s is not for payment %s's amount; not applied",
            event_id,
            payment.stripe_payment_intent_id,
            payment.id,
        )
        return Outcome.UNMATCHED
    if current is None or current.id != payment.id or current.status not in payments.OPEN:
        closed_unpaid = PaymentStatus(payment.status) in payments.CLOSED_UNPAID
        if kind == "payment_intent.succeeded" and closed_unpaid:
            return await _refund_late(session, event_id, deal.id, payment.id)
        log.info("stripe event %s (%s) for closed payment %s", event_id, kind, payment.id)
        return Outcome.IGNORED
    if kind in UNDER_WAY:
        if current.status == PaymentStatus.CREATED:
            await payments.move(session, deal, current, PaymentStatus.PROCESSING)
            return Outcome.APPLIED
        return Outcome.IGNORED
    payment_id, deal_id = payment.id, deal.id  # a rolled-back savepoint expires the rows
    try:
        async with session.begin_nested():
            await deal_side().settle(session, deal, OUTCOMES[kind], settings)
    except DomainError as exc:
        # The deal no longer waits for this payment (it moved on without it): the money is
        # at Stripe and does not pay for the deal, so it goes back to the buyer.
        log.warning(
            "stripe event %s (%s) for payment %s of deal %s not applied: %s",
            event_id,
            kind,
            payment_id,
            deal_id,
            exc.detail,
        )
        if kind != "payment_intent.succeeded":
            return Outcome.UNMATCHED
        return await _refund_late(session, event_id, deal_id, payment_id)
    return Outcome.APPLIED


async def _refund_late(
    session: AsyncSession, event_id: str, deal_id: uuid.UUID, payment_id: uuid.UUID
) -> Outcome:
    """Stripe took the money of a payment that does not pay for its deal: refund it whole."""
    deal = await deal_side().lock(session, deal_id)
    payment = await repository.payment(session, payment_id, fresh=True)
    assert deal is not None  # locked by this transaction since it was read
    if not await payments.refund_late(session, deal, payment):
        log.info("stripe event %s: payment %s's refund is under way or made", event_id, payment_id)
        return Outcome.IGNORED
    log.warning(
        "stripe event %s: money came in for payment %s after deal %s stopped waiting for it; "
        "refunding it in full",
        event_id,
        payment_id,
        deal_id,
    )
    return Outcome.APPLIED


async def _refund_event(session: AsyncSession, event: Event) -> Outcome:
    if await repository.stripe_event_seen(session, event.id):
        return Outcome.DUPLICATE
    _record(session, event.id, event.type, None)
    if event.type == "refund.failed" or event.status == "failed":
        log.error(
            "stripe refund %s of PaymentIntent %s failed (%s): the buyer's money is not back",
            event.object_id,
            event.payment_intent,
            event.failure_reason,
        )
        return Outcome.APPLIED
    return Outcome.IGNORED


def _record(session: AsyncSession, event_id: str, kind: str, payment_id: object) -> None:
    repository.add_stripe_event(
        session,
        StripeEvent(
            id=event_id,
            type=kind,
            payment_id=payment_id,
            received_at=clock.now(),
        ),
    )
