"""Benchmark of webhook delivery: one real ``dealbroker worker`` process, a real PostgreSQL and a
loopback receiver process, over HTTP/1.1 on 127.0.0.1.

It measures, on a fresh database:

(a) throughput: ``--events`` deliveries are queued first (endpoint disabled), then the endpoint
    is enabled and the worker woken; deliveries/s = events / (last arrival - enabling commit);
(b) latency: events emitted at a fixed ``--rate`` in small transactions while the worker runs;
    latency = arrival time at the receiver - commit time in this process (both ``time.time()``);
(c) the baseline: a bare loop of httpx POSTs of the same payload, ``--batch-size`` at a time
    with ``asyncio.gather``, to the same receiver, from this process pinned to the worker's core.

The worker is pinned to core 0 and the receiver (asyncio, raw HTTP/1.1, answers 200 at once) to
core 1 with ``taskset``; PostgreSQL runs on both. Results go to ``bench/results/`` as JSON. When a
target is missed (or with ``--profile``) one more throughput round runs under py-spy and the
functions that dominate the worker's CPU are printed. See ``bench/README.md``.
"""

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
HOST = "127.0.0.1"
WORKER_CORE, RECEIVER_CORE = 0, 1
CLK_TCK = os.sysconf("SC_CLK_TCK")
HOOK_PATH = "/hooks"
# Busy time of other processes (share of one core) above which a phase is flagged as noisy.
NOISY_OTHER = 0.25

# name -> (comparison, threshold)
TARGETS: dict[str, tuple[str, float]] = {
    "worker deliveries/s": (">=", 1000.0),
    "worker / bare loop": (">=", 0.5),
    "latency p50 ms": ("<", 50.0),
    "latency p99 ms": ("<", 250.0),
}


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``--quick`` shrinks the run to well under a minute."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 1 round, fewer events")
    p.add_argument("--events", type=int, help="queued events per throughput round (10000)")
    p.add_argument("--rounds", type=int, help="throughput and bare-loop rounds (3); medians")
    p.add_argument("--batch-size", type=int, default=200, help="worker batch = bare concurrency")
    p.add_argument("--rate", type=float, default=200.0, help="events/s in the latency phase")
    p.add_argument("--per-tx", type=int, default=1, help="events per transaction (latency)")
    p.add_argument("--latency-seconds", type=float, help="measured latency phase (10 s)")
    p.add_argument("--warmup", type=float, default=1.0, help="unmeasured start of latency phase")
    p.add_argument(
        "--pg-url",
        default=os.environ.get(
            "DEALBROKER_BENCH_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432"
        ),
        help="PostgreSQL server (SQLAlchemy URL without a database)",
    )
    p.add_argument("--db-name", default="dealbroker_bench_webhooks")
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    p.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help="py-spy the worker under one extra throughput round: when a target is missed (auto)",
    )
    p.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.events is None:
        args.events = 2_000 if args.quick else 10_000
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.latency_seconds is None:
        args.latency_seconds = 4.0 if args.quick else 10.0
    return args


# --------------------------------------------------------------------------------------------
# The receiver: its own process, raw HTTP/1.1 on asyncio, answers 200 at once
# --------------------------------------------------------------------------------------------

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class ReceiverState:
    """Arrival time of every webhook request, in order; ``/_stats``, ``/_dump`` and ``/_reset``
    let the bench read and clear them between phases."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[str, float]] = []
        self.unique: set[str] = set()
        self.connections = 0  # opened since the last reset: shows connection churn


class ReceiverProtocol(asyncio.Protocol):
    """Keep-alive HTTP/1.1 with Content-Length bodies, pipelining-safe; nothing more."""

    def __init__(self, state: ReceiverState) -> None:
        self.state = state
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.state.connections += 1
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).split(b"\r\n")
            length = 0
            webhook_id = None
            for line in head[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"webhook-id":
                    webhook_id = value.strip().decode()
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            del self.buffer[:total]
            assert self.transport is not None
            if webhook_id is not None:
                self.state.arrivals.append((webhook_id, time.time()))
                self.state.unique.add(webhook_id)
                self.transport.write(OK)
            else:
                self.transport.write(self._control(head[0].split(b" ")[1]))

    def _control(self, path: bytes) -> bytes:
        if path == b"/_stats":
            stats = {
                "requests": len(self.state.arrivals),
                "unique": len(self.state.unique),
                "connections": self.state.connections,
            }
            body = json.dumps(stats).encode()
        elif path == b"/_dump":
            body = json.dumps(self.state.arrivals).encode()
        elif path == b"/_reset":
            self.state.arrivals.clear()
            self.state.unique.clear()
            self.state.connections = 0
            body = b"{}"
        else:
            return b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
        return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def run_receiver(port: int) -> None:
    """Serve until SIGTERM; prints ``ready <port>`` once listening."""
    with contextlib.suppress(ImportError):
        import uvloop  # the receiver must not be the bottleneck

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())

    async def serve() -> None:
        state = ReceiverState()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: ReceiverProtocol(state), HOST, port, backlog=4096, reuse_address=True
        )
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
        await stop.wait()
        server.close()

    asyncio.run(serve())


# --------------------------------------------------------------------------------------------
# Processes, CPU accounting
# --------------------------------------------------------------------------------------------


def can_pin(args: argparse.Namespace) -> bool:
    return not args.no_pin and shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2


def proc_cpu(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds, from /proc/<pid>/stat (None if unreadable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy() -> float | None:
    """Busy core-seconds of the whole machine since boot (every tenant), from /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in first[1:8])
    return (user + nice + system + irq + softirq) / CLK_TCK


class Receiver:
    """The receiver subprocess, and a small client for its control paths."""

    def __init__(self, pin: bool) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--receiver", "--port", "0"]
        if pin:
            cmd = ["taskset", "-c", str(RECEIVER_CORE), *cmd]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError(f"receiver did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://{HOST}:{self.port}{HOOK_PATH}"
        self._control: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def _get(self, path: str) -> Any:
        """GET a control path on one kept-alive raw connection (cheap enough to poll often)."""
        if self._control is None:
            self._control = await asyncio.open_connection(HOST, self.port)
        reader, writer = self._control
        writer.write(f"GET {path} HTTP/1.1\r\nhost: {HOST}\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"receiver: {head[:40]!r} for {path}")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        return json.loads(await reader.readexactly(length))

    async def close_control(self) -> None:
        if self._control is not None:
            self._control[1].close()
            self._control = None

    async def stats(self) -> dict[str, int]:
        return await self._get("/_stats")  # type: ignore[no-any-return]

    async def dump(self) -> list[tuple[str, float]]:
        return [(i, t) for i, t in await self._get("/_dump")]

    async def reset(self) -> None:
        await self._get("/_reset")

    async def wait_for(self, unique: int, timeout: float) -> bool:
        """Until ``unique`` distinct webhook-ids have arrived; False on timeout."""
        deadline = time.monotonic() + timeout
        while (await self.stats())["unique"] < unique:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()


class WorkerProcess:
    """``python -m dealbroker worker``, pinned to core 0, its stderr in a log file."""

    def __init__(self, db_url: str, batch_size: int, log_path: Path, pin: bool) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
        env.update(
            {
                "DEALBROKER_DATABASE_URL": db_url,
                "DEALBROKER_WORKER_BATCH_SIZE": str(batch_size),
                "DEALBROKER_LOG_LEVEL": "warning",
            }
        )
        cmd = [sys.executable, "-m", "dealbroker", "worker"]
        if pin:
            cmd = ["taskset", "-c", str(WORKER_CORE), *cmd]
        self.log_path = log_path
        self._log = log_path.open("w")
        self._cwd = tempfile.TemporaryDirectory()
        self.process = subprocess.Popen(
            cmd, env=env, cwd=self._cwd.name, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    async def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "running jobs" not in self.log_path.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("worker did not start:\n" + self.log_path.read_text()[-2000:])
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # its LISTEN connection opens just after the banner

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        self._cwd.cleanup()
        return self.process.returncode


@dataclass
class Cpu:
    """CPU seconds of the processes involved over one measured window."""

    wall_s: float
    worker_s: float | None
    receiver_s: float | None
    bench_s: float
    postgres_s: float | None
    machine_busy_s: float | None

    def shares(self) -> dict[str, float | None]:
        def share(value: float | None) -> float | None:
            return None if value is None or self.wall_s <= 0 else value / self.wall_s

        return {
            "worker": share(self.worker_s),
            "receiver": share(self.receiver_s),
            "bench": share(self.bench_s),
            "postgres": share(self.postgres_s),
            "machine": share(self.machine_busy_s),
            "other": share(self.other_s),
        }

    @property
    def other_s(self) -> float | None:
        """Busy time of everything else on the machine (other tenants, the kernel)."""
        ours = [self.worker_s, self.receiver_s, self.postgres_s]
        if self.machine_busy_s is None or None in ours:
            return None
        return self.machine_busy_s - self.bench_s - sum(ours)  # type: ignore[arg-type]


class CpuMeter:
    """Snapshots of the worker, receiver, this process and the database's backends."""

    def __init__(self, admin: Any, db_name: str, worker_pid: int, receiver_pid: int) -> None:
        self.admin = admin
        self.db_name = db_name
        self.worker_pid = worker_pid
        self.receiver_pid = receiver_pid

    async def snapshot(self) -> dict[str, Any]:
        rows = await self.admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            self.db_name,
        )
        return {
            "wall": time.perf_counter(),
            "worker": proc_cpu(self.worker_pid),
            "receiver": proc_cpu(self.receiver_pid),
            "bench": time.process_time(),
            "pg": {r["pid"]: c for r in rows if (c := proc_cpu(r["pid"])) is not None},
            "machine": machine_busy(),
        }

    @staticmethod
    def delta(a: dict[str, Any], b: dict[str, Any]) -> Cpu:
        def diff(key: str) -> float | None:
            return None if a[key] is None or b[key] is None else b[key] - a[key]

        pg = sum(c - a["pg"].get(p, 0.0) for p, c in b["pg"].items()) if b["pg"] else None
        return Cpu(
            b["wall"] - a["wall"],
            diff("worker"),
            diff("receiver"),
            b["bench"] - a["bench"],
            pg,
            diff("machine"),
        )


# --------------------------------------------------------------------------------------------
# Database: create, migrate, integration and endpoint, emitting events
# --------------------------------------------------------------------------------------------


def pg_dsn(sqlalchemy_url: str) -> str:
    """asyncpg's DSN for a SQLAlchemy ``postgresql+asyncpg://`` URL."""
    return sqlalchemy_url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def recreate_database(server_url: str, name: str, create: bool = True) -> None:
    import asyncpg

    conn = await asyncpg.connect(pg_dsn(f"{server_url}/postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


@dataclass
class Setup:
    integration_id: uuid.UUID
    endpoint_id: uuid.UUID
    secret: str


class Database:
    """The bench database through the service's own code (engine, ``emit``)."""

    def __init__(self, db_url: str, pool_size: int = 8) -> None:
        from dealbroker.core.db import create_engine, create_sessionmaker

        self.engine = create_engine(db_url, pool_size=pool_size)
        self.sessionmaker = create_sessionmaker(engine=self.engine)

    async def setup(self, receiver_url: str) -> Setup:
        """An integration and a disabled endpoint at the receiver (sandbox: loopback allowed)."""
        from dealbroker.core.settings import Settings
        from dealbroker.events import service as events
        from dealbroker.integrations import service as integrations

        settings = Settings(environment="sandbox", embedded_worker="off")  # type: ignore[arg-type]
        async with self.sessionmaker() as session, session.begin():
            created = await integrations.create(session, "Webhook bench")
            i = created.integration
            endpoint = await events.create_endpoint(
                session,
                i.id,
                settings,
                url=receiver_url,
                event_kinds=None,
                description="bench receiver",
                enabled=False,
            )
        return Setup(i.id, endpoint.id, i.webhook_secret)

    async def set_enabled(self, endpoint_id: uuid.UUID, enabled: bool) -> None:
        """Enable or disable the endpoint; enabling also wakes the worker (NOTIFY)."""
        from sqlalchemy import text

        from dealbroker.core import wakeup
        from dealbroker.events.models import WebhookEndpoint

        async with self.sessionmaker() as session, session.begin():
            endpoint = await session.get(WebhookEndpoint, endpoint_id)
            assert endpoint is not None
            endpoint.enabled = enabled
            endpoint.disabled_reason = None if enabled else "bench: queueing"
            if enabled:
                await session.execute(text(f"NOTIFY {wakeup.CHANNEL}"))

    async def emit(self, setup: Setup, count: int) -> list[tuple[str, float]]:
        """Emit ``count`` deal.status events in one transaction; (event id, commit time)."""
        from dealbroker.core import clock
        from dealbroker.events import service as events
        from dealbroker.events.envelope import EventKind, deal_status

        ids = []
        async with self.sessionmaker() as session:
            async with session.begin():
                for _ in range(count):
                    data = deal_status(uuid.uuid4(), "Published", clock.now())
                    event = await events.emit(
                        session,
                        setup.integration_id,
                        EventKind.DEAL_STATUS,
                        data,
                        endpoint_ids=[setup.endpoint_id],
                    )
                    ids.append(str(event.id))
            committed = time.time()
        return [(i, committed) for i in ids]

    async def queue(self, setup: Setup, count: int, per_tx: int = 500, tasks: int = 4) -> None:
        """Emit ``count`` events in transactions of ``per_tx`` from ``tasks`` sessions."""
        chunks = [min(per_tx, count - s) for s in range(0, count, per_tx)]
        lock = asyncio.Lock()

        async def run() -> None:
            while True:
                async with lock:
                    if not chunks:
                        return
                    n = chunks.pop()
                await self.emit(setup, n)

        await asyncio.gather(*(run() for _ in range(tasks)))

    async def pending(self) -> int:
        from sqlalchemy import func, select

        from dealbroker.events.models import Delivery

        async with self.sessionmaker() as session:
            return int(
                await session.scalar(
                    select(func.count()).select_from(Delivery).where(Delivery.status == "pending")
                )
                or 0
            )

    async def attempt_starts(self, event_ids: set[str]) -> dict[str, float]:
        """When the worker started the first attempt of each event (its ``attempted_at``)."""
        from sqlalchemy import func, select

        from dealbroker.events.models import DeliveryAttempt

        async with self.sessionmaker() as session:
            rows = await session.execute(
                select(DeliveryAttempt.event_id, func.min(DeliveryAttempt.attempted_at))
                .where(DeliveryAttempt.event_id.in_([uuid.UUID(i) for i in event_ids]))
                .group_by(DeliveryAttempt.event_id)
            )
            return {str(event_id): at.timestamp() for event_id, at in rows}

    async def sample_payload(self) -> str:
        from sqlalchemy import select

        from dealbroker.events.models import Event

        async with self.sessionmaker() as session:
            payload = await session.scalar(select(Event.payload).limit(1))
        assert payload is not None
        return payload

    async def wait_recorded(self, timeout: float = 30.0) -> int:
        """Until no delivery is pending (the worker recorded its last batch); what is left."""
        deadline = time.monotonic() + timeout
        while (left := await self.pending()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return left


# --------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (NaN when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def duplicates(arrivals: Sequence[tuple[str, float]]) -> int:
    return len(arrivals) - len({i for i, _ in arrivals})


@dataclass
class ThroughputRound:
    events: int
    seconds: float
    deliveries_per_s: float
    first_to_last_per_s: float
    duplicates: int
    cpu: dict[str, float | None]
    left_pending: int
    worker_cpu_ms_per_delivery: float | None
    postgres_cpu_ms_per_delivery: float | None
    new_connections: int


async def queue_round(db: Database, setup: Setup, receiver: Receiver, events: int) -> None:
    """Queue ``events`` deliveries with the endpoint disabled, so the worker leaves them."""
    await db.set_enabled(setup.endpoint_id, False)
    await receiver.reset()
    await db.queue(setup, events)


async def throughput_round(
    db: Database, setup: Setup, receiver: Receiver, meter: CpuMeter, events: int
) -> ThroughputRound:
    """Queue ``events``, then enable the endpoint (waking the worker) and time every arrival."""
    await queue_round(db, setup, receiver, events)
    return await deliver_round(db, setup, receiver, meter, events)


async def deliver_round(
    db: Database, setup: Setup, receiver: Receiver, meter: CpuMeter, events: int
) -> ThroughputRound:
    """Enable the endpoint and wake the worker; time until all ``events`` have arrived."""
    before = await meter.snapshot()
    await db.set_enabled(setup.endpoint_id, True)
    t0 = time.time()
    if not await receiver.wait_for(events, timeout=max(60.0, events / 50)):
        raise RuntimeError(f"only {(await receiver.stats())['unique']} of {events} arrived")
    after = await meter.snapshot()
    arrivals = await receiver.dump()
    connections = (await receiver.stats())["connections"]  # our control connection predates reset
    left = await db.wait_recorded()
    times = sorted(t for _, t in arrivals)
    seconds = times[-1] - t0
    span = times[-1] - times[0]
    cpu = CpuMeter.delta(before, after)

    def per_delivery(value: float | None) -> float | None:
        return None if value is None else value * 1000 / events

    return ThroughputRound(
        events,
        seconds,
        events / seconds,
        (events - 1) / span if span > 0 else math.nan,
        duplicates(arrivals),
        cpu.shares(),
        left,
        per_delivery(cpu.worker_s),
        per_delivery(cpu.postgres_s),
        connections,
    )


@dataclass
class LatencyResult:
    rate: float
    per_tx: int
    seconds: float
    measured_events: int
    achieved_rate: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    late_tx: int
    duplicates: int
    cpu: dict[str, float | None]
    # Where the time goes, from the worker's attempt rows: commit -> start of the attempt
    # (waiting to be claimed), start of the attempt -> arrival (signing and HTTP).
    queued_p50_ms: float
    queued_p99_ms: float
    sending_p50_ms: float
    sending_p99_ms: float


async def latency_phase(
    db: Database,
    setup: Setup,
    receiver: Receiver,
    meter: CpuMeter,
    rate: float,
    per_tx: int,
    seconds: float,
    warmup: float,
) -> LatencyResult:
    """Emit at ``rate`` events/s in transactions of ``per_tx``, each started on schedule in its
    own task; latency per event = first arrival - commit time."""
    await receiver.reset()
    tx_rate = rate / per_tx
    total_tx = math.ceil((warmup + seconds) * tx_rate)
    commits: dict[str, float] = {}
    measured: set[str] = set()
    late = 0
    limit = asyncio.Semaphore(16)

    async def one(k: int) -> None:
        async with limit:
            for event_id, committed in await db.emit(setup, per_tx):
                commits[event_id] = committed
                if k >= warmup * tx_rate:
                    measured.add(event_id)

    before = await meter.snapshot()
    start = time.perf_counter()
    tasks = []
    for k in range(total_tx):
        delay = start + k / tx_rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.005:
            late += 1
        tasks.append(asyncio.create_task(one(k)))
    await asyncio.gather(*tasks)
    emitted_for = time.perf_counter() - start
    if not await receiver.wait_for(len(commits), timeout=60.0):
        raise RuntimeError("latency phase: not every event arrived")
    after = await meter.snapshot()
    arrivals = await receiver.dump()
    first: dict[str, float] = {}
    for event_id, at in arrivals:
        first.setdefault(event_id, at)
    latencies = sorted((first[i] - commits[i]) * 1000 for i in measured)
    await db.wait_recorded()
    started = await db.attempt_starts(measured)
    queued = sorted((started[i] - commits[i]) * 1000 for i in measured if i in started)
    sending = sorted((first[i] - started[i]) * 1000 for i in measured if i in started)
    return LatencyResult(
        rate,
        per_tx,
        seconds,
        len(latencies),
        len(commits) / emitted_for,
        percentile(latencies, 50),
        percentile(latencies, 90),
        percentile(latencies, 99),
        latencies[-1],
        late,
        duplicates(arrivals),
        CpuMeter.delta(before, after).shares(),
        percentile(queued, 50),
        percentile(queued, 99),
        percentile(sending, 50),
        percentile(sending, 99),
    )


@dataclass
class BareRound:
    client: str
    requests: int
    seconds: float
    per_s: float
    cpu_ms_per_post: float
    new_connections: int


async def bare_round(
    receiver: Receiver, payload: str, secret: str, n: int, batch: int, client_kind: str
) -> BareRound:
    """``n`` POSTs of ``payload``, ``batch`` at a time with asyncio.gather, signed headers built
    beforehand. ``client_kind`` "plain": httpx.AsyncClient keeping every connection alive;
    "worker": the worker's own client factory (``webhook_client``) with the worker's limits."""
    import httpx

    from dealbroker.events.egress import webhook_client
    from dealbroker.events.signing import signed_headers

    await receiver.reset()
    now = datetime.now(UTC)
    headers = [signed_headers([secret], str(uuid.uuid4()), now, payload) for _ in range(n)]
    body = payload.encode()
    if client_kind == "plain":
        limits = httpx.Limits(max_connections=batch, max_keepalive_connections=batch)
        client = httpx.AsyncClient(limits=limits, timeout=15.0, trust_env=False)
    else:
        client = webhook_client(allow_private=True, max_connections=batch)
    async with client:
        cpu = time.process_time()
        start = time.perf_counter()
        for i in range(0, n, batch):
            responses = await asyncio.gather(
                *(
                    client.post(receiver.url, content=body, headers=h)
                    for h in headers[i : i + batch]
                )
            )
            if any(r.status_code != 200 for r in responses):
                raise RuntimeError("bare loop: the receiver did not answer 200")
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
    connections = (await receiver.stats())["connections"]
    return BareRound(client_kind, n, seconds, n / seconds, cpu * 1000 / n, connections)


@contextlib.contextmanager
def pinned(core: int | None) -> Any:
    """Run this process on ``core`` for the block (no-op when None)."""
    if core is None or not hasattr(os, "sched_getaffinity"):
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


# --------------------------------------------------------------------------------------------
# Profiling the worker with py-spy
# --------------------------------------------------------------------------------------------

LAYERS = ("dealbroker", "sqlalchemy", "asyncpg", "httpx", "httpcore", "h11", "anyio", "asyncio")


def py_spy() -> str | None:
    """py-spy next to this interpreter (the venv) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _frame(frame: str) -> tuple[str, str]:
    """``name (pkg/module.py:line)`` -> (``name (pkg/module.py)``, layer)."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    top = path.split("/", 1)[0]
    return f"{name} ({path})", top if top in LAYERS else "other (stdlib, C)"


def summarize_profile(raw: Path, top: int = 15) -> dict[str, Any]:
    """Shares of py-spy's raw (collapsed) samples: by the leaf frame's layer, by leaf function
    (self) and by function anywhere on the stack (inclusive)."""
    by_layer: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    layers_on_stack: Counter[str] = Counter()
    importing = 0  # samples inside the import machinery: a failing import on the hot path
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        total += count
        importing += count if "<frozen importlib" in stack else 0
        leaf, layer = frames[-1]
        by_layer[layer] += count
        self_time[leaf] += count
        for name in {n for n, lay in frames if lay == "dealbroker"}:
            inclusive[name] += count
        on_stack = {lay for _, lay in frames}
        http = on_stack & {"httpx", "httpcore", "h11", "anyio"}
        db = on_stack & {"sqlalchemy", "asyncpg"}
        layers_on_stack["HTTP client (httpx, httpcore, h11, anyio)"] += count if http else 0
        layers_on_stack["database (sqlalchemy, asyncpg)"] += count if db and not http else 0
        layers_on_stack["rest (event loop, signing, ...)"] += count if not http and not db else 0

    def shares(counter: Counter[str], n: int) -> list[tuple[str, float]]:
        return [(k, round(v / total, 4)) for k, v in counter.most_common(n)] if total else []

    return {
        "samples": total,
        "self_by_layer": shares(by_layer, len(LAYERS) + 1),
        "self_by_function": shares(self_time, top),
        "dealbroker_inclusive": shares(inclusive, top),
        "stack_contains": shares(layers_on_stack, 3),
        "importlib_share": round(importing / total, 4) if total else 0.0,
    }


async def profile_round(
    db: Database,
    setup: Setup,
    receiver: Receiver,
    meter: CpuMeter,
    worker_pid: int,
    events: int,
    out: Path,
    rate: int = 200,
) -> tuple[ThroughputRound, dict[str, Any]] | None:
    """One more throughput round with py-spy recording the worker (CPU samples, not idle)."""
    spy = py_spy()
    if spy is None:
        print("  py-spy not found: .venv/bin/pip install py-spy", flush=True)
        return None
    cmd = [spy, "record", "--pid", str(worker_pid), "--rate", str(rate), "--nonblocking"]
    cmd += ["--format", "raw", "--output", str(out)]
    await queue_round(db, setup, receiver, events)
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    await asyncio.sleep(1.0)  # attach before the load starts
    result = await deliver_round(db, setup, receiver, meter, events)
    proc.send_signal(signal.SIGINT)
    _out, err = await proc.communicate()
    if not out.exists():
        print(f"  py-spy failed: {err.decode(errors='replace')[-300:]}", flush=True)
        return None
    prof = summarize_profile(out)
    prof["worker_cpu_share"] = result.cpu["worker"]
    prof["deliveries_per_s"] = result.deliveries_per_s
    return result, prof


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def judge(name: str, value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    op, threshold = TARGETS[name]
    ok = value >= threshold if op == ">=" else value < threshold
    return "met" if ok else "MISSED"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def print_report(summary: dict[str, Any]) -> None:
    rows = [
        ("worker deliveries/s", summary["worker_per_s"], "{:.0f}"),
        ("bare loop POST/s (httpx, keep-alive)", summary["bare_plain_per_s"], "{:.0f}"),
        ("bare loop POST/s (worker's client)", summary["bare_worker_client_per_s"], "{:.0f}"),
        ("worker / bare loop", summary["ratio"], "{:.2f}"),
        ("worker CPU ms per delivery", summary["worker_cpu_ms_per_delivery"], "{:.2f}"),
        ("postgres CPU ms per delivery", summary["postgres_cpu_ms_per_delivery"], "{:.2f}"),
        ("bare loop CPU ms per POST (cheaper client)", summary["bare_cpu_ms_per_post"], "{:.2f}"),
        ("worker / bare loop, by CPU per request", summary["ratio_by_cpu"], "{:.2f}"),
        ("latency p50 ms", summary["latency"]["p50_ms"], "{:.1f}"),
        ("latency p99 ms", summary["latency"]["p99_ms"], "{:.1f}"),
        ("latency max ms", summary["latency"]["max_ms"], "{:.1f}"),
    ]
    print()
    print(f"{'measure':42} {'value':>9} {'target':>9}  result")
    for name, value, spec in rows:
        target = TARGETS.get(name)
        target_text = f"{target[0]} {target[1]:g}" if target else ""
        result = judge(name, value) if target else ""
        shown = "-" if value is None else spec.format(value)
        print(f"{name:42} {shown:>9} {target_text:>9}  {result}")
    lat = summary["latency"]
    print(
        f"\nlatency at {lat['rate']:g} events/s offered ({lat['achieved_rate']:.0f} achieved, "
        f"{lat['rate'] / summary['worker_per_s']:.0%} of the measured throughput), "
        f"{lat['per_tx']} per transaction, {lat['measured_events']} events measured, "
        f"{lat['late_tx']} transactions started late, p90 {lat['p90_ms']:.1f} ms"
    )
    print(
        f"latency breakdown: commit -> attempt start p50 {lat['queued_p50_ms']:.1f} ms, "
        f"p99 {lat['queued_p99_ms']:.1f} ms; attempt start -> arrival p50 "
        f"{lat['sending_p50_ms']:.1f} ms, p99 {lat['sending_p99_ms']:.1f} ms"
    )
    print(
        "new TCP connections per 1000 requests: "
        + ", ".join(f"{k} {v:.0f}" for k, v in summary["connections_per_1000"].items())
    )
    print("duplicates: " + ", ".join(f"{k} {v}" for k, v in summary["duplicates"].items()))
    print("\nCPU, share of one core over the measured window:")
    columns = ("worker", "receiver", "bench", "postgres", "other", "machine")
    print(f"  {'phase':22}" + "".join(f" {c:>9}" for c in columns))
    for phase, shares in summary["cpu"].items():
        print(f"  {phase:22}" + "".join(f" {_pct(shares[c]):>9}" for c in columns))
    noisy = summary["noisy_phases"]
    if noisy:
        print(
            f"  warning: other load above {NOISY_OTHER:.0%} of a core during {', '.join(noisy)}: "
            "another tenant shared our cores, so these figures understate the worker"
        )


def print_profile(prof: dict[str, Any]) -> None:
    print(
        f"\nProfile of the worker under a throughput round ({prof['samples']} CPU samples; "
        f"{prof['deliveries_per_s']:.0f} deliveries/s; worker on CPU "
        f"{_pct(prof['worker_cpu_share'])} of one core)"
    )
    print(
        "  samples whose stack holds: "
        + ", ".join(f"{k} {v:.0%}" for k, v in prof["stack_contains"])
    )
    print(
        f"  samples inside importlib (an import retried on every request): "
        f"{prof['importlib_share']:.0%}"
    )
    print("  by layer (leaf frame): " + ", ".join(f"{k} {v:.0%}" for k, v in prof["self_by_layer"]))
    print("  top functions (self):")
    for k, v in prof["self_by_function"]:
        print(f"    {v:6.1%}  {k}")
    print("  dealbroker functions (inclusive):")
    for k, v in prof["dealbroker_inclusive"]:
        print(f"    {v:6.1%}  {k}")


def git_describe() -> str | None:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return None
    return out.stdout.strip() or None


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------


@dataclass
class Results:
    args: dict[str, Any]
    started: str
    git: str | None
    platform: str
    cpus: int | None
    pinned: bool
    throughput: list[ThroughputRound] = field(default_factory=list)
    bare: list[BareRound] = field(default_factory=list)
    latency: LatencyResult | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    profile_round: ThroughputRound | None = None


async def bench(args: argparse.Namespace, db_url: str, stamp: str, results: Results) -> None:
    import asyncpg

    pin = results.pinned
    receiver = Receiver(pin)
    db = Database(db_url)
    worker: WorkerProcess | None = None
    admin = await asyncpg.connect(pg_dsn(f"{args.pg_url}/postgres"))
    try:
        setup = await db.setup(receiver.url)
        worker = WorkerProcess(
            db_url, args.batch_size, RESULTS_DIR / f"webhooks-worker-{stamp}.log", pin
        )
        await worker.wait_ready()
        meter = CpuMeter(admin, args.db_name, worker.pid, receiver.process.pid)

        # (a) throughput
        for r in range(args.rounds):
            tr = await throughput_round(db, setup, receiver, meter, args.events)
            results.throughput.append(tr)
            print(
                f"throughput round {r + 1}: {tr.deliveries_per_s:.0f} deliveries/s "
                f"({tr.events} in {tr.seconds:.2f} s; duplicates {tr.duplicates}; "
                f"{tr.new_connections} new connections; "
                f"worker cpu {_pct(tr.cpu['worker'])}, postgres {_pct(tr.cpu['postgres'])}, "
                f"machine {_pct(tr.cpu['machine'])})",
                flush=True,
            )

        # (b) latency at a steady rate below capacity
        lat = await latency_phase(
            db,
            setup,
            receiver,
            meter,
            args.rate,
            args.per_tx,
            args.latency_seconds,
            args.warmup,
        )
        results.latency = lat
        print(
            f"latency: p50 {lat.p50_ms:.1f} ms, p99 {lat.p99_ms:.1f} ms at "
            f"{lat.achieved_rate:.0f} events/s (worker cpu {_pct(lat.cpu['worker'])})",
            flush=True,
        )

        # (c) the bare loop, on the worker's core, with the worker idle
        payload = await db.sample_payload()
        for r in range(args.rounds):
            for kind in ("plain", "worker"):
                with pinned(WORKER_CORE if pin else None):
                    br = await bare_round(
                        receiver, payload, setup.secret, args.events, args.batch_size, kind
                    )
                results.bare.append(br)
                print(
                    f"bare loop round {r + 1} ({kind}): {br.per_s:.0f} POST/s, "
                    f"{br.cpu_ms_per_post:.2f} CPU ms per POST, {br.new_connections} new connections",
                    flush=True,
                )

        summarize(results)
        missed = any(judge(k, v) == "MISSED" for k, v in _judged(results.summary).items())
        if args.profile == "always" or (args.profile == "auto" and missed):
            print("\nprofiling the worker under one more throughput round (py-spy) ...", flush=True)
            out = RESULTS_DIR / f"webhooks-profile-{stamp}.txt"
            prof = await profile_round(db, setup, receiver, meter, worker.pid, args.events, out)
            if prof is not None:
                results.profile_round, results.profile = prof
                results.profile["raw"] = out.name
    finally:
        if worker is not None:
            code = worker.stop()
            if code not in (0, None):
                print(f"worker exited with {code}; see {worker.log_path}", flush=True)
        await receiver.close_control()
        receiver.stop()
        await db.engine.dispose()
        await admin.close()


def _judged(summary: dict[str, Any]) -> dict[str, float | None]:
    return {
        "worker deliveries/s": summary["worker_per_s"],
        "worker / bare loop": summary["ratio"],
        "latency p50 ms": summary["latency"]["p50_ms"],
        "latency p99 ms": summary["latency"]["p99_ms"],
    }


def summarize(results: Results) -> None:
    def med(values: list[float]) -> float:
        return statistics.median(values) if values else math.nan

    def med_cpu(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    worker = med([t.deliveries_per_s for t in results.throughput])
    plain = med([b.per_s for b in results.bare if b.client == "plain"])
    same = med([b.per_s for b in results.bare if b.client == "worker"])
    # The target compares with the faster of the two bare loops, so that a baseline slowed by
    # its own client settings cannot flatter the worker.
    bare = max(plain, same)
    worker_cpu = med_cpu([t.worker_cpu_ms_per_delivery for t in results.throughput])
    bare_cpu = min(
        med([b.cpu_ms_per_post for b in results.bare if b.client == kind])
        for kind in ("plain", "worker")
    )
    assert results.latency is not None
    mid = sorted(results.throughput, key=lambda t: t.deliveries_per_s)[len(results.throughput) // 2]
    results.summary = {
        "worker_per_s": worker,
        "bare_plain_per_s": plain,
        "bare_worker_client_per_s": same,
        "bare_per_s": bare,
        "ratio": worker / bare,
        "worker_cpu_ms_per_delivery": worker_cpu,
        "postgres_cpu_ms_per_delivery": med_cpu(
            [t.postgres_cpu_ms_per_delivery for t in results.throughput]
        ),
        "bare_cpu_ms_per_post": bare_cpu,
        "ratio_by_cpu": None if worker_cpu is None else bare_cpu / worker_cpu,
        "connections_per_1000": {
            "worker": med([t.new_connections * 1000 / t.events for t in results.throughput]),
            **{
                f"bare ({kind})": med(
                    [
                        b.new_connections * 1000 / b.requests
                        for b in results.bare
                        if b.client == kind
                    ]
                )
                for kind in ("plain", "worker")
            },
        },
        "latency": asdict(results.latency),
        "duplicates": {
            "throughput": sum(t.duplicates for t in results.throughput),
            "latency": results.latency.duplicates,
        },
        "cpu": {"throughput (median)": mid.cpu, "latency": results.latency.cpu},
    }
    results.summary["targets"] = {k: judge(k, v) for k, v in _judged(results.summary).items()}
    results.summary["noisy_phases"] = [
        phase
        for phase, shares in results.summary["cpu"].items()
        if (shares["other"] or 0) > NOISY_OTHER
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.receiver:
        run_receiver(args.port)
        return 0
    from dealbroker.core.migrate import upgrade

    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    db_url = f"{args.pg_url}/{args.db_name}"
    results = Results(
        args={k: v for k, v in vars(args).items() if k not in ("receiver", "port")},
        started=stamp,
        git=git_describe(),
        platform=platform.platform(),
        cpus=os.cpu_count(),
        pinned=can_pin(args),
    )
    print(
        f"webhook bench: {args.events} events x {args.rounds} rounds, batch {args.batch_size}, "
        f"latency at {args.rate:g}/s for {args.latency_seconds:g} s, "
        f"{'pinned' if results.pinned else 'not pinned'}",
        flush=True,
    )
    asyncio.run(recreate_database(args.pg_url, args.db_name))
    try:
        upgrade(db_url)
        # This process shares core 1 with the receiver; it moves to core 0 for the bare loop.
        with pinned(RECEIVER_CORE if results.pinned else None):
            asyncio.run(bench(args, db_url, stamp, results))
    finally:
        if not args.keep_db:
            asyncio.run(recreate_database(args.pg_url, args.db_name, create=False))
    print_report(results.summary)
    if results.profile is not None:
        print_profile(results.profile)
    out = RESULTS_DIR / f"webhooks-{stamp}.json"
    out.write_text(json.dumps(asdict(results), indent=2, default=str))
    print(f"\nresults: {out.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
