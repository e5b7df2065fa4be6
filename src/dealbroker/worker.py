"""The worker: one job runner, and the one list of jobs it runs.

Every background process runs ``Runner``: the ``dealbroker worker`` command, and the worker
embedded in ``serve`` on SQLite. ``jobs`` below is the only place jobs are registered, and the
runner takes its jobs from there alone, so no process kind can start without one of them (deal
deadlines, for instance). Jobs coordinate through the database (row leases and
``FOR UPDATE SKIP LOCKED``), so any number of runners may run side by side on PostgreSQL.

The loop: run every job that is due; while any job found work, go round again at once;
otherwise sleep until a commit queues work (in-process event, PostgreSQL LISTEN/NOTIFY), the
poll interval passes, or the runner is told to stop. A job that raises is logged and retried
on the next round; it never stops the others.
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
from dealbroker.core import tracing, wakeup
from dealbroker.core.db import describe_error
from dealbroker.core.metrics import watch_process
from dealbroker.core.settings import Settings
from dealbroker.deals.tasks import DeadlineJob, EidTimeoutJob, ReminderJob
from dealbroker.events.tasks import DeliveryJob
from dealbroker.notifications.tasks import OutboxSendJob
from dealbroker.payments.tasks import ProviderCallJob
from dealbroker.retention import RetentionJob

log = logging.getLogger("dealbroker.worker")

LISTEN_RETRY_SECONDS = 10.0  # how often to try to reopen a dropped LISTEN connection


class Job(Protocol):
    """A unit of background work, run over and over by the runner."""

    name: str
    # Seconds between runs when the last run found nothing (0: every round of the loop).
    every: float

    async def run_once(self) -> int:
        """Do one bounded batch of work; returns how much was done (0 when there was none)."""
        ...

    async def aclose(self) -> None: ...


def jobs(sessionmaker: async_sessionmaker[AsyncSession], settings: Settings) -> list[Job]:
    """Every background job, in the order a round runs them. Register new jobs here.

    Deliveries first: a worker woken by a commit claims the webhooks it queued before the
    other jobs' queries (measured: they were most of the wait from commit to sending)."""
    settlement.install()  # the provider calls' results reach the deals through it
    return [
        DeliveryJob.from_settings(sessionmaker, settings),
        DeadlineJob(sessionmaker, settings),
        EidTimeoutJob(sessionmaker, settings),
        ReminderJob(sessionmaker, settings),
        ProviderCallJob(sessionmaker, settings),
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

    def __post_init__(self) -> None:
        self.jobs = jobs(self.sessionmaker, self.settings)

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)

    async def run_round(self) -> int:
        """Run every job that is due once; returns the work done in this round."""
        done = 0
        now = time.monotonic()
        for job in self.jobs:
            last = self._last_run.get(job.name)
            if last is not None and job.every and now - last < job.every:
                continue
            self._last_run[job.name] = now
            try:
                with tracing.job_span(job.name) as span:
                    found = await job.run_once()
                    if span is not None:
                        span.set_attribute(tracing.JOB_DONE, found)
                    done += found
            except DBAPIError as exc:  # a database hiccup must not end the worker; retry shortly
                # Described, never printed: the error's text may hold personal data.
                log.error("job %s failed; retrying: %s", job.name, describe_error(exc))
            except Exception:  # nor a bug in one job end the others
                log.exception("job %s failed; retrying", job.name)
        return done

    async def run(self, stop: asyncio.Event) -> None:
        tracing.start("worker")  # kept as is when embedded in serve, which started it
        if self.settings.metrics_enabled:
            watch_process("worker")  # likewise
        if self.engine is not None:
            tracing.instrument_engine(self.engine)
        waiter = wakeup.subscribe()
        listener = await _listen(self.engine, waiter)
        last_listen = time.monotonic()
        poll = self.settings.worker_poll_seconds
        try:
            while not stop.is_set():
                waiter.clear()
                now = time.monotonic()
                if _lost(listener) and now - last_listen >= LISTEN_RETRY_SECONDS:
                    # The LISTEN connection dropped (a restart, a network blip): open it again;
                    # until then polling alone finds new work.
                    last_listen = now
                    listener = await _listen(self.engine, waiter)
                if await self.run_round():
                    continue
                stopping = asyncio.ensure_future(stop.wait())
                woken = asyncio.ensure_future(waiter.wait())
                await asyncio.wait({stopping, woken}, timeout=poll, return_when="FIRST_COMPLETED")
                stopping.cancel()
                woken.cancel()
        finally:
            wakeup.unsubscribe(waiter)
            if listener is not None:
                with contextlib.suppress(Exception):
                    await listener.close()

    async def aclose(self) -> None:
        for job in self.jobs:
            await job.aclose()


def _lost(listener: Any) -> bool:
    return listener is None or listener.is_closed()


async def _listen(engine: AsyncEngine | None, waiter: asyncio.Event) -> Any:
    """LISTEN for commits of other processes (PostgreSQL only); polling covers its absence."""
    if engine is None or engine.dialect.name != "postgresql":
        return None
    import asyncpg

    dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        connection = await asyncpg.connect(dsn)
        await connection.add_listener(wakeup.CHANNEL, lambda *_: waiter.set())
    except (OSError, asyncpg.PostgresError) as exc:
        log.warning("LISTEN unavailable (%s); polling only", exc)
        return None
    return connection
