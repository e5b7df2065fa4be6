"""The outbox job: sends the messages the transactions wrote, by e-mail, after they committed.

A message is a row written in the transaction of the change it reports (``notifications.
service``). This job leases due rows (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so several
workers share them), sends each outside any transaction, and records the outcome: sent; failed
for now, tried again after a growing pause; or given up after ``MAX_ATTEMPTS``, when the server
refuses it for good, or when it could not be sent within a day (news that late would mislead
more than help), each logged. At least once: a worker that dies after sending but before
recording sends the message again when its lease ends (same Message-ID).

With no SMTP server configured (the default) the job sends nothing and the messages stay in
the outbox, where the sandbox mailbox shows them.

The reminders job (``ReminderJob``) writes the messages that remind the party who must act a
set time before a deal's deadline (``notifications.service.remind``), from the deals' timers.
"""

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core import clock, wakeup
from dealbroker.core.jobs import ShortJob
from dealbroker.core.metrics import emails, reminders
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle
from dealbroker.deals import repository as deal_rows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.tasks import BATCH as DEADLINE_BATCH
from dealbroker.notifications import repository, service
from dealbroker.notifications.mailer import Mail, Mailer, SmtpMailer, Undeliverable

log = logging.getLogger("dealbroker.mail")
timers_log = logging.getLogger("dealbroker.timers")  # the reminders, as the deadline job logs

BATCH = 10  # sent concurrently, so a batch takes at most one send timeout
LEASE = timedelta(minutes=2)  # longer than a batch may take (mailer.SEND_TIMEOUT)
# Pauses after the 1st, 2nd, ... failed attempt: about 16 hours of trying in all.
RETRY_AFTER = tuple(timedelta(seconds=s) for s in (5, 30, 120, 600, 1800, 3600, 7200, 14400, 28800))
MAX_ATTEMPTS = len(RETRY_AFTER) + 1
TOO_OLD = timedelta(hours=24)  # longer than all of RETRY_AFTER


@dataclass(frozen=True)
class _Claimed:
    mail: Mail
    attempt: int  # this attempt's number, from 1


@dataclass(frozen=True)
class _Outcome:
    claimed: _Claimed
    error: str | None = None
    final: bool = False  # no further attempt


class OutboxSendJob(ShortJob):
    name = wakeup.MAIL

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        settings: Settings,
        mailer: Mailer | None = None,
    ) -> None:
        super().__init__(sessionmaker, settings)
        self.mailer = mailer or (SmtpMailer(settings) if settings.sends_mail else None)
        self.sent = 0

    async def run_once(self) -> int:
        if self.mailer is None:
            return 0
        claimed = await self._claim()
        outcomes = await asyncio.gather(*(self._send(c) for c in claimed))
        await self._record(outcomes)
        self.more = len(claimed) == BATCH
        return len(claimed)

    async def _claim(self) -> list[_Claimed]:
        now = clock.now()
        async with self.sessionmaker() as session, session.begin():
            rows = await repository.claim_due(session, now, now + LEASE, BATCH)
            return [
                _Claimed(
                    Mail(row.id, row.to_email, row.subject, row.body, row.created_at),
                    row.attempts + 1,
                )
                for row in rows
            ]

    async def _send(self, claimed: _Claimed) -> _Outcome:
        assert self.mailer is not None
        if clock.now() - claimed.mail.created_at > TOO_OLD:
            hours = TOO_OLD // timedelta(hours=1)
            return _Outcome(claimed, f"not sent within {hours} hours; given up", final=True)
        try:
            await self.mailer.send(claimed.mail)
        except Undeliverable as exc:
            return _Outcome(claimed, f"refused: {exc}"[:500], final=True)
        except Exception as exc:  # no connection, a timeout, a "try later": try again
            return _Outcome(claimed, repr(exc)[:500], final=claimed.attempt >= MAX_ATTEMPTS)
        return _Outcome(claimed)

    async def _record(self, outcomes: list[_Outcome]) -> None:
        if not outcomes:
            return
        now = clock.now()
        async with self.sessionmaker() as session, session.begin():
            for outcome in outcomes:
                mail, attempt = outcome.claimed.mail, outcome.claimed.attempt
                if outcome.error is None:
                    self.sent += 1
                    emails.labels("sent").inc()
                    await repository.finish(
                        session, mail.id, sent_at=now, error=None, next_attempt_at=None
                    )
                elif outcome.final:
                    emails.labels("failed").inc()
                    log.error(
                        "message %s not sent, given up after %d attempt(s): %s",
                        mail.id,
                        attempt,
                        outcome.error,
                    )
                    await repository.finish(
                        session, mail.id, sent_at=None, error=outcome.error, next_attempt_at=None
                    )
                else:
                    emails.labels("retrying").inc()
                    log.warning(
                        "message %s not sent (attempt %d); will retry: %s",
                        mail.id,
                        attempt,
                        outcome.error,
                    )
                    retry = now + RETRY_AFTER[min(attempt, len(RETRY_AFTER)) - 1]
                    await repository.finish(
                        session, mail.id, sent_at=None, error=outcome.error, next_attempt_at=retry
                    )


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
        timer = await deal_rows.claim_due_reminder(session, now)
        if timer is None:
            return None
        # Locked as the deadline job and every transition lock it: the deal cannot move on
        # between this check and the reminder's commit.
        deal = await deal_rows.by_id_for_update(session, timer.deal_id)
        trigger = Trigger(timer.trigger)
        still_open = (
            deal is not None
            and timer.fired_at is None
            and timer.due_at > now
            and lifecycle.transition_for(DealStatus(deal.status), trigger, Actor.TIMER) is not None
        )
        outcome = "skipped"
        if trigger not in service.REMINDERS:
            # A test fails first (every deadline has its row); closed, so that it cannot hold
            # up the reminders due after it.
            timers_log.error(
                "timer %s (%s): no reminder for this deadline in notifications.REMINDERS",
                timer.id,
                trigger.value,
                extra={"deal_id": str(timer.deal_id)},
            )
            outcome = "failed"
        elif still_open and deal is not None:
            written = await service.remind(session, deal, trigger, timer.due_at)
            outcome = "sent" if written else "skipped"
        timer.reminded_at = now
    return outcome


class ReminderJob(ShortJob):
    """Reminds the parties of deadlines coming up, a bounded batch per run."""

    name = "reminders"

    async def run_once(self) -> int:
        handled = await send_due_reminders(self.sessionmaker, DEADLINE_BATCH)
        self.more = handled == DEADLINE_BATCH  # fewer: none was left due
        return handled
