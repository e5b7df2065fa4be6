"""Firing lifecycle transitions with their side effects: the entry point for every status change.

``deals.service.apply`` changes the status and records it; this module looks the transition up
in the lifecycle table, applies it, then runs its effects in the same transaction: deadlines
(timers), refunds, payouts, denying pending offers. The API, the pages, the sandbox and the
timers all come through here, so a status never changes without its effects.
"""

import secrets
import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.auth.service import Principal
from dealbroker.core import clock
from dealbroker.core.business_days import business_days_after
from dealbroker.core.errors import BadRequest, Conflict, NotFound
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import actions, lifecycle, repository
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import DEADLINES, Actor, DeadlineDays, Effect, Transition, Trigger
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.payments import service as payments


class Consequences(Protocol):
    """What a transition sets off beyond the deals, in its transaction: the parties' messages,
    the deal's offers (denied, or their approval lapsed) and its parcels. Offers, parcels and
    notifications read the deals, so the deals reach them through this, which
    ``dealbroker.settlement.install`` registers at startup in every process."""

    async def moved(
        self,
        session: AsyncSession,
        deal: Deal,
        source: DealStatus,
        trigger: Trigger,
        deadline: datetime | None,
        settings: Settings,
    ) -> None: ...

    async def deny_pending_offers(self, session: AsyncSession, deal: Deal) -> None: ...

    async def lapse_approval(self, session: AsyncSession, deal: Deal) -> None: ...


_consequences: Consequences | None = None


def register(consequences: Consequences) -> None:
    """Connect the deals' transitions to offers and messages (``dealbroker.settlement``)."""
    global _consequences
    _consequences = consequences


def _then() -> Consequences:
    if _consequences is None:
        raise RuntimeError(
            "the deals are not connected to offers and messages: the process must call "
            "dealbroker.settlement.install() at startup"
        )
    return _consequences


async def fire(
    session: AsyncSession, deal: Deal, trigger: Trigger, actor: Actor, settings: Settings
) -> Deal:
    """Fire ``trigger`` on ``deal`` (row locked by the caller) as ``actor``; 409 if illegal."""
    transition = lifecycle.transition_for(DealStatus(deal.status), trigger, actor)
    if transition is None:
        raise deals.illegal(deal, trigger.value, actor)
    return await _run(session, deal, transition, actor, settings)


async def change_status(
    session: AsyncSession,
    principal: Principal,
    deal_id: uuid.UUID,
    target: DealStatus,
    settings: Settings,
) -> Deal:
    """An integration moves its deal to ``target``: a cancel before payment; in the sandbox any
    legal transition of the table, so integrators can test their flows."""
    deal = await deals.get(session, principal, deal_id, for_update=True)
    return await move_to(session, deal, target, actions.api_actor(settings), settings)


async def move_to(
    session: AsyncSession, deal: Deal, target: DealStatus, actor: Actor, settings: Settings
) -> Deal:
    """Move ``deal`` straight to ``target`` if a transition leads there for ``actor``."""
    transition = lifecycle.transition_to(DealStatus(deal.status), target, actor)
    if transition is None:
        raise deals.illegal(deal, target.value, actor)
    return await _run(session, deal, transition, actor, settings)


# The deadlines by which the seller hands the item over (to the carrier, or to the buyer).
HAND_OVER = frozenset({Effect.SHIPPING_DEADLINE, Effect.PICKUP_DEADLINE})

# Every deal ends: the statuses an approval can lapse in (the lifecycle table's rows).
APPROVAL_LAPSES_FROM = frozenset(
    s for t in lifecycle.TRANSITIONS if t.trigger is Trigger.APPROVAL_LAPSED for s in t.sources
)


async def _run(
    session: AsyncSession, deal: Deal, transition: Transition, actor: Actor, settings: Settings
) -> Deal:
    source = DealStatus(deal.status)
    if transition.trigger is Trigger.APPROVAL_LAPSED and deal.buyer_user_id is None:
        raise deals.illegal(deal, transition.target.value, actor)  # no approval to lapse
    if transition.trigger in lifecycle.RETURN_ENDS:
        _return_at_stage(deal, transition.trigger)
    await deals.apply(session, deal, transition, actor)
    deadline = _deadline(deal, transition, settings)
    if deadline is not None and (HAND_OVER & set(transition.effects)):
        # A reserved payment (Vipps) must not lapse before the hand-over: the deal expires,
        # and its reservation is cancelled, while the reservation still holds.
        latest = await payments.hand_over_by(session, deal)
        if latest is not None and latest < deadline:
            deadline = latest
    if Effect.DECISION_DATE in transition.effects:
        # Before the messages, which name it.
        deal.decide_by = decision_date(deal.updated_at, settings)
        deal.decision_reason, deal.dispute_return = None, None
    # The dispute's reason too, which the messages word.
    # A parcel we booked that the deadline finds undelivered is lost (a buyer's own report
    # that it has not come is not the carrier's word).
    if Effect.PARCEL_LOST in transition.effects or (
        transition.trigger is Trigger.TRANSIT_EXPIRED and carrier_booked(deal)
    ):
        deal.dispute_reason = lifecycle.LOST_REASON
    elif Effect.NOT_RECEIVED in transition.effects:
        deal.dispute_reason = lifecycle.NOT_RECEIVED_REASON
    await _then().moved(session, deal, source, transition.trigger, deadline, settings)
    # The sandbox may walk the table without money having moved; real flows always have it.
    lenient = actor is Actor.SANDBOX
    for effect in transition.effects:
        if effect in DEADLINES and deadline is not None:
            _schedule(session, deal, DEADLINES[effect][0], deadline, settings)
        elif effect is Effect.REFUND:
            await _run(session, deal, _only(deal, Trigger.REFUND), Actor.PROVIDER, settings)
        elif effect is Effect.REFUND_PAYMENT:
            less_shipping = lifecycle.refund_keeps_shipping(source)
            await _money(payments.refund(session, deal, less_shipping=less_shipping), lenient)
        elif effect is Effect.PAY_OUT:
            await _money(payments.pay_out(session, deal), lenient)
        elif effect is Effect.HANDOVER_CODE:
            deal.handover_code = f"{secrets.randbelow(10**6):06d}"
            deal.handover_attempts = 0
        elif effect is Effect.DENY_PENDING_OFFERS:
            await _then().deny_pending_offers(session, deal)
        elif effect is Effect.CLOSE_PAYMENT:
            await payments.close(session, deal)
        elif effect is Effect.LAPSE_APPROVAL:
            await _then().lapse_approval(session, deal)
    if DealStatus(deal.status) is DealStatus.SHIPPING_IN_PROGRESS:
        # Handed to the carrier: a reserved payment is captured now (a pickup's is captured
        # with its payout, when the deal completes: ``payments.pay_out``).
        await payments.capture(session, deal)
    if DealStatus(deal.status) not in APPROVAL_LAPSES_FROM:
        # Every deal ends: paid (or cancelled), the approved buyer's deadline is met or moot.
        await deals.close_deadlines(session, deal, Trigger.APPROVAL_LAPSED)
    return deal


def carrier_booked(deal: Deal) -> bool:
    """Whether the deal's parcel was booked by dealbroker at a carrier (``parcels``), not
    reported by the marketplace: the carrier's word, and its deadlines, follow it then."""
    return (deal.shipment or {}).get("source") == "carrier"


def deadline_days(settings: Settings, deal: Deal | None = None) -> DeadlineDays:
    """The deployment's deadlines in days, as the lifecycle table counts them. A parcel
    dealbroker booked has the carrier's time to arrive (``carrier_lost_after_days``), after
    which it is lost."""
    carrier = deal is not None and carrier_booked(deal)
    return DeadlineDays(
        transit=settings.carrier_lost_after_days if carrier else settings.transit_deadline_days,
        return_send=settings.return_send_days,
        return_confirm=settings.return_confirm_days,
    )


def decision_date(opened: datetime, settings: Settings) -> datetime:
    """When a dispute opened at ``opened`` is decided by: ``dispute_decision_business_days``
    business days on, counted in the deployment's time zone (public holidays not known)."""
    zone = ZoneInfo(settings.time_zone)
    return business_days_after(opened, settings.dispute_decision_business_days, zone)


def decision_overdue(deal: Deal) -> bool:
    """Whether the deal's dispute is past its decision date, undecided (``disputes list``)."""
    return (
        DealStatus(deal.status) in lifecycle.DISPUTES
        and deal.decide_by is not None
        and deal.decide_by <= clock.now()
    )


def _only(deal: Deal, trigger: Trigger) -> Transition:
    transition = lifecycle.transition_for(DealStatus(deal.status), trigger, Actor.PROVIDER)
    assert transition is not None, f"the lifecycle table lacks {trigger} from {deal.status}"
    return transition


async def _money(step: object, lenient: bool) -> None:
    try:
        await step  # type: ignore[misc]
    except Conflict:
        if not lenient:
            raise


def _deadline(deal: Deal, transition: Transition, settings: Settings) -> datetime | None:
    """When the deadline ``transition`` sets falls due (a transition sets at most one): the
    messages name the same moment the timer fires at."""
    for effect in transition.effects:
        if effect in DEADLINES:
            seconds = lifecycle.deadline_seconds(effect, deadline_days(settings, deal))
            return clock.now() + timedelta(seconds=seconds)
    return None


async def not_received_opens(
    session: AsyncSession, deal: Deal, settings: Settings
) -> datetime | None:
    """From when the buyer may report a parcel in transit as not received: the usual delivery
    time (``not_received_after_days``) after the hand-over. Read off the pending transit
    deadline, so the sandbox clock, which brings that deadline closer, brings this moment with
    it. None when the deal has no pending transit deadline."""
    pending = [
        t
        for t in await repository.timers_of(session, deal.id)
        if t.fired_at is None and t.trigger == Trigger.TRANSIT_EXPIRED.value
    ]
    if not pending:
        return None
    transit = deadline_days(settings, deal).transit
    handed_over = max(t.due_at for t in pending) - timedelta(days=transit)
    return handed_over + timedelta(days=settings.not_received_after_days)


def _schedule(
    session: AsyncSession, deal: Deal, trigger: Trigger, due: datetime, settings: Settings
) -> None:
    deals.set_deadline(session, deal, trigger, due, settings)


async def advance_clock(session: AsyncSession, integration_id: uuid.UUID, seconds: int) -> int:
    """Sandbox: move this integration's clock ``seconds`` ahead, bringing every pending deadline
    of its deals that much closer (the timers, and an open dispute's decision date). Returns
    how many timers moved."""
    by = timedelta(seconds=seconds)
    # The timers before the deals, as the deadline job locks them (see ``advance_deal_clock``).
    timers = await repository.pending_timers(session, integration_id)
    for timer in timers:
        _bring_closer(timer, by)
    for deal in await repository.deciding_for_update(session, integration_id):
        _bring_decision_closer(deal, by)
    await session.flush()
    return len(timers)


async def advance_deal_clock(
    session: AsyncSession, integration_id: uuid.UUID, deal_id: uuid.UUID, seconds: int
) -> tuple[Deal, int]:
    """Sandbox: move one deal's own test clock ``seconds`` ahead, leaving the integration's
    other deals alone: the deal's pending deadlines (its timers, an open dispute's decision
    date) come that much closer, and its ``clock_offset_seconds`` grows by ``seconds``. Another
    integration's deal is 404, as an unknown one. Returns the deal (locked) and how many timers
    moved.

    Two advances of one deal add up: the deal's pending timers are locked (waited for, in the
    order the deadline job takes them: timer, then deal) before the deal, and each move is
    made on the values the other one committed."""
    await deals.get_for(session, integration_id, deal_id)  # 404 before any lock
    by = timedelta(seconds=seconds)
    timers = await repository.pending_timers_of(session, deal_id)
    deal = await deals.get_for(session, integration_id, deal_id, for_update=True)
    for timer in timers:
        _bring_closer(timer, by)
    if DealStatus(deal.status) in lifecycle.DISPUTES:
        _bring_decision_closer(deal, by)
    await session.flush()
    await repository.add_clock_offset(session, deal, seconds)
    return deal, len(timers)


def _bring_closer(timer: DealTimer, by: timedelta) -> None:
    """A deadline and its reminder move together: the reminder stays the lead time before."""
    timer.due_at -= by
    if timer.remind_at is not None:
        timer.remind_at -= by


def _bring_decision_closer(deal: Deal, by: timedelta) -> None:
    """An open dispute's decision date is a deadline of the deal too (the operator's): the
    pages that name it and ``disputes list``'s overdue mark see the same time as the timers."""
    if deal.decide_by is not None:
        deal.decide_by -= by


class DisputeOutcome(StrEnum):
    """What the operator decides a dispute with."""

    RELEASE = "release"  # the seller is paid (Completed)
    REFUND = "refund"  # the buyer is refunded in full (Refunded)
    RETURN_THEN_REFUND = "return_then_refund"  # the item goes back, then the buyer is refunded


# Bounds of what the operator types (the CLI today, the back office's form next).
MAX_REASON = 2000
MAX_RETURN_ADDRESS = 500


async def resolve_dispute(
    session: AsyncSession,
    deal_id: uuid.UUID,
    outcome: DisputeOutcome,
    settings: Settings,
    *,
    reason: str | None = None,
    return_address: str | None = None,
) -> Deal:
    """The operator decides a dispute: release the money to the seller, refund the buyer, or
    have the buyer send the item back to ``return_address`` and refund them then
    (``RETURN_THEN_REFUND``, which needs the address). ``reason``, if given, is sent to both
    parties with the decision. A deal with a return under way may still be released or
    refunded (the operator's word is the last); its return deadlines then close unfired."""
    # Money moves on this word: anything but an outcome (the bool ``release`` of old) is refused,
    # never read as a refund.
    outcome = DisputeOutcome(outcome)
    reason = (reason or "").strip() or None
    if reason is not None and len(reason) > MAX_REASON:
        raise BadRequest(f"The reason is longer than {MAX_REASON} characters.")
    deal = await operator_view(session, deal_id, for_update=True)
    if outcome is DisputeOutcome.RETURN_THEN_REFUND:
        return await _request_return(session, deal, return_address, reason, settings)
    trigger = (
        Trigger.DISPUTE_RELEASED if outcome is DisputeOutcome.RELEASE else Trigger.DISPUTE_REFUNDED
    )
    if lifecycle.transition_for(DealStatus(deal.status), trigger, Actor.OPERATOR) is None:
        raise deals.illegal(deal, trigger.value, Actor.OPERATOR)
    deal.decision_reason = reason  # before the messages, which carry it
    return await fire(session, deal, trigger, Actor.OPERATOR, settings)


async def _request_return(
    session: AsyncSession,
    deal: Deal,
    address: str | None,
    reason: str | None,
    settings: Settings,
) -> Deal:
    address = (address or "").strip()
    if not address:
        raise BadRequest("A return then refund needs the seller's return address.")
    if len(address) > MAX_RETURN_ADDRESS:
        raise BadRequest(f"The return address is longer than {MAX_RETURN_ADDRESS} characters.")
    if DealStatus(deal.status) not in lifecycle.DISPUTES:
        raise deals.illegal(deal, Trigger.RETURN_REQUESTED.value, Actor.OPERATOR)
    if deal.dispute_return is not None:
        raise Conflict("A return is already under way for this deal.")
    deal.dispute_return = {"address": address, "carrier": None, "tracking": None, "sentAt": None}
    deal.decision_reason = reason
    return await fire(session, deal, Trigger.RETURN_REQUESTED, Actor.OPERATOR, settings)


async def return_sent(
    session: AsyncSession, deal: Deal, carrier: str, tracking: str, settings: Settings
) -> Deal:
    """The buyer has sent the item back (row locked by the caller): its carrier and tracking
    number are kept and shown to the seller, whose deadline to confirm its receipt starts;
    the buyer's deadline to send it is met."""
    returning = deal.dispute_return
    if DealStatus(deal.status) not in lifecycle.DISPUTES:
        raise deals.illegal(deal, Trigger.RETURN_SENT.value, Actor.BUYER)
    if returning is None or returning.get("sentAt"):
        raise Conflict(
            _(
                "There is no return waiting to be sent: the item was sent back already, or we "
                "did not ask for it."
            )
        )
    sent_at = clock.now()
    deal.dispute_return = {
        **returning,
        "carrier": carrier,
        "tracking": tracking,
        "sentAt": sent_at.isoformat(),
    }
    await fire(session, deal, Trigger.RETURN_SENT, Actor.BUYER, settings)
    await deals.close_deadlines(session, deal, Trigger.RETURN_NOT_SENT)
    return deal


def _return_at_stage(deal: Deal, trigger: Trigger) -> None:
    """The ends of a return need it at their stage: the seller's confirmation and its
    deadline an item sent back, the buyer's send deadline an item not sent."""
    returning = deal.dispute_return
    sent = returning is not None and bool(returning.get("sentAt"))
    if trigger is Trigger.RETURN_NOT_SENT and returning is not None and not sent:
        return
    if trigger is not Trigger.RETURN_NOT_SENT and sent:
        return
    raise Conflict(
        f"A deal in status {deal.status} has no return at the stage {trigger.value} needs.",
        page_detail=_("The buyer has not sent the item back yet: confirm it once it has come."),
    )


async def operator_view(
    session: AsyncSession, deal_id: uuid.UUID, *, for_update: bool = False
) -> Deal:
    """Any integration's deal, for the operator (who answers for every integration)."""
    deal = await (
        repository.by_id_for_update(session, deal_id)
        if for_update
        else repository.by_id(session, deal_id)
    )
    if deal is None:
        raise NotFound(f"No deal {deal_id}.")
    return deal


async def in_dispute(session: AsyncSession) -> list[Deal]:
    """Every integration's deals in dispute, for the operator; oldest change first."""
    return await repository.in_dispute(session)


async def dispute_opened_by(session: AsyncSession, deal: Deal) -> str | None:
    """Who opened the deal's dispute, for the operator: ``seller`` (a pickup problem the seller
    reported), ``carrier`` (a parcel dealbroker booked that its carrier lost, by its word or
    by the transit deadline) or ``buyer`` (a denial, or a parcel not received); None for a
    deal never in dispute."""
    for change in reversed(await repository.history(session, deal.id)):
        # The steps of a return stay in the dispute's status: the change that opened it is
        # the one that came into it.
        if change.to_status in lifecycle.DISPUTES and change.from_status != change.to_status:
            if change.trigger == Trigger.SELLER_REPORTED_PROBLEM.value:
                return "seller"
            if change.trigger == Trigger.CARRIER_LOST.value or (
                change.trigger == Trigger.TRANSIT_EXPIRED.value
                and deal.dispute_reason == lifecycle.LOST_REASON
            ):
                return "carrier"
            return "buyer"
    return None
