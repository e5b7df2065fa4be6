"""Firing lifecycle transitions with their side effects: the entry point for every status change.

``deals.service.apply`` changes the status and records it; this module looks the transition up
in the lifecycle table, applies it, then runs its effects in the same transaction: deadlines
(timers), refunds, payouts, denying pending offers. The API, the pages, the sandbox and the
timers all come through here, so a status never changes without its effects.
"""

import secrets
import uuid
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.auth.service import Principal
from dealbroker.core import clock
from dealbroker.core.errors import Conflict, NotFound
from dealbroker.core.settings import Settings
from dealbroker.deals import actions, lifecycle, repository
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import DEADLINES, Actor, DealStatus, Effect, Transition, Trigger
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.notifications import service as notifications
from dealbroker.offers import service as offers
from dealbroker.payments import service as payments


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
    await deals.apply(session, deal, transition, actor)
    deadline = _deadline(transition, settings)
    await notifications.deal_moved(session, deal, source, transition.trigger, deadline)
    # The sandbox may walk the table without money having moved; real flows always have it.
    lenient = actor is Actor.SANDBOX
    for effect in transition.effects:
        if effect in DEADLINES and deadline is not None:
            _schedule(session, deal, DEADLINES[effect][0], deadline, settings)
        elif effect is Effect.REFUND:
            await _run(session, deal, _only(deal, Trigger.REFUND), Actor.PROVIDER, settings)
        elif effect is Effect.REFUND_PAYMENT:
            await _money(payments.refund(session, deal), lenient)
        elif effect is Effect.PAY_OUT:
            await _money(payments.pay_out(session, deal), lenient)
        elif effect is Effect.HANDOVER_CODE:
            deal.handover_code = f"{secrets.randbelow(10**6):06d}"
            deal.handover_attempts = 0
        elif effect is Effect.DENY_PENDING_OFFERS:
            await offers.deny_pending(session, deal)
        elif effect is Effect.CLOSE_PAYMENT:
            await payments.close(session, deal)
        elif effect is Effect.NOT_RECEIVED:
            deal.dispute_reason = lifecycle.NOT_RECEIVED_REASON
        elif effect is Effect.LAPSE_APPROVAL:
            await offers.lapse(session, deal)
    if DealStatus(deal.status) not in APPROVAL_LAPSES_FROM:
        # Every deal ends: paid (or cancelled), the approved buyer's deadline is met or moot.
        await deals.close_deadlines(session, deal, Trigger.APPROVAL_LAPSED)
    return deal


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


def _deadline(transition: Transition, settings: Settings) -> datetime | None:
    """When the deadline ``transition`` sets falls due (a transition sets at most one): the
    messages name the same moment the timer fires at."""
    for effect in transition.effects:
        if effect in DEADLINES:
            seconds = lifecycle.deadline_seconds(effect, settings.transit_deadline_days)
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
    handed_over = max(t.due_at for t in pending) - timedelta(days=settings.transit_deadline_days)
    return handed_over + timedelta(days=settings.not_received_after_days)


def _schedule(
    session: AsyncSession, deal: Deal, trigger: Trigger, due: datetime, settings: Settings
) -> None:
    deals.set_deadline(session, deal, trigger, due, settings)


async def advance_clock(session: AsyncSession, integration_id: uuid.UUID, seconds: int) -> int:
    """Sandbox: move this integration's clock ``seconds`` ahead, bringing every pending timer of
    its deals that much closer. Returns how many timers moved."""
    timers = await repository.pending_timers(session, integration_id)
    for timer in timers:
        _bring_closer(timer, timedelta(seconds=seconds))
    await session.flush()
    return len(timers)


async def advance_deal_clock(session: AsyncSession, deal: Deal, seconds: int) -> int:
    """Sandbox: bring the pending deadlines of one deal ``seconds`` closer, leaving the
    integration's other deals alone (a scenario lets time pass for its own deal only)."""
    timers = [t for t in await repository.timers_of(session, deal.id) if t.fired_at is None]
    for timer in timers:
        _bring_closer(timer, timedelta(seconds=seconds))
    await session.flush()
    return len(timers)


def _bring_closer(timer: DealTimer, by: timedelta) -> None:
    """A deadline and its reminder move together: the reminder stays the lead time before."""
    timer.due_at -= by
    if timer.remind_at is not None:
        timer.remind_at -= by


async def resolve_dispute(
    session: AsyncSession, deal_id: uuid.UUID, release: bool, settings: Settings
) -> Deal:
    """The operator settles a dispute: release the money to the seller, or refund the buyer."""
    deal = await operator_view(session, deal_id, for_update=True)
    trigger = Trigger.DISPUTE_RELEASED if release else Trigger.DISPUTE_REFUNDED
    return await fire(session, deal, trigger, Actor.OPERATOR, settings)


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
    reported) or ``buyer`` (a denial); None for a deal never in dispute."""
    for change in reversed(await repository.history(session, deal.id)):
        if change.to_status in lifecycle.DISPUTES:
            return "seller" if change.trigger == Trigger.SELLER_REPORTED_PROBLEM.value else "buyer"
    return None
