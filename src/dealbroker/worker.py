"""The worker: one job runner, and the one list of jobs it runs.

Every background process runs ``Runner``: the ``dealbroker worker`` command, and the worker
embedded in ``serve`` on SQLite. ``jobs`` below is the only place jobs are registered, and the
runner takes its jobs from there alone, so no process kind can start without one of them (deal
deadlines, for instance). Jobs coordinate through the database (row leases and
``FOR UPDATE SKIP LOCKED``), so any number of runners may run side by side on PostgreSQL.

The loop: a round runs the jobs that are wanted: those a commit woke (``core.wakeup``: a
commit names the job whose work it queued, in-process or by PostgreSQL LISTEN/NOTIFY), those
whose last run left more due at once (``Job.more``), and those whose poll is due (``worker_poll_seconds``, or the
job's own ``every``; the first round runs them all). While any job is wanted, the next round
starts at once; otherwise the runner sleeps until a commit wakes a job, the next poll is due, or
it is told to stop. Polling finds what no commit announces: timers and retries coming due,
leases running out. A job that raises is logged and retried at its next poll; it never stops
the others. A database error or one opening a connection (the database down) is logged in one
line without its traceback, and while such errors go on, once a minute with their count; the
job's first run that succeeds after them logs how long they lasted.
"""

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from dealbroker import settlement
from dealbroker.conversations.tasks import ConversationMailJob
from dealbroker.core import logs, tracing, wakeup
from dealbroker.core.db import describe_error
from dealbroker.core.metrics import watch_process
from dealbroker.core.settings import Settings
from dealbroker.deals.tasks import DeadlineJob
from dealbroker.events.tasks import DeliveryJob
from dealbroker.notifications.tasks import OutboxSendJob, ReminderJob
from dealbroker.parcels.tasks import FollowJob, ParcelJob
from dealbroker.parties import EidTimeoutJob
from dealbroker.payments.swish_events import SwishPollJob
from dealbroker.payments.swish_payouts import SwishPayoutPollJob
from dealbroker.payments.tasks import ProviderCallJob
from dealbroker.payments.vipps_events import VippsPollJob
from dealbroker.retention import RetentionJob

log = logging.getLogger("dealbroker.worker")

LISTEN_RETRY_SECONDS = 10.0  # how often to try to reopen a dropped LISTEN connection


class Job(Protocol):
    """A unit of background work, run over and over by the runner."""

    # The job's name; a commit that queues work for it wakes it by this name (``core.wakeup``).
    name: str
    # Seconds between polls while neither woken nor busy (0: the worker's poll interval).
    every: float
    # Whether the last run that did some work left more due at once (it stopped at its batch's
    # size or time): such a job is run again at once. One that emptied its queue is not: a query
    # that would find nothing saved, since a commit queuing more wakes it.
    more: bool

    async def run_once(self) -> int:
        """Do one bounded batch of work; returns how much was done (0 when there was none)."""
        ...

    def halt(self) -> None:
        """The runner is stopping: finish the work begun, start no more (a long run ends early)."""
        ...

    async def aclose(self) -> None: ...


def jobs(sessionmaker: async_sessionmaker[AsyncSession], settings: Settings) -> list[Job]:
    """Every background job, in the order a round runs them. Register new jobs here.

    Deliveries first: a worker woken by a commit claims the webhooks it queued before the
    other jobs' queries, which would otherwise stand between a commit and its sending."""
    settlement.install()  # the provider calls' results reach the deals through it
    return [
        DeliveryJob.from_settings(sessionmaker, settings),
        DeadlineJob(sessionmaker, settings),
        EidTimeoutJob(sessionmaker, settings),
        ReminderJob(sessionmaker, settings),
        ProviderCallJob(sessionmaker, settings),
        VippsPollJob(sessionmaker, settings),
        SwishPollJob(sessionmaker, settings),  # idle unless Swish takes payments
        SwishPayoutPollJob(sessionmaker, settings),  # idle unless Swish payouts are on
        ParcelJob(sessionmaker, settings),
        FollowJob(sessionmaker, settings),
        # Before the outbox job: a round sends the conversations' mails it has just written.
        ConversationMailJob(sessionmaker, settings),
        OutboxSendJob(sessionmaker, settings),
        RetentionJob(sessionmaker, settings),
    ]


@dataclass
class Runner:
    """Runs ``jobs(...)`` until stopped; the batch in flight is finished before returning."""

    sessionmaker: async_sessionmaker[AsyncSession]
    settings: Settings
    engine: AsyncEngine | None = None
    jobs: list[Job] = field(init=False)
    _last_run: dict[str, float] = field(init=False, default_factory=dict)
    # Jobs to run in the next round whether or not their poll is due: woken, or with more due.
    _wanted: set[str] = field(init=False, default_factory=set)
    # Each job's failures on the database, logged as a run (``logs.Failures``).
    _failures: dict[str, logs.Failures] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.jobs = jobs(self.sessionmaker, self.settings)

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)

    def _period(self, job: Job) -> float:
        return job.every or self.settings.worker_poll_seconds

    def _next_poll(self, now: float) -> float:
        """Seconds until the first job's poll is due (0: one is due now)."""
        waits = (
            self._last_run[job.name] + self._period(job) - now if job.name in self._last_run else 0
            for job in self.jobs
        )
        return max(min(waits, default=0.0), 0.0)

    async def run_round(self) -> int:
        """Run once every job that is wanted or due to poll; returns the work done."""
        done = 0
        now = time.monotonic()
        for job in self.jobs:
            last = self._last_run.get(job.name)
            polled = last is None or now - last >= self._period(job)
            if not polled and job.name not in self._wanted:
                continue
            self._wanted.discard(job.name)
            self._last_run[job.name] = now
            try:
                with tracing.job_span(job.name) as span:
                    found = await job.run_once()
                    if span is not None:
                        span.set_attribute(tracing.JOB_DONE, found)
            except (DBAPIError, ConnectionError, TimeoutError) as exc:
                # A database hiccup must not end the worker; retry shortly. A ConnectionError or
                # TimeoutError is the driver's, opening a connection to a database down,
                # restarting or not answering (``core.db.CONNECT_TIMEOUT``).
                # Described, never printed: the error's text may hold personal data. The first
                # of a run of them, then their count at most once a minute: an outage of the
                # database is a few lines per job, not one per job and poll.
                self._failures_of(job).failed(describe_error(exc), now)
                continue
            except Exception:  # nor a bug in one job end the others
                log.exception("job %s failed; retrying", job.name)
                continue
            self._failures_of(job).succeeded(now)
            if found and job.more:  # run it again in the next round
                self._wanted.add(job.name)
            done += found
        return done

    def _failures_of(self, job: Job) -> logs.Failures:
        failures = self._failures.get(job.name)
        if failures is None:
            failures = self._failures[job.name] = logs.Failures(log, f"job {job.name}", "retrying")
        return failures

    def _halt(self, stopped: "asyncio.Future[Any]") -> None:
        if not stopped.cancelled():  # cancelled: the run ended without a stop request
            for job in self.jobs:
                job.halt()

    def _listen(self, waiter: wakeup.Waiter | None) -> None:
        """Hand the jobs that take it (``listen``) the waiter, by which a run may go on with
        the work that commits queue meanwhile (``Waiter.next``); None: the runner has ended."""
        for job in self.jobs:
            listen = getattr(job, "listen", None)
            if listen is not None:
                listen(waiter)

    def _woken(self, waiter: wakeup.Waiter) -> None:
        names, everything = waiter.take()
        known = {job.name for job in self.jobs}
        self._wanted |= known if everything else names & known

    async def run(self, stop: asyncio.Event) -> None:
        tracing.start("worker")  # kept as is when embedded in serve, which started it
        if self.settings.metrics_enabled:
            watch_process("worker")  # likewise
        if self.engine is not None:
            tracing.instrument_engine(self.engine)
        waiter = wakeup.subscribe()
        self._listen(waiter)
        listener = await _listen(self.engine, waiter)
        last_listen = time.monotonic()
        # A stop request reaches a job in the middle of its run, so that the run ends early.
        halting = asyncio.ensure_future(stop.wait())
        halting.add_done_callback(self._halt)
        try:
            while not stop.is_set():
                self._woken(waiter)
                now = time.monotonic()
                if _lost(listener) and now - last_listen >= LISTEN_RETRY_SECONDS:
                    # The LISTEN connection dropped (a restart, a network blip): open it again;
                    # until then polling alone finds new work.
                    last_listen = now
                    listener = await _listen(self.engine, waiter)
                await self.run_round()
                if self._wanted or waiter.event.is_set():
                    continue
                timeout = self._next_poll(time.monotonic())
                if _lost(listener):  # check on the LISTEN connection at least as often
                    timeout = min(timeout, self.settings.worker_poll_seconds)
                # ``halting`` (done once stopped) is waited on as it is, not a new task per
                # wait: the runner waits once per event at a low rate.
                woken = asyncio.ensure_future(waiter.event.wait())
                await asyncio.wait({halting, woken}, timeout=timeout, return_when="FIRST_COMPLETED")
                woken.cancel()
        finally:
            halting.cancel()
            self._listen(None)
            wakeup.unsubscribe(waiter)
            if listener is not None:
                with contextlib.suppress(Exception):
                    await listener.close()

    async def aclose(self) -> None:
        for job in self.jobs:
            await job.aclose()


def _lost(listener: Any) -> bool:
    return listener is None or listener.is_closed()


async def _listen(engine: AsyncEngine | None, waiter: wakeup.Waiter) -> Any:
    """LISTEN for commits of other processes (PostgreSQL only); polling covers its absence."""
    if engine is None or engine.dialect.name != "postgresql":
        return None
    import asyncpg

    from dealbroker.core.db import connect_kwargs

    try:
        # Reached as the engine reaches it, its connect timeout included (``connect_kwargs``).
        connection = await asyncpg.connect(**connect_kwargs(engine))
        # The payload names the job to wake; an empty one (an older version's) wakes all.
        await connection.add_listener(
            wakeup.CHANNEL, lambda _conn, _pid, _channel, payload: waiter.wake(payload or None)
        )
    except (OSError, asyncpg.PostgresError) as exc:
        log.warning("LISTEN unavailable (%s); polling only", str(exc) or type(exc).__name__)
        return None
    return connection
