"""Retention: the worker's job that deletes what has outlived its keep time.

What goes, and when (each purge is a repository function that deletes one batch):

* events, with their deliveries and delivery attempts, ``event_retention_days`` after they
  were emitted, never while a delivery of theirs is still pending (settings refuse a keep time
  shorter than the webhook retry window);
* outbox messages ``outbox_retention_days`` after they were sent; messages not sent (still
  to send, given up, or kept for the sandbox's mailbox) stay;
* the deals' conversations, with their messages, ``conversation_retention_days`` after the
  deal ended (completed, cancelled or refunded: its last status change), hidden and reported
  messages alike; a deal still open keeps them however old (docs/conversations.md);
* idempotency keys after their 24 hours;
* access tokens ``TOKEN_GRACE`` after they expired;
* the rate limits' refusals per integration and hour after ``integrations.refusals.KEEP``
  (the back office shows the last week);
* the API's request log after ``api_request_log_days``;
* eID signing flows that did not complete ``eid_unfinished_retention_days`` after they
  started, and the person named by a completed one (name, birth date, the identity number's
  hash, the subject) ``eid_evidence_retention_days`` after it was signed (docs/identity.md).

Deals, offers, payments, payouts and status history are the money record: kept forever.
A dispute's statements are part of it; the conversations beside them are not.

Pacing: each batch deletes at most ``retention_batch_size`` rows of one table, oldest first
through an index on the time it compares, in a short transaction of its own; a full batch is
followed by a pause. The tables take turns, one batch each, until each is found clean; a run
stops after ``retention_max_batches`` batches, so the worker's other jobs get their turn, and
while any table has more to delete the job stays due and its next run goes on where this one
stopped. Once all are clean, it waits ``retention_interval_seconds``. On PostgreSQL several
workers may purge side by side: each batch locks its rows with ``SKIP LOCKED``.
"""

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.auth import repository as tokens
from dealbroker.conversations import repository as conversations
from dealbroker.core import clock, idempotency
from dealbroker.core.jobs import ShortJob
from dealbroker.core.metrics import retention_rows_purged
from dealbroker.core.settings import Settings
from dealbroker.events import repository as events
from dealbroker.integrations import refusals, request_log
from dealbroker.notifications import repository as outbox
from dealbroker.signatures import repository as eid_flows

log = logging.getLogger("dealbroker.worker")

# How long an expired token is kept: long enough that a log line about a token refused just
# now can still be matched to its integration.
TOKEN_GRACE = timedelta(hours=1)

# Deletes one batch of at most ``limit`` rows in ``session``; returns how many went.
Purge = Callable[[AsyncSession, datetime, int], Awaitable[int]]


def purges(settings: Settings) -> dict[str, Purge]:
    """Every purge by the table it empties; each takes the current time and a batch size."""
    return {
        "events": _older(events.purge_events, timedelta(days=settings.event_retention_days)),
        "eid_signatures": _older(
            eid_flows.purge_unfinished, timedelta(days=settings.eid_unfinished_retention_days)
        ),
        "eid_evidence": _older(
            eid_flows.forget_evidence, timedelta(days=settings.eid_evidence_retention_days)
        ),
        "outbox_messages": _older(
            outbox.purge_sent, timedelta(days=settings.outbox_retention_days)
        ),
        "conversations": _older(
            conversations.purge_ended, timedelta(days=settings.conversation_retention_days)
        ),
        "idempotency_keys": idempotency.purge_expired,
        "access_tokens": _older(tokens.purge_expired_tokens, TOKEN_GRACE),
        "rate_limit_refusals": refusals.purge,
        "api_requests": _older(request_log.purge, timedelta(days=settings.api_request_log_days)),
    }


def _older(purge: Purge, keep: timedelta) -> Purge:
    """``purge`` (which takes the time before which rows go) of the rows older than ``keep``."""

    async def purge_older(session: AsyncSession, now: datetime, limit: int) -> int:
        return await purge(session, now - keep, limit)

    return purge_older


@dataclass
class RetentionJob(ShortJob):
    """The worker's retention job (see the module's docstring)."""

    sessionmaker: async_sessionmaker[AsyncSession]
    settings: Settings
    name: str = "retention"
    every: float = field(init=False)
    more: bool = field(init=False, default=False)
    _purges: dict[str, Purge] = field(init=False)
    # Tables not yet found clean in this pass, in turn order.
    _unfinished: deque[str] = field(init=False, default_factory=deque)

    def __post_init__(self) -> None:
        self.every = self.settings.retention_interval_seconds
        self._purges = purges(self.settings)

    async def run_once(self) -> int:
        """One run: up to the cap of batches, the tables taking turns; returns rows deleted."""
        if not self._unfinished:  # a new pass over every table
            self._unfinished.extend(self._purges)
        size = self.settings.retention_batch_size
        now = clock.now()
        deleted = dict.fromkeys(self._purges, 0)
        batches = 0
        busy = False  # whether the last batch deleted a full batch
        while self._unfinished and batches < self.settings.retention_max_batches:
            if busy:  # let the API's queries in between two batches of real work
                await asyncio.sleep(self.settings.retention_pause_seconds)
            table = self._unfinished.popleft()
            async with self.sessionmaker() as session, session.begin():
                count = await self._purges[table](session, now, size)
            batches += 1
            deleted[table] += count
            busy = count == size
            if busy:  # maybe more: its next turn comes after the other tables'
                self._unfinished.append(table)
        # More to delete: stay due, so the runner's next round goes on after the other jobs.
        self.more = bool(self._unfinished)
        self.every = 0.0 if self.more else self.settings.retention_interval_seconds
        total = sum(deleted.values())
        for table, count in deleted.items():
            if count:
                retention_rows_purged.labels(table).inc(count)
        if total:
            log.info(
                "retention: deleted %s in %d batches%s",
                ", ".join(f"{n} {t}" for t, n in deleted.items() if n),
                batches,
                "; more to go" if self._unfinished else "",
            )
        return total
