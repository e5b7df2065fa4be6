"""Stripe's webhook events, applied to our payments: the only way a Stripe payment becomes paid.

The route (``payments.stripe_webhook``) has verified the signature; this module applies each
event once, through the same service functions every other payment change goes through
(``flows.settle_payment``, ``payments.move``):

- ``payment_intent.succeeded``: ``Paid`` (the deal moves on to shipping or pickup);
- ``payment_intent.payment_failed``: ``PaymentFailed`` (a declined card, a failed 3-D Secure);
- ``payment_intent.canceled``: ``PaymentCancelled``;
- ``payment_intent.processing`` and ``payment_intent.requires_action`` (3-D Secure asked):
  ``Processing``, while the money is not yet ours nor refused;
- ``refund.failed`` and ``refund.updated`` with a failed refund: logged for the operator (the
  refund was taken as made when Stripe accepted it; ``payments reconcile`` shows it too).

An event is applied only if it matches our row: the PaymentIntent we stored for the payment,
the same amount and currency. Anything else is logged and acknowledged, never applied.
"""

import logging
from enum import StrEnum
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.errors import DomainError
from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals import repository as deals
from dealbroker.payments import repository
from dealbroker.payments import service as payments
from dealbroker.payments.models import StripeEvent

log = logging.getLogger("dealbroker.payments")

OUTCOMES = {
    "payment_intent.succeeded": "succeeded",
    "payment_intent.payment_failed": "failed",
    "payment_intent.canceled": "cancelled",
}
UNDER_WAY = frozenset({"payment_intent.processing", "payment_intent.requires_action"})
REFUND_EVENTS = frozenset({"refund.failed", "refund.updated"})
HANDLED = frozenset({*OUTCOMES, *UNDER_WAY, *REFUND_EVENTS})


class Outcome(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"  # this event id was handled before
    IGNORED = "ignored"  # a type we do not subscribe to, or nothing to change
    UNMATCHED = "unmatched"  # not one of our payments, or not as we made it: logged


async def handle(
    session: AsyncSession, settings: Settings, event_id: str, kind: str, obj: dict[str, Any]
) -> Outcome:
    """Apply one verified event (``obj`` is its ``data.object``), at most once."""
    if kind not in HANDLED:
        return Outcome.IGNORED
    if kind in REFUND_EVENTS:
        return await _refund_event(session, event_id, kind, obj)
    payment = await repository.by_stripe_intent(session, str(obj.get("id")))
    if payment is None:
        log.warning("stripe event %s (%s) for an unknown PaymentIntent", event_id, kind)
        return Outcome.UNMATCHED
    # The deal first, then the payment: the order every payment change locks in.
    deal = await deals.by_id_for_update(session, payment.deal_id)
    if deal is None:
        return Outcome.IGNORED
    if await repository.stripe_event_seen(session, event_id):
        return Outcome.DUPLICATE
    _record(session, event_id, kind, payment.id)
    payment = await repository.payment(session, payment.id, fresh=True)  # as it is now, locked
    current = await payments.current(session, deal)
    if obj.get("amount") != payment.amount_minor or (
        str(obj.get("currency", "")).upper() != payment.currency
    ):
        log.error(
            "stripe event %s: PaymentIntent %s is not for payment %s's amount; not applied",
            event_id,
            payment.stripe_payment_intent_id,
            payment.id,
        )
        return Outcome.UNMATCHED
    if current is None or current.id != payment.id or current.status not in payments.OPEN:
        level = logging.ERROR if kind == "payment_intent.succeeded" else logging.INFO
        log.log(level, "stripe event %s (%s) for closed payment %s", event_id, kind, payment.id)
        return Outcome.IGNORED
    if kind in UNDER_WAY:
        if current.status == payments.PaymentStatus.CREATED:
            await payments.move(session, deal, current, payments.PaymentStatus.PROCESSING)
            return Outcome.APPLIED
        return Outcome.IGNORED
    payment_id, deal_id = payment.id, deal.id  # a rolled-back savepoint expires the rows
    try:
        async with session.begin_nested():
            await flows.settle_payment(session, deal, OUTCOMES[kind], settings)
    except DomainError as exc:
        # The deal can no longer take it (cancelled while the card was charged): the money is
        # at Stripe and the deal is not paid. The event is kept as handled (Stripe retrying
        # would change nothing); the operator refunds it, and reconcile shows it until then.
        log.error(
            "stripe event %s (%s) for payment %s of deal %s not applied: %s",
            event_id,
            kind,
            payment_id,
            deal_id,
            exc.detail,
        )
        return Outcome.UNMATCHED
    return Outcome.APPLIED


async def _refund_event(
    session: AsyncSession, event_id: str, kind: str, obj: dict[str, Any]
) -> Outcome:
    if await repository.stripe_event_seen(session, event_id):
        return Outcome.DUPLICATE
    _record(session, event_id, kind, None)
    if kind == "refund.failed" or obj.get("status") == "failed":
        log.error(
            "stripe refund %s of PaymentIntent %s failed (%s): the buyer's money is not back",
            obj.get("id"),
            obj.get("payment_intent"),
            obj.get("failure_reason"),
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
