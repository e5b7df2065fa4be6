"""The webhook delivery worker as real processes: ``python -m dealbroker worker`` subprocesses,
a fresh PostgreSQL database, and a loopback receiver in this process that verifies every
signature with the Standard Webhooks library.

* SIGKILL mid-batch loses nothing: a new worker re-sends the killed batch once its lease ends,
  with the same ``webhook-id`` and the same bytes.
* Two workers side by side share the queue without sending anything twice.
* SIGTERM mid-batch finishes the batch, records it, exits 0 and leaves nothing claimed.
* A trickle of events, each its own batch recorded by the claim of the next (or at SIGTERM),
  is sent once and recorded in full.
"""

import asyncio
import hashlib
import logging
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from dealbroker.core import clock
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind, deal_status
from dealbroker.events.models import Delivery, DeliveryAttempt, Event
from dealbroker.integrations import service as integrations
from tests.conftest import BACKENDS, make_settings
from tests.processes import Worker, wait_until
from tests.receiver import LoopbackServer

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif("postgresql" not in BACKENDS, reason="worker processes need PostgreSQL"),
]

log = logging.getLogger(__name__)

EVENTS = 1_000
BATCH = 50
# The worker's send timeout is half its lease: 3 s keeps a receiver thread that a busy machine
# schedules late from looking like a receiver that does not answer.
LEASE_SECONDS = 6
POLL_SECONDS = 0.2
# Every wait below is bounded; together they keep each test well under a minute.
DELIVER_TIMEOUT = 40.0
START_TIMEOUT = 20.0
EXIT_TIMEOUT = 15.0


# --------------------------------------------------------------------------------------------
# The loopback receiver
# --------------------------------------------------------------------------------------------


class Receiver:
    """A threaded HTTP/1.1 server on 127.0.0.1 that answers 200 at once and records, per
    ``webhook-id``, how often it came and a digest of each body. Every request's signature is
    verified; a failure is recorded (and answered 400, which the worker would retry).

    ``hold_at``: the request that makes the count reach this number is held, unanswered, until
    :meth:`release`; :attr:`holding` is set while it waits. A worker is then certainly in the
    middle of a batch.
    """

    def __init__(self, hold_at: int | None = None) -> None:
        self.webhook: Webhook | None = None  # set once the integration (and its secret) exists
        self.hold_at = hold_at
        self.holding = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self.received = 0
        self.counts: Counter[str] = Counter()
        self.bodies: dict[str, set[str]] = defaultdict(set)
        self.failures: list[str] = []
        self.server = LoopbackServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                if len(body) < length:  # the sender gave up mid-request: not a signature's fault
                    with receiver._lock:
                        receiver.failures.append(f"abandoned after {len(body)} of {length} bytes")
                    return
                ok = receiver.record(dict(self.headers.items()), body)
                self.send_response(200 if ok else 400)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle(self) -> None:
                # A killed worker leaves a held request on a dead socket.
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler

    def record(self, headers: dict[str, str], body: bytes) -> bool:
        """Verify and count one request; hold it if it is the ``hold_at``-th."""
        lowered = {k.lower(): v for k, v in headers.items()}
        webhook_id = lowered.get("webhook-id", "")
        try:
            if self.webhook is None:
                raise WebhookVerificationError("no secret yet")
            payload = self.webhook.verify(body, lowered)
            if payload.get("id") != webhook_id:
                raise WebhookVerificationError("envelope id differs from webhook-id")
        except (WebhookVerificationError, ValueError) as exc:
            with self._lock:
                self.failures.append(f"{webhook_id}: {exc}")
            return False
        with self._lock:
            self.received += 1
            self.counts[webhook_id] += 1
            self.bodies[webhook_id].add(hashlib.sha256(body).hexdigest())
            hold = self.received == self.hold_at
        if hold:
            self.holding.set()
            self._release.wait(timeout=DELIVER_TIMEOUT)
        return True

    def release(self) -> None:
        self._release.set()

    def unique(self) -> int:
        with self._lock:
            return len(self.counts)

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)

    def __enter__(self) -> "Receiver":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Database set-up and checks (each in its own event loop: Alembic and tests run sync here)
# --------------------------------------------------------------------------------------------


def _db(db_url: str, work: Callable[[Any], Any]) -> Any:
    """Run ``await work(sessionmaker)`` on a short-lived engine."""

    async def run() -> Any:
        engine = create_engine(db_url, pool_size=2)
        try:
            return await work(create_sessionmaker(engine))
        finally:
            await engine.dispose()

    return asyncio.run(run())


def setup_integration(db_url: str, receiver: Receiver) -> uuid.UUID:
    """An integration with one endpoint (all kinds) at ``receiver``, which learns its secret."""

    async def work(sessionmaker: Any) -> tuple[uuid.UUID, str]:
        async with sessionmaker() as session, session.begin():
            created = await integrations.create(session, "Worker processes")
            integration = created.integration
            await events.create_endpoint(
                session,
                integration.id,
                make_settings(db_url),  # sandbox: loopback is allowed
                url=receiver.url,
                event_kinds=None,
                description=None,
                enabled=True,
            )
            return integration.id, integration.webhook_secret

    integration_id, secret = _db(db_url, work)
    receiver.webhook = Webhook(secret)
    return integration_id


def emit_events(
    db_url: str, integration_id: uuid.UUID, count: int, per_tx: int, pause: float = 0.0
) -> set[str]:
    """Emit ``count`` deal.status events in transactions of ``per_tx``, ``pause`` seconds apart;
    their ids."""

    async def work(sessionmaker: Any) -> set[str]:
        ids: set[str] = set()
        for start in range(0, count, per_tx):
            if start:
                await asyncio.sleep(pause)
            async with sessionmaker() as session, session.begin():
                for _ in range(min(per_tx, count - start)):
                    data = deal_status(uuid.uuid4(), "Published", clock.now())
                    event = await events.emit(session, integration_id, EventKind.DEAL_STATUS, data)
                    ids.add(str(event.id))
        return ids

    return _db(db_url, work)


def delivery_states(db_url: str) -> list[tuple[str, str, int, datetime]]:
    """(event id, status, attempts, next_attempt_at) of every delivery."""

    async def work(sessionmaker: Any) -> list[tuple[str, str, int, datetime]]:
        async with sessionmaker() as session:
            rows = await session.execute(
                select(Event.id, Delivery.status, Delivery.attempts, Delivery.next_attempt_at).join(
                    Event, Event.seq == Delivery.event_seq
                )
            )
            return [(str(r[0]), r[1], r[2], r[3]) for r in rows]

    return _db(db_url, work)


def attempt_count(db_url: str) -> int:
    async def work(sessionmaker: Any) -> int:
        async with sessionmaker() as session:
            return int(await session.scalar(select(func.count()).select_from(DeliveryAttempt)) or 0)

    return _db(db_url, work)


def wait_all_delivered(receiver: Receiver, db_url: str) -> None:
    """Until every event has reached the receiver and every delivery is recorded as ended.

    The receiver alone is not enough: after a kill, the events of the killed batch have already
    arrived once, and their re-send comes only when the lease ends."""
    wait_until(lambda: receiver.unique() == EVENTS, DELIVER_TIMEOUT, "every event to arrive")
    wait_until(
        lambda: all(s[1] != "pending" for s in delivery_states(db_url)),
        DELIVER_TIMEOUT,
        "every delivery to be recorded",
        interval=0.25,
    )


def duplicates(counts: Counter[str]) -> int:
    """Requests beyond the first per webhook-id."""
    return sum(counts.values()) - len(counts)


def assert_all_delivered(receiver: Receiver, ids: set[str], db_url: str) -> Counter[str]:
    """Every event reached the receiver with a valid signature and the same bytes on every
    attempt, and every delivery ended ``succeeded`` after one recorded attempt."""
    counts = receiver.snapshot()
    assert receiver.failures == []
    assert set(counts) == ids
    assert all(len(receiver.bodies[i]) == 1 for i in ids), "a re-send changed the body"
    states = delivery_states(db_url)
    assert len(states) == len(ids)
    assert Counter(s[1] for s in states) == {"succeeded": len(ids)}
    return counts


# --------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------


def test_sigkill_mid_batch_loses_nothing(
    pg_url: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    first = second = None
    with Receiver(hold_at=EVENTS * 2 // 5) as receiver:
        integration_id = setup_integration(pg_url, receiver)
        ids = emit_events(pg_url, integration_id, EVENTS, per_tx=250)
        try:
            first = Worker(pg_url, tmp_path, lease=LEASE_SECONDS)
            # The 400th request is held unanswered, so its batch is certainly in flight.
            assert receiver.holding.wait(DELIVER_TIMEOUT), first.output()
            first.process.send_signal(signal.SIGKILL)
            assert first.wait() == -signal.SIGKILL
            seen_at_kill = receiver.snapshot()
            receiver.release()
            assert 0 < len(seen_at_kill) < EVENTS

            second = Worker(pg_url, tmp_path, lease=LEASE_SECONDS)
            wait_all_delivered(receiver, pg_url)
            second.process.send_signal(signal.SIGTERM)
            assert second.wait() == 0, second.output()
        finally:
            for w in (first, second):
                if w is not None:
                    w.close()
        counts = assert_all_delivered(receiver, ids, pg_url)
    dup = duplicates(counts)
    record_property("duplicates", dup)
    log.warning("SIGKILL mid-batch: %d duplicate deliveries (batch size %d)", dup, BATCH)
    # Only the batch in flight is sent again: at least the held one, at most one batch.
    assert 1 <= dup <= BATCH
    assert max(counts.values()) == 2
    # Every re-sent event had been seen before the kill, and the new worker sent all the rest.
    assert {i for i, n in counts.items() if n > 1} <= set(seen_at_kill)
    assert second.sent() == EVENTS - len(seen_at_kill) + dup
    # The killed worker's attempts were never recorded: one attempt row per delivery.
    assert attempt_count(pg_url) == EVENTS
    assert {s[2] for s in delivery_states(pg_url)} == {1}


def test_two_workers_share_the_queue_without_duplicates(
    pg_url: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    workers: list[Worker] = []
    with Receiver() as receiver:
        integration_id = setup_integration(pg_url, receiver)
        try:
            workers = [Worker(pg_url, tmp_path, lease=LEASE_SECONDS) for _ in range(2)]
            for w in workers:
                w.wait_ready()
            ids = emit_events(pg_url, integration_id, EVENTS, per_tx=250)
            wait_all_delivered(receiver, pg_url)
            for w in workers:
                w.process.send_signal(signal.SIGTERM)
            for w in workers:
                assert w.wait() == 0, w.output()
        finally:
            for w in workers:
                w.close()
        counts = assert_all_delivered(receiver, ids, pg_url)
    sent = [w.sent() for w in workers]
    record_property("sent_per_worker", sent)
    record_property("duplicates", duplicates(counts))
    log.warning("two workers: sent %s, %d duplicate deliveries", sent, duplicates(counts))
    assert duplicates(counts) == 0
    assert sum(sent) == EVENTS
    assert all(n > 0 for n in sent), f"one worker did all the work: {sent}"
    assert attempt_count(pg_url) == EVENTS


def test_sigterm_mid_batch_finishes_the_batch_and_exits_0(
    pg_url: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    first = second = None
    hold_at = 2 * BATCH + 20  # inside the third batch
    with Receiver(hold_at=hold_at) as receiver:
        integration_id = setup_integration(pg_url, receiver)
        ids = emit_events(pg_url, integration_id, EVENTS, per_tx=250)
        try:
            # A lease long enough that the held request (a second or so) is within the send
            # timeout, which is half the lease: the batch in flight then completes normally.
            first = Worker(pg_url, tmp_path, lease=20)
            assert receiver.holding.wait(DELIVER_TIMEOUT), first.output()
            first.process.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            # The batch in flight is finished first: still running while a request is held.
            assert first.process.poll() is None, first.output()
            receiver.release()
            started = time.monotonic()
            assert first.wait() == 0, first.output()
            exit_seconds = time.monotonic() - started
            seen = receiver.snapshot()

            # Everything sent is recorded, and nothing is left claimed (pushed past now).
            now = clock.now()
            states = delivery_states(pg_url)
            claimed = [s for s in states if s[1] == "pending" and s[3] > now]
            assert claimed == []
            succeeded = {s[0] for s in states if s[1] == "succeeded"}
            assert succeeded == set(seen)
            assert first.sent() == len(seen) == 3 * BATCH

            second = Worker(pg_url, tmp_path, lease=LEASE_SECONDS)
            wait_all_delivered(receiver, pg_url)
            second.process.send_signal(signal.SIGTERM)
            assert second.wait() == 0, second.output()
        finally:
            for w in (first, second):
                if w is not None:
                    w.close()
        counts = assert_all_delivered(receiver, ids, pg_url)
    record_property("exit_seconds", round(exit_seconds, 2))
    log.warning("SIGTERM mid-batch: exited %.2f s after the batch's last answer", exit_seconds)
    assert duplicates(counts) == 0
    assert exit_seconds < 5
    assert attempt_count(pg_url) == EVENTS


def test_a_trickle_of_events_is_sent_once_and_recorded_by_the_next_claim_or_at_sigterm(
    pg_url: str, tmp_path: Path
) -> None:
    """Events committed one by one while the worker runs: each is its own short batch, whose
    record waits (``events.tasks.LINGER``) for the claim of the next. Every one is sent once and
    recorded, the last held batch too when SIGTERM stops the worker right after it."""
    trickle = 40
    worker = None
    with Receiver() as receiver:
        integration_id = setup_integration(pg_url, receiver)
        try:
            worker = Worker(pg_url, tmp_path, lease=LEASE_SECONDS)
            worker.wait_ready()
            # A transaction each, 10 ms apart: each sent alone, the next within LINGER.
            ids = emit_events(pg_url, integration_id, trickle, per_tx=1, pause=0.01)
            wait_until(
                lambda: len(receiver.snapshot()) == trickle, DELIVER_TIMEOUT, "every event sent"
            )
            worker.process.send_signal(signal.SIGTERM)
            assert worker.wait() == 0, worker.output()
        finally:
            if worker is not None:
                worker.close()
        counts = assert_all_delivered(receiver, ids, pg_url)
    assert duplicates(counts) == 0
    assert worker.sent() == trickle
    assert attempt_count(pg_url) == trickle
