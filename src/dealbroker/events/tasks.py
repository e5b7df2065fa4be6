"""The delivery job: sends queued webhook deliveries, at least once, with retries.

One batch: claim due deliveries (pushing each forward by a lease so that no other worker takes
it, and so that it comes due again if this worker dies), send them concurrently, then record
every outcome in one transaction. Batches are pipelined: while one is in flight the next is
claimed, so a backlog drains without a serial claim between two batches (each batch is still
recorded before the next is sent: ``run_once``). The worker's job runner
(``dealbroker.worker``) runs it, woken at once by commits that queue deliveries. On
PostgreSQL, with the fast paths on (``DEALBROKER_FAST_PATHS``), the claim and the usual record
run on asyncpg directly, without a session, on two connections of the job's own
(``core.fastpath.statements.DriverStatements``: no pool checkout and return per statement;
``repository.claim_due_alone``, ``record_outcomes_alone``), and at a steady rate a short batch's
record rides on the statement that claims the next (``record_and_claim_alone``, ``LINGER``).
With them off, each goes through SQLAlchemy (``repository.claim_due``, ``record_outcomes``).
"""

import asyncio
import functools
import logging
import math
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import orjson
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from dealbroker.core import clock, tracing, wakeup
from dealbroker.core.fastpath.statements import DriverStatements
from dealbroker.core.metrics import (
    webhook_attempt_duration,
    webhook_deliveries,
    webhook_endpoint_attempts,
)
from dealbroker.core.settings import Settings
from dealbroker.core.webhook_schedule import JITTER, MAX_ATTEMPTS, RETRY_DELAYS
from dealbroker.events import repository
from dealbroker.events.egress import EgressRefused, answered_from_public_address, webhook_session
from dealbroker.events.signing import signed_headers
from dealbroker.integrations.service import webhook_signing_secrets

log = logging.getLogger("dealbroker.worker")

DISABLE_AFTER = timedelta(days=5)
MAX_RETRY_AFTER = timedelta(hours=24)
READ_LIMIT = 64 * 1024
STORE_LIMIT = 20 * 1024
SLOW_DOWN = {429, 502, 504}
SEND_TIMEOUT = 15.0  # seconds for a whole delivery: connect (5 s at most), send, answer
CONNECT_TIMEOUT = 5.0
# Why the worker disables an endpoint, as its integration reads it.
GONE = "the endpoint answered 410 Gone"
FAILING = f"every delivery failed for {DISABLE_AFTER.days} days"
# A run goes on while batches come back full for at most this long, then hands the runner back
# (its other jobs, a stop), which runs it again at once.
RUN_SECONDS = 1.0
# How long a run listening for commits holds a short batch sent, unrecorded, for the claim of the
# next deliveries queued to record it in the same statement (``DeliveryJob.run_once``).
LINGER = 0.05
# The job's own connections on PostgreSQL: one claims the next batch while the other records.
CONNECTIONS = 2


@dataclass
class Outcome:
    delivery_id: uuid.UUID
    endpoint_id: uuid.UUID
    event_id: uuid.UUID
    integration_id: uuid.UUID
    attempts_before: int
    attempted_at: datetime
    status_code: int | None
    latency_ms: int
    error: str | None
    excerpt: str | None
    retry_after: timedelta | None
    # The signed headers as sent, kept with the attempt for the developer portal.
    headers: dict[str, str] | None = None
    # The attempt's outcome label in the metrics.
    result: str = "network_error"

    @property
    def success(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


@dataclass
class _Batch:
    """A batch's outcomes as the rows that record them (``DeliveryJob._batch``)."""

    now: datetime
    updates: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    failing: set[uuid.UUID]  # the endpoints that may be marked failing
    succeeded: set[uuid.UUID]  # endpoints
    failed: set[uuid.UUID]
    gone: set[uuid.UUID]

    @property
    def marks_no_endpoint(self) -> bool:
        """No endpoint to mark failing or healthy: the deliveries and attempts alone to write."""
        return not self.failed and not self.succeeded & self.failing

    @property
    def usual(self) -> bool:
        """Some attempt, and no endpoint to mark: written in one statement on PostgreSQL."""
        return bool(self.attempts) and self.marks_no_endpoint


@functools.cache
def _attempt_duration(result: str) -> Any:
    """The attempt-duration histogram's child for ``result`` (one of five outcomes), looked up
    once: ``labels()`` checks and locks on every call."""
    return webhook_attempt_duration.labels(result)


def _count_attempts(outcomes: Sequence[Outcome]) -> None:
    """Count a batch's attempts by endpoint and outcome: one increment per pair, not per
    attempt (each is a locked write to the metrics file under ``worker``)."""
    counts = Counter((o.endpoint_id, o.result) for o in outcomes)
    for (endpoint_id, result), n in counts.items():
        webhook_endpoint_attempts.labels(str(endpoint_id), result).inc(n)


def _retry_after(response: aiohttp.ClientResponse) -> timedelta | None:
    if response.status not in SLOW_DOWN:
        return None
    value = response.headers.get("retry-after", "")
    if value.isdigit():
        return min(timedelta(seconds=int(value)), MAX_RETRY_AFTER)
    return None


def next_attempt(
    attempts_done: int, now: datetime, retry_after: timedelta | None, rng: Callable[[], float]
) -> datetime | None:
    """When to try again after ``attempts_done`` failed attempts, or ``None`` when out of tries."""
    if attempts_done >= MAX_ATTEMPTS:
        return None
    delay = RETRY_DELAYS[attempts_done - 1]
    if retry_after is not None:
        delay = max(delay, retry_after)
    return now + delay * (1 + JITTER * rng())


class DeliveryJob:
    name = wakeup.DELIVERIES
    every = 0.0
    more = False

    @classmethod
    def from_settings(
        cls, sessionmaker: async_sessionmaker[AsyncSession], settings: Settings
    ) -> "DeliveryJob":
        return cls(
            sessionmaker,
            allow_private=settings.private_webhooks_allowed,
            batch_size=settings.worker_batch_size,
            lease=timedelta(seconds=settings.worker_lease_seconds),
            linger=LINGER,
            fast_paths=settings.fast_paths,
        )

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        *,
        allow_private: bool,
        batch_size: int = 200,
        lease: timedelta = timedelta(seconds=30),
        session: aiohttp.ClientSession | None = None,
        rng: Callable[[], float] = random.random,
        linger: float = 0.0,
        pool_timeout: float = 30.0,
        fast_paths: bool = True,
    ) -> None:
        self.sessionmaker = sessionmaker
        # PostgreSQL, fast paths on: claims and records without a session, on asyncpg
        # connections of the job's own (``*_alone``), opened on the first claim and closed by
        # ``aclose``: a pooled connection's checkout and return cost more CPU than the
        # statement (bench/README.md), once per event at a steady rate. ``pool_timeout``: how
        # long a claim may wait to connect, as long as the worker's engine waits for a pooled
        # connection.
        engine = sessionmaker.kw.get("bind")
        alone = (
            DriverStatements(engine, CONNECTIONS, pool_timeout, fast=fast_paths)
            if isinstance(engine, AsyncEngine)
            else None
        )
        self._alone = alone if alone is not None and alone.on_driver else None
        self.batch_size = batch_size
        self.lease = lease
        # A batch is recorded after its slowest send, and must be recorded before its lease
        # ends, or another worker would send it again: no send may take more than half the lease.
        self.send_timeout = min(SEND_TIMEOUT, lease.total_seconds() / 2)
        # aiohttp's own total timeout bounds the whole exchange (waiting for a connection,
        # connecting, sending, the answer and its body), where an ``asyncio.timeout`` around it
        # cost one more timer per send (bench/README.md). Exact, not
        # rounded up to a whole second as aiohttp does from ``ceil_threshold`` on.
        self._timeout = aiohttp.ClientTimeout(
            total=self.send_timeout,
            connect=min(CONNECT_TIMEOUT, self.send_timeout),
            ceil_threshold=math.inf,
        )
        self.rng = rng
        self.allow_private = allow_private
        self._own_session = session is None
        # Made on the first batch: an aiohttp session belongs to the running event loop.
        self._session = session
        self.sent = 0
        self._halted = False
        # Endpoints this job marked failing: a batch claimed before that was recorded read
        # them as healthy.
        self._failing: set[uuid.UUID] = set()
        # Seconds a short batch sent may wait unrecorded for the next claim (``run_once``), given
        # the runner's waiter (``listen``).
        self.linger = linger
        self._waiter: wakeup.Waiter | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = webhook_session(
                allow_private=self.allow_private, max_connections=self.batch_size
            )
        return self._session

    async def aclose(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None
        if self._alone is not None:  # closed; a later claim opens new ones, as the session
            alone = self._alone
            self._alone = DriverStatements(alone.engine, alone.pool_size, alone.pool_timeout)
            await alone.close()

    def halt(self) -> None:
        """Send no further batch: the runner is stopping. The batch in flight is finished and
        recorded; one claimed ahead is handed back at once (due again), not sent."""
        self._halted = True
        if self._waiter is not None:
            self._waiter.release()

    async def run_once(self) -> int:
        """Claim, send and record batches until a claim comes back short of a full batch, for
        about ``RUN_SECONDS`` at most, or until halted; returns how many deliveries it handled,
        all recorded by then.

        While a batch is in flight the next one is claimed (leased like the batch in flight, so
        no other worker takes it): between two batches only their recording is serial. Each
        batch is recorded before the next is sent, so at most one batch is ever sent and not
        recorded, and a worker killed mid-batch sends at most that one again. A batch claimed
        ahead whose turn never comes (a bug, the database gone) waits for its lease to end, as
        after a crash.

        Given the runner's waiter (``listen``; PostgreSQL), a short batch sent is held
        unrecorded for up to ``linger`` seconds: a commit that queues more deliveries within
        that time goes on with the run, whose next claim records the batch held in the same
        statement (one round trip where there were two: at a steady rate, most batches). Still
        at most one batch is sent and not recorded."""
        deadline = time.monotonic() + RUN_SECONDS
        claimed, _ = await self._claim()
        handled = 0
        self.more = False
        held: _Batch | None = None  # sent: recorded by the next claim, or at the end
        try:
            while claimed:
                full = len(claimed) >= self.batch_size  # a short batch: none was left due
                ahead = full and time.monotonic() < deadline and not self._halted
                upcoming = asyncio.ensure_future(self._claim()) if ahead else None
                try:
                    outcomes = await asyncio.gather(*(self._send(row) for row in claimed))
                    _count_attempts(outcomes)
                    failing = {row.endpoint_id for row in claimed if row.failing_since is not None}
                    batch = self._batch(outcomes, failing | self._failing)
                    if upcoming is None and batch.usual and self._waiter is not None:
                        held = batch
                    else:
                        await self._record(batch)
                except BaseException:
                    if upcoming is not None:
                        await asyncio.gather(upcoming, return_exceptions=True)
                    raise
                handled += len(outcomes)
                self.sent += len(outcomes)
                if upcoming is None:
                    if held is not None and await self._more_soon(deadline):
                        batch, held = held, None  # a failed claim loses it: sent again
                        claimed, _ = await self._claim(batch)
                        self._recorded(batch)
                        continue
                    self.more = full and not self._halted  # out of time: maybe more
                    break
                claimed, until = await upcoming
                if claimed and self._halted:
                    await self._release(claimed, until)
                    break
        finally:
            if held is not None:
                await self._record(held)
        return handled

    def listen(self, waiter: wakeup.Waiter | None) -> None:
        """The runner's waiter (None: no more), by which a run learns of deliveries queued
        while it holds a batch (``run_once``); used on PostgreSQL only."""
        self._waiter = waiter if self._alone is not None and self.linger > 0 else None

    async def _more_soon(self, deadline: float) -> bool:
        """Whether a commit queued more deliveries within ``linger`` seconds (taking its wake),
        and the run may go on."""
        waiter = self._waiter
        if waiter is None or self._halted or time.monotonic() >= deadline:
            return False
        return await waiter.next(self.name, self.linger) and not self._halted

    async def _claim(self, recording: "_Batch | None" = None) -> tuple[Sequence[Any], datetime]:
        """A batch of due deliveries, and the end of their lease; ``recording``: a batch sent,
        recorded in the same statement (PostgreSQL, on the driver)."""
        now = clock.now()
        until = now + self.lease
        if recording is not None:
            assert self._alone is not None
            rows = await repository.record_and_claim_alone(
                self._alone, recording.updates, recording.attempts, now, until, self.batch_size
            )
            return rows, until
        if self._alone is not None:
            return await repository.claim_due_alone(self._alone, now, until, self.batch_size), until
        async with self.sessionmaker() as session, session.begin():
            return await repository.claim_due(session, now, until, self.batch_size), until

    async def _release(self, claimed: Sequence[Any], until: datetime) -> None:
        async with self.sessionmaker() as session, session.begin():
            await repository.release_claims(
                session, [row.id for row in claimed], until, clock.now()
            )

    async def _send(self, row: Any) -> Outcome:
        if not tracing.enabled():  # no span, and no attributes built for one
            return await self._attempt(row)
        # The endpoint by id: its URL may hold the integration's own secret.
        with tracing.span("webhook send", {"dealbroker.endpoint_id": str(row.endpoint_id)}) as span:
            outcome = await self._attempt(row)
            if span is not None:
                span.set_attribute("dealbroker.event_id", str(row.event_id))
                if outcome.status_code is not None:
                    span.set_attribute("http.response.status_code", outcome.status_code)
                if not outcome.success:
                    answer = outcome.status_code
                    tracing.mark_failed(
                        span, "no answer" if answer is None else f"answered {answer}"
                    )
        return outcome

    async def _attempt(self, row: Any) -> Outcome:
        attempted_at = clock.now()
        event_id = str(row.event_id)
        secrets = webhook_signing_secrets(
            row.webhook_secret,
            row.previous_webhook_secret,
            row.previous_webhook_secret_expires_at,
            attempted_at,
        )
        headers = signed_headers(secrets, event_id, attempted_at, row.payload)
        started = time.perf_counter()
        status_code: int | None = None
        error = excerpt = None
        retry_after = None
        result = "network_error"  # the attempt's outcome label in the metrics (no answer yet)
        try:
            async with self.session.post(
                row.url,
                data=row.payload.encode(),
                headers=headers,
                allow_redirects=False,
                timeout=self._timeout,
            ) as response:
                status_code = response.status
                retry_after = _retry_after(response)
                # The attempts API shows the excerpt to the integration: from a loopback or
                # private address (a sandbox's own services) that would read them back.
                keep = answered_from_public_address(response)
                body = bytearray()
                while len(body) < READ_LIMIT:
                    chunk = await response.content.read(READ_LIMIT - len(body))
                    if not chunk:
                        break
                    body += chunk
            if keep:
                excerpt = bytes(body[:STORE_LIMIT]).decode("utf-8", errors="replace") or None
        except EgressRefused as exc:
            error, result = f"refused: {exc}", "refused"
        except TimeoutError as exc:
            # aiohttp's own connect and total timeouts are TimeoutErrors too, with their reason.
            if isinstance(exc, aiohttp.ClientError) and str(exc):
                error = f"{type(exc).__name__}: {exc}"[:500]
            else:
                error = f"timed out after {self.send_timeout:g} s"
            result = "timeout"
        except aiohttp.ClientError as exc:
            error = f"{type(exc).__name__}: {exc}"[:500] if str(exc) else type(exc).__name__
        elapsed = time.perf_counter() - started
        latency = int(elapsed * 1000)
        outcome = Outcome(
            row.id,
            row.endpoint_id,
            row.event_id,
            row.integration_id,
            row.attempts,
            attempted_at,
            status_code,
            latency,
            error,
            excerpt,
            retry_after,
            headers,
        )
        if status_code is not None:
            result = "success" if outcome.success else "http_error"
        outcome.result = result
        _attempt_duration(result).observe(elapsed)
        return outcome

    def _batch(self, outcomes: list[Outcome], failing: set[uuid.UUID]) -> "_Batch":
        """A batch's outcomes as the rows that record them. ``failing``: the endpoints that
        may be marked failing (so when the batch was claimed, or marked by this job since), the
        only ones a success has to mark healthy: a statement saved on every batch to healthy
        endpoints. (Another worker's mark made after the claim is missed: the endpoint's next
        success clears it.)"""
        now = clock.now()
        updates: list[dict[str, Any]] = []
        gone: set[uuid.UUID] = set()
        succeeded: set[uuid.UUID] = set()
        failed: set[uuid.UUID] = set()
        for o in outcomes:
            attempts = o.attempts_before + 1
            if o.success:
                status, next_at = "succeeded", now
                succeeded.add(o.endpoint_id)
            else:
                failed.add(o.endpoint_id)
                when = (
                    None
                    if o.status_code == 410
                    else next_attempt(attempts, now, o.retry_after, self.rng)
                )
                status, next_at = ("pending", when) if when else ("failed", now)
                if o.status_code == 410:
                    gone.add(o.endpoint_id)
            updates.append(
                {
                    "b_id": o.delivery_id,
                    "b_status": status,
                    "b_attempts": attempts,
                    "b_next": next_at,
                    "b_code": o.status_code,
                    "b_error": o.error,
                    "b_now": now,
                }
            )
        attempt_rows = [
            {
                "id": uuid.uuid4(),
                "delivery_id": o.delivery_id,
                "endpoint_id": o.endpoint_id,
                "event_id": o.event_id,
                "integration_id": o.integration_id,
                "attempted_at": o.attempted_at,
                "success": o.success,
                "status_code": o.status_code,
                "latency_ms": o.latency_ms,
                "error": o.error,
                "response_excerpt": o.excerpt,
                "request_headers": None if o.headers is None else orjson.dumps(o.headers).decode(),
            }
            for o in outcomes
        ]
        return _Batch(now, updates, attempt_rows, failing, succeeded, failed, gone)

    async def _record(self, batch: "_Batch") -> None:
        """Record a batch's outcomes in one transaction."""
        if batch.marks_no_endpoint:
            if self._alone is not None and batch.attempts:
                await repository.record_outcomes_alone(self._alone, batch.updates, batch.attempts)
            else:
                async with self.sessionmaker() as session, session.begin():
                    await repository.record_outcomes(session, batch.updates, batch.attempts)
        else:
            await self._record_with_endpoints(
                batch.now,
                batch.updates,
                batch.attempts,
                batch.failing,
                batch.succeeded,
                batch.failed,
                batch.gone,
            )
        self._recorded(batch)

    def _recorded(self, batch: "_Batch") -> None:
        """What follows a batch's recording in this process."""
        succeeded, failed = batch.succeeded, batch.failed
        self._failing = (self._failing - succeeded) | (failed - succeeded)
        # Counted once recorded: a batch whose worker dies unrecorded is sent again.
        for status, n in Counter(update["b_status"] for update in batch.updates).items():
            webhook_deliveries.labels("retrying" if status == "pending" else status).inc(n)

    async def _record_with_endpoints(
        self,
        now: datetime,
        updates: list[dict[str, Any]],
        attempt_rows: list[dict[str, Any]],
        failing: set[uuid.UUID],
        succeeded: set[uuid.UUID],
        failed: set[uuid.UUID],
        gone: set[uuid.UUID],
    ) -> None:
        """Record a batch with failures, or a success of an endpoint marked failing, and mark
        or disable its endpoints, in one transaction."""
        async with self.sessionmaker() as session, session.begin():
            await repository.finish_deliveries(session, updates)
            await repository.add_attempts(session, attempt_rows)
            await repository.mark_endpoints(session, succeeded & failing, now, failing=False)
            await repository.mark_endpoints(session, failed - succeeded, now, failing=True)
            for endpoint_id in await repository.disable_endpoints(session, gone, GONE):
                log.warning("webhook endpoint %s disabled: it answered 410 Gone", endpoint_id)
            for endpoint_id in await repository.disable_endpoints(
                session,
                failed - succeeded,
                FAILING,
                failing_since_before=now - DISABLE_AFTER,
            ):
                log.warning(
                    "webhook endpoint %s disabled: failing for %s days",
                    endpoint_id,
                    DISABLE_AFTER.days,
                )
