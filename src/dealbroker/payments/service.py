"""Payments: the payment status of a deal, with the money each ``payment.status`` reports.

The amount is the agreed price; the fee is the deployment's percent plus fixed part; the seller
is paid out amount minus fee. A payment reaching ``Paid`` on a ``Signed`` deal moves the deal to
``Shipping_Pending`` or ``Pickup_Pending`` by the shipping type of the approved offer.
"""

from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import money
from dealbroker.core.errors import Conflict
from dealbroker.core.settings import Settings
from dealbroker.deals import lifecycle
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import Actor, DealStatus, Trigger
from dealbroker.deals.models import Deal
from dealbroker.events import envelope
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind


class PaymentStatus(StrEnum):
    CREATED = "Created"
    PROCESSING = "Processing"
    PAYMENT_FAILED = "PaymentFailed"
    PAYMENT_CANCELLED = "PaymentCancelled"
    PAID = "Paid"
    REFUNDED = "Refunded"
    PENDING_PAYOUT = "PendingPayOut"
    PAID_OUT = "PaidOut"
    PAYOUT_FAILED = "PayoutFailed"
    PAYOUT_CANCELLED = "PayoutCancelled"


def amounts(deal: Deal, settings: Settings) -> tuple[int, int]:
    """``(amount, fee)`` in minor units for ``deal``; the payout is their difference."""
    amount = deal.price_minor or 0
    return amount, money.fee_for(amount, settings.fee_percent, settings.fee_fixed)


async def set_status(
    session: AsyncSession, deal: Deal, status: PaymentStatus, settings: Settings, actor: Actor
) -> None:
    """Set the deal's payment status (row locked by the caller) and emit ``payment.status``.
    A payment needs a buyer and a price: an approved offer."""
    if deal.buyer_user_id is None or deal.price_minor is None:
        raise Conflict(
            "A payment needs an approved offer (a buyer and a price) on the deal.",
            extra={"currentStatus": deal.status},
        )
    deal.payment_status = status.value
    deal.updated_at = deals.now()
    amount, fee = amounts(deal, settings)
    data = envelope.payment_status(
        deal_id=deal.id,
        seller_user_id=deal.seller_user_id,
        buyer_user_id=deal.buyer_user_id,
        status=status.value,
        amount_minor=amount,
        fee_minor=fee,
        currency=deal.currency,
    )
    await events.emit(session, deal.integration_id, EventKind.PAYMENT_STATUS, data, deal_id=deal.id)
    if status is PaymentStatus.PAID and deal.status == DealStatus.SIGNED:
        trigger = (
            Trigger.PAID_FOR_PICKUP if deal.shipping_type == "Pickup" else Trigger.PAID_FOR_SHIPPING
        )
        transition = lifecycle.transition_for(DealStatus.SIGNED, trigger, actor)
        if transition is not None:
            await deals.apply(session, deal, transition, actor)
            return
    await session.flush()
