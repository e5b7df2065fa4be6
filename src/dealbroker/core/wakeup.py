"""Waking the job runner as soon as a transaction that queued background work commits.

Webhook deliveries, e-mails and payment-provider calls are rows a transaction writes; the
worker should start on them at once, not at its next poll. A transaction names the job whose
work it queued (``DELIVERIES``, ``MAIL``, ``PROVIDER_CALLS``: the jobs' names), and only that
job is woken: the others have nothing new to find, and running them on every commit was most
of an idle worker's CPU. In-process: a ``Waiter`` told after commit (the embedded worker on
SQLite, and any worker in the same process). Across processes on PostgreSQL: ``NOTIFY`` with the
job's name as its payload, sent inside the queuing transaction, which PostgreSQL delivers to
listeners only when it commits, and never for a transaction rolled back. A notification without
a payload (a process of an older version) wakes every job.
"""

import asyncio

from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

CHANNEL = "dealbroker_deliveries"
# The work a transaction may queue, each named as the job that does it (``worker.jobs``).
DELIVERIES = "deliveries"
MAIL = "mail"
PROVIDER_CALLS = "provider-calls"
PARCELS = "parcels"

_FLAG = "dealbroker_queued"  # session.info: the jobs this transaction queued work for
_waiters: set["Waiter"] = set()


class Waiter:
    """What woke a runner since it last looked: the jobs named, or every job."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._jobs: set[str] = set()
        self._everything = False
        # Done at the next wake: a job waiting in its run for more of its own work (``next``).
        self._watch: asyncio.Future[None] | None = None

    def wake(self, job: str | None) -> None:
        """Wake ``job``; ``None`` (a notification that names none): every job."""
        if job:
            self._jobs.add(job)
        else:
            self._everything = True
        self.event.set()
        self.release()

    def release(self) -> None:
        """End a job's wait in ``next`` now (a wake, or the runner stopping)."""
        if self._watch is not None and not self._watch.done():
            self._watch.set_result(None)

    async def next(self, job: str, timeout: float) -> bool:
        """For a job in the middle of its run: wait up to ``timeout`` seconds for a wake of
        ``job`` and take it, so that the run goes on with the work it announces (the runner will
        not run the job again for it). False, leaving every wake to the runner, when the time
        passed, when ``release`` ended the wait, or when a wake for another job or for every job
        is waiting: the job should then hand back to the runner."""
        if job not in self._jobs:
            if self._jobs or self._everything:
                return False
            self._watch = watch = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await watch
            except TimeoutError:
                return False
            finally:
                self._watch = None
            if job not in self._jobs:
                return False
        if self._everything or len(self._jobs) > 1:
            return False
        self._jobs.clear()
        self.event.clear()
        return True

    def take(self) -> tuple[set[str], bool]:
        """The jobs woken since the last call, and whether every job was; clears both."""
        jobs, everything = self._jobs, self._everything
        self._jobs, self._everything = set(), False
        self.event.clear()
        return jobs, everything


def subscribe() -> Waiter:
    """A waiter told whenever a transaction in this process commits queued work."""
    waiter = Waiter()
    _waiters.add(waiter)
    return waiter


def unsubscribe(waiter: Waiter) -> None:
    _waiters.discard(waiter)


def _queued(session: AsyncSession) -> set[str]:
    queued: set[str] = session.info.setdefault(_FLAG, set())
    return queued


async def mark(session: AsyncSession, job: str) -> None:
    """Note that this transaction queued work for ``job``; wake it once the transaction
    commits."""
    queued = _queued(session)
    if job in queued:
        return
    queued.add(job)
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(select(func.pg_notify(CHANNEL, job)))


def notified(session: AsyncSession, job: str) -> None:
    """Note that this transaction queued work for ``job`` and already sent the ``NOTIFY``
    itself (a statement that calls ``pg_notify``): in-process waiters still wake once it
    commits."""
    _queued(session).add(job)


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    for job in session.info.pop(_FLAG, ()):
        for waiter in _waiters:
            waiter.wake(job)


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_FLAG, None)
