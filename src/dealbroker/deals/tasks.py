"""The deadline job: fire deal timers (7 days to hand over, transit, 24 hours to review) once
due. The party who must act is reminded a set time before by ``notifications.tasks``
(``ReminderJob``).

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
from dealbroker.core.metrics import timer_lag, timers_fired
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import flows, lifecycle, repository
from dealbroker.deals.lifecycle import Actor, Trigger

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
