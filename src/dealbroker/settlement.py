"""Settlement: the one place where a payment's outcome reaches its deal.

Payments knows no deal rules (``payments.escrow``); the deals call payments (a deal paid for
is paid out, a cancelled one closes its payment). The way back, from the provider to the deal,
comes through here alone, whoever brings the answer: Stripe's webhook
(``payments.stripe_events``), the checkout pages (``web.checkout``, ``web.stripe_checkout``),
the provider-call job and the bank's status report (a payout made or refused, money refunded
late), the sandbox and the operator's commands. ``settle_payment`` maps the provider's answer to
the deal's transition; the rest tells the parties (a payout made or refused, money given back,
a payout account to confirm or changed).

The deals' transitions reach the offers and the parties' messages through here too
(``Consequences``): both read the deals, so the deals cannot call them; and so do the offers'
messages (``OfferMessages``), which read the offers; and the messages reach the conversations'
questions waiting for an answer (``Questions``), which read the deals and the offers.

``install`` registers these handlers with payments and the deals' flows; every process that
runs them calls it at startup (``create_app``, the worker, the command line).
"""

import uuid
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.conversations import service as conversations
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus, PaymentStatus
from dealbroker.deals import flows
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.notifications import service as notifications
from dealbroker.offers import service as offers
from dealbroker.offers.models import Offer
from dealbroker.parcels import service as parcels
from dealbroker.payments import escrow
from dealbroker.payments import service as payments
from dealbroker.payments.escrow import EscrowDeal, Outcome


async def settle_payment(
    session: AsyncSession, deal: Deal, outcome: str | Outcome, settings: Settings
) -> None:
    """The provider's answer for the deal's open payment: ``succeeded``, ``failed`` or
    ``cancelled``. Success moves a ``Signed`` deal to ``Shipping_Pending`` or ``Pickup_Pending``
    by the accepted shipping type; failure leaves it ``Signed`` so the buyer may pay again."""
    final = await payments.settle_open(session, deal, Outcome(outcome))
    if final is PaymentStatus.PAID:
        trigger = (
            Trigger.PAID_FOR_PICKUP if deal.shipping_type == "Pickup" else Trigger.PAID_FOR_SHIPPING
        )
        await flows.fire(session, deal, trigger, Actor.PROVIDER, settings)


def _deal(deal: EscrowDeal) -> Deal:
    """The deal payments hands back: always one it was given by ``lock`` or a deal flow."""
    if not isinstance(deal, Deal):
        raise TypeError(f"settlement acts on deals, not on {type(deal).__name__}")
    return deal


class Settlement:
    """The ``payments.escrow.DealSide`` of this application."""

    async def lock(self, session: AsyncSession, deal_id: uuid.UUID) -> Deal | None:
        return await deals.by_id_for_update(session, deal_id)

    async def settle(
        self, session: AsyncSession, deal: EscrowDeal, outcome: Outcome, settings: Settings
    ) -> None:
        await settle_payment(session, _deal(deal), outcome, settings)

    async def paid_out(self, session: AsyncSession, deal: EscrowDeal, amount_minor: int) -> None:
        await notifications.payout_sent(session, _deal(deal), amount_minor)

    async def payout_failed(
        self, session: AsyncSession, deal: EscrowDeal, amount_minor: int
    ) -> None:
        await notifications.payout_failed(session, _deal(deal), amount_minor)

    async def refunded_late(
        self, session: AsyncSession, deal: EscrowDeal, amount_minor: int
    ) -> None:
        await notifications.late_payment_refunded(session, _deal(deal), amount_minor)

    async def capture_failed(
        self, session: AsyncSession, deal: EscrowDeal, amount_minor: int
    ) -> None:
        await notifications.reservation_lapsed(session, _deal(deal), amount_minor)

    async def confirm_account_change(
        self,
        session: AsyncSession,
        deal: EscrowDeal,
        last4: str,
        token: str,
        lifetime: timedelta,
    ) -> None:
        await notifications.confirm_payout_account(session, _deal(deal), last4, token, lifetime)

    async def account_changed(self, session: AsyncSession, deal: EscrowDeal, last4: str) -> None:
        await notifications.payout_account_changed(session, _deal(deal), last4)


class Consequences:
    """The ``deals.flows.Consequences`` of this application: a transition's messages, its
    deal's offers denied or lapsed, its parcels cancelled or a return booked."""

    async def moved(
        self,
        session: AsyncSession,
        deal: Deal,
        source: DealStatus,
        trigger: Trigger,
        deadline: datetime | None,
        settings: Settings,
    ) -> None:
        await notifications.deal_moved(session, deal, source, trigger, deadline)
        await parcels.deal_moved(session, deal, trigger, settings)

    async def deny_pending_offers(self, session: AsyncSession, deal: Deal) -> None:
        await offers.deny_pending(session, deal)

    async def lapse_approval(self, session: AsyncSession, deal: Deal) -> None:
        await offers.lapse(session, deal)


class OfferMessages:
    """The ``offers.service.OfferMessages`` of this application: the parties' messages."""

    async def offer_received(
        self, session: AsyncSession, deal: Deal, price_minor: int, buyer: str
    ) -> None:
        await notifications.offer_received(session, deal, price_minor, buyer)

    async def offer_approved(
        self, session: AsyncSession, deal: Deal, offer: Offer, due: datetime
    ) -> None:
        await notifications.offer_approved(session, deal, offer, due)

    async def offer_declined(self, session: AsyncSession, deal: Deal, offer: Offer) -> None:
        await notifications.offer_declined(session, deal, offer)

    async def offer_withdrawn(
        self, session: AsyncSession, deal: Deal, offer: Offer, still_open: bool
    ) -> None:
        await notifications.offer_withdrawn(session, deal, offer, still_open)

    async def approval_lapsed(
        self, session: AsyncSession, deal: Deal, lapsed: Offer | None, others: list[Offer]
    ) -> None:
        await notifications.approval_lapsed(session, deal, lapsed, others)


class Questions:
    """The ``notifications.service.Questions`` of this application: the conversations'
    questions waiting for an answer, which reminders and offers' messages mention."""

    async def waiting(self, session: AsyncSession, deal: Deal, party: notifications.Party) -> int:
        return await conversations.waiting(session, deal, conversations.Party(party.value))


def install() -> None:
    """Connect payments to the deals, the deals to offers and messages, the offers to
    messages, and the messages to the conversations, through this module (idempotent)."""
    escrow.register(Settlement())
    flows.register(Consequences())
    offers.register(OfferMessages())
    notifications.register(Questions())
