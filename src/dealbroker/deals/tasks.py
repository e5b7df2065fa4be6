"""The deadline jobs: fire deal timers (7 days to hand over, transit, 24 hours to review) once
due, and remind the party who must act a set time before (``ReminderJob``).

A timer is a row with a due time, written in the transaction of the transition that set it
(``deals.flows``). The worker's job runner runs ``DeadlineJob`` in every process kind, so a
deadline fires whether the service runs as ``serve`` alone (SQLite) or as API processes beside
``dealbroker worker`` processes (PostgreSQL), exactly once even with several workers.
"""

import logging

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core import clock
from dealbroker.core.errors import DomainError
from dealbroker.core.jobs import ShortJob
from dealbroker.core.metrics import reminders, timer_lag, timers_fired
from dealbroker.core.settings import Settings
from dealbroker.deals import flows, lifecycle, parties, repository
from dealbroker.deals.lifecycle import Actor, DealStatus, Trigger
from dealbroker.notifications import service as notifications

log = logging.getLogger("dealbroker.timers")
BATCH = 100


async def fire_due_timers(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings, limit: int = 100
) -> int:
    """Fire up to ``limit`` due timers, each in its own transaction, exactly once: the timer is
    marked fired in the same transaction as its transition. A timer whose deal has moved on is
    closed as ``skipped``; one whose transition fails is closed as ``failed`` and logged."""
    fired = 0
    for _ in range(limit):
        handled = await _fire_one(sessionmaker, settings)
        if handled is None:
            return fired
        outcome, lag = handled  # counted once committed
        timers_fired.labels(outcome).inc()
        timer_lag.observe(lag)
        fired += 1
    return fired


async def _fire_one(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings
) -> tuple[str, float] | None:
    """Fire the oldest due timer; returns its outcome and how late it was (seconds), or
    ``None`` when no timer is due."""
    async with sessionmaker() as session, session.begin():
        now = clock.now()
        timer = await repository.claim_due_timer(session, now)
        if timer is None:
            return None
        timer_id = timer.id
        deal = await repository.by_id_for_update(session, timer.deal_id)
        trigger = Trigger(timer.trigger)
        legal = deal is not None and lifecycle.transition_for(
            DealStatus(deal.status), trigger, Actor.TIMER
        )
        try:
            async with session.begin_nested():
                if legal and deal is not None:
                    await flows.fire(session, deal, trigger, Actor.TIMER, settings)
            outcome = "fired" if legal else "skipped"
        except DomainError as exc:
            log.error(
                "timer %s (%s) failed: %s",
                timer_id,
                trigger.value,
                exc.detail,
                extra={"deal_id": str(timer.deal_id)},
            )
            outcome = "failed"
        timer.fired_at, timer.outcome = clock.now(), outcome
        lag = max((now - timer.due_at).total_seconds(), 0.0)
    return outcome, lag


class DeadlineJob(ShortJob):
    """Fires the due deal timers, a bounded batch per run."""

    name = "deadlines"

    async def run_once(self) -> int:
        fired = await fire_due_timers(self.sessionmaker, self.settings, BATCH)
        self.more = fired == BATCH  # fewer: none was left due
        return fired


class EidTimeoutJob(ShortJob):
    """Fails the eID flows whose party never came back from the issuer in time
    (``parties.fail_abandoned_eid``), every ``every`` seconds: one indexed query when there is
    none."""

    name = "eid-timeouts"
    every = 10.0

    async def run_once(self) -> int:
        async with self.sessionmaker() as session, session.begin():
            failed = await parties.fail_abandoned_eid(session, self.settings, BATCH)
        self.more = failed == BATCH  # fewer: none was left past its time
        return failed


async def send_due_reminders(
    sessionmaker: async_sessionmaker[AsyncSession], limit: int = 100
) -> int:
    """Handle up to ``limit`` due reminders, each in its own transaction, exactly once: the
    messages are written to the outbox in the transaction that marks the timer reminded, so a
    worker that dies half-way leaves the reminder to the next one, and two never both send it.
    A deadline met, cancelled (its transition no longer legal) or already due is reminded of
    no more (``skipped``)."""
    handled = 0
    for _ in range(limit):
        outcome = await _remind_one(sessionmaker)
        if outcome is None:
            return handled
        reminders.labels(outcome).inc()  # counted once committed
        handled += 1
    return handled


async def _remind_one(sessionmaker: async_sessionmaker[AsyncSession]) -> str | None:
    async with sessionmaker() as session, session.begin():
        now = clock.now()
        timer = await repository.claim_due_reminder(session, now)
        if timer is None:
            return None
        # Locked as the deadline job and every transition lock it: the deal cannot move on
        # between this check and the reminder's commit.
        deal = await repository.by_id_for_update(session, timer.deal_id)
        trigger = Trigger(timer.trigger)
        still_open = (
            deal is not None
            and timer.fired_at is None
            and timer.due_at > now
            and lifecycle.transition_for(DealStatus(deal.status), trigger, Actor.TIMER) is not None
        )
        outcome = "skipped"
        if trigger not in notifications.REMINDERS:
            # A test fails first (every deadline has its row); closed, so that it cannot hold
            # up the reminders due after it.
            log.error(
                "timer %s (%s): no reminder for this deadline in notifications.REMINDERS",
                timer.id,
                trigger.value,
                extra={"deal_id": str(timer.deal_id)},
            )
            outcome = "failed"
        elif still_open and deal is not None:
            written = await notifications.remind(session, deal, trigger, timer.due_at)
            outcome = "sent" if written else "skipped"
        timer.reminded_at = now
    return outcome


class ReminderJob(ShortJob):
    """Reminds the parties of deadlines coming up, a bounded batch per run."""

    name = "reminders"

    async def run_once(self) -> int:
        handled = await send_due_reminders(self.sessionmaker, BATCH)
        self.more = handled == BATCH  # fewer: none was left due
        return handled
