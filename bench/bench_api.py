"""HTTP benchmark of the deal API against a real server and a real PostgreSQL.

One run creates a fresh database, loads deals in bulk, starts the server (pinned to core 0),
and drives it from this process (pinned to core 1) with a small asyncio load generator:

* a closed-loop burst on N keep-alive connections finds each scenario's maximum throughput;
* an open-loop run at ``--load-factor`` of that maximum gives latency percentiles. Requests are
  scheduled by the clock at a fixed rate and latency counts from the *scheduled* send time, so a
  stalled server cannot hide its queueing (no coordinated omission).

Scenarios: the ceiling (a plain JSON route of the same app, no database), ``GET /ping``
(``SELECT 1``), create, get-one and list page 1 at ``--deals`` deals; then the table grows to
``--big-deals`` and list is measured again. See ``bench/README.md``.
"""

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import json
import math
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

import dealbroker
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.migrate import upgrade
from dealbroker.deals.models import DealCounter
from dealbroker.integrations import service as integrations

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
HOST = "127.0.0.1"
CEILING_PATH = "/bench/ceiling"  # added by bench/ceiling_app.py
SERVER_CORE, GENERATOR_CORE = 0, 1
CLK_TCK = os.sysconf("SC_CLK_TCK")

SCENARIOS = ("ceiling", "ping", "create", "get", "list")

# name -> (comparison, threshold)
TARGETS: dict[str, tuple[str, float]] = {
    "create/ceiling": (">=", 0.25),
    "get/ceiling": (">=", 0.35),
    "list@1M p50 / list@10k p50": ("<=", 1.5),
}

SELLER = {
    "firstname": "Kari",
    "lastname": "Nordmann",
    "phone": "+47 400 00 000",
    "email": "kari@example.com",
    "address": "Storgata 1",
    "postcode": "0155",
    "town": "Oslo",
}


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``--quick`` shrinks every duration and the big table."""
    p = argparse.ArgumentParser(
        description="Benchmark the dealbroker HTTP API (see bench/README.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--pg-url",
        default=os.environ.get(
            "DEALBROKER_BENCH_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432"
        ),
        help="PostgreSQL server URL without a database name (env DEALBROKER_BENCH_PG_URL)",
    )
    p.add_argument("--db-name", default="dealbroker_bench", help="database to (re)create")
    p.add_argument("--deals", type=int, default=10_000, help="deals loaded before phase 1")
    p.add_argument(
        "--big-deals", type=int, default=1_000_000, help="deals in total for phase 2 (0: skip)"
    )
    p.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help="comma-separated subset to run (phase 2 needs list, ratios need ceiling)",
    )
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per phase")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of unmeasured load first")
    p.add_argument("--burst", type=float, default=3.0, help="seconds of closed-loop max search")
    p.add_argument("--duration", type=float, default=5.0, help="seconds of open-loop load")
    p.add_argument(
        "--load-factor", type=float, default=0.8, help="open-loop rate as a share of the max"
    )
    p.add_argument(
        "--closed-conns",
        type=int,
        default=8,
        help="connections, closed loop (kept below the app's default pool of 10)",
    )
    p.add_argument("--open-conns", type=int, default=64, help="connections, open loop")
    p.add_argument(
        "--db-pool-size",
        type=int,
        default=None,
        help="DEALBROKER_DB_POOL_SIZE for the server (default: the app's own default)",
    )
    p.add_argument(
        "--max-other",
        type=float,
        default=0.25,
        help="other tenants' CPU (share of a core) above which a run counts as noisy",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=3.0,
        help="seconds to wait at most for a quiet machine before each scenario",
    )
    p.add_argument("--retries", type=int, default=1, help="re-runs of a noisy scenario-round")
    p.add_argument("--retry-budget", type=int, default=5, help="re-runs in all, per run")
    p.add_argument(
        "--profile",
        action="store_true",
        help="after the measured rounds, record the server with py-spy under each scenario",
    )
    p.add_argument("--no-pin", action="store_true", help="do not pin server/generator to cores")
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    p.add_argument("--seed", type=int, default=1, help="random seed (ids, bodies)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 round, short durations, 100k deals in phase 2 (other flags win)",
    )
    if p.parse_known_args(argv)[0].quick:  # quick changes the defaults; explicit flags win
        p.set_defaults(
            rounds=1,
            warmup=0.5,
            burst=1.5,
            duration=2.0,
            big_deals=100_000,
            quiet_wait=2.0,
            retry_budget=2,
        )
    args = p.parse_args(argv)
    args.scenarios = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown or not args.scenarios:
        p.error(f"--scenarios: unknown {unknown}; choose from {', '.join(SCENARIOS)}")
    if "list" not in args.scenarios:
        args.big_deals = 0
    if args.big_deals and args.big_deals < args.deals:
        p.error("--big-deals must be 0 or at least --deals")
    return args


# --------------------------------------------------------------------------------------------
# Load generator: raw HTTP/1.1 keep-alive over asyncio streams
# --------------------------------------------------------------------------------------------


def build_request(
    method: str, path: str, port: int, headers: dict[str, str], body: bytes | None = None
) -> bytes:
    """The exact bytes of one HTTP/1.1 request (built once, sent many times)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {HOST}:{port}", "Connection: keep-alive"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")


class Conn:
    """One keep-alive connection; one request in flight at a time."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send ``request``, read the whole response; returns status and body."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None
        assert self.writer is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        if at < 0:
            raise RuntimeError(f"response without Content-Length: {head[:200]!r}")
        end = lower.index(b"\r\n", at + 2)
        body = await self.reader.readexactly(int(lower[at + 17 : end]))
        if b"\r\nconnection: close" in lower:
            await self.close()
        return status, body


async def open_pool(port: int, size: int) -> list[Conn]:
    conns = [Conn(port) for _ in range(size)]
    await asyncio.gather(*(c.open() for c in conns))
    return conns


async def close_pool(conns: list[Conn]) -> None:
    await asyncio.gather(*(c.close() for c in conns))


@dataclass
class LoadResult:
    """What one closed- or open-loop run saw (latencies in seconds)."""

    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    late: int = 0  # open loop: requests that found every connection busy at their send time
    timer_lag: list[float] = field(default_factory=list)  # open loop: wake-up minus schedule
    unsent: int = 0


async def _one(conn: Conn, request: bytes, expect: int, result: LoadResult) -> None:
    try:
        status, _body = await conn.exchange(request)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, RuntimeError) as exc:
        result.errors[type(exc).__name__] += 1
        await conn.close()
        return
    if status != expect:
        result.errors[f"HTTP {status}"] += 1


async def closed_loop(
    port: int, requests: Sequence[bytes], expect: int, conns: int, duration: float
) -> LoadResult:
    """Every connection sends its next request as soon as the last one is answered."""
    result = LoadResult()
    pool = await open_pool(port, conns)
    picks = itertools.count()
    n = len(requests)
    start = time.perf_counter()
    stop = start + duration

    async def worker(conn: Conn) -> None:
        while True:
            sent = time.perf_counter()
            if sent >= stop:
                return
            await _one(conn, requests[next(picks) % n], expect, result)
            result.latencies.append(time.perf_counter() - sent)
            result.completed += 1

    try:
        await asyncio.gather(*(worker(c) for c in pool))
    finally:
        result.wall = time.perf_counter() - start
        await close_pool(pool)
    return result


async def open_loop(
    port: int, requests: Sequence[bytes], expect: int, conns: int, rate: float, duration: float
) -> LoadResult:
    """Send request ``i`` at ``start + i / rate`` on the next free connection.

    Latency counts from the scheduled time: a request that had to wait for a free connection
    (the server was slow) carries that wait. Gives up sending after three times ``duration``.
    """
    result = LoadResult()
    pool = await open_pool(port, conns)
    total = max(1, int(rate * duration))
    interval = 1.0 / rate
    picks = itertools.count()
    n = len(requests)
    start = time.perf_counter() + 0.05
    give_up = start + 3 * duration

    async def worker(conn: Conn) -> None:
        while True:
            i = next(picks)
            if i >= total:
                return
            scheduled = start + i * interval
            now = time.perf_counter()
            if now > give_up:
                result.unsent += 1
                continue
            if scheduled > now:
                await asyncio.sleep(scheduled - now)
                result.timer_lag.append(time.perf_counter() - scheduled)
            else:
                result.late += 1
            await _one(conn, requests[i % n], expect, result)
            result.latencies.append(time.perf_counter() - scheduled)
            result.completed += 1

    try:
        await asyncio.gather(*(worker(c) for c in pool))
    finally:
        result.wall = time.perf_counter() - start
        await close_pool(pool)
    return result


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (NaN when empty)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


# --------------------------------------------------------------------------------------------
# CPU accounting: generator (this process), server process, PostgreSQL backends, whole machine
# --------------------------------------------------------------------------------------------


def proc_cpu(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds, from /proc/<pid>/stat (None if unreadable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # fields[0] is the state, field 3 of the man page
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def all_proc_cpu() -> dict[int, float]:
    """utime + stime of every process on the machine (all tenants), by pid."""
    out: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (cpu := proc_cpu(int(entry.name))) is not None:
            out[int(entry.name)] = cpu
    return out


def machine_busy() -> tuple[float, float] | None:
    """Busy and stolen core-seconds of the whole machine since boot (all tenants), from
    /proc/stat. Steal is time the hypervisor gave our virtual cores to someone else."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


@dataclass
class CpuSnapshot:
    wall: float
    generator: float
    server: float | None
    db: dict[int, float]  # live backends of the bench database
    procs: dict[int, float]  # every process on the machine
    machine: tuple[float, float] | None
    sessions: int | None  # PostgreSQL sessions ever opened on the bench database


def _sub(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None else b - a


class CpuMeter:
    """Snapshots CPU seconds of the generator, the server, the bench database's backends and
    every other process on the machine (other tenants: the noise)."""

    def __init__(self, server_pid: int, admin: asyncpg.Connection, db_name: str) -> None:
        self.server_pid = server_pid
        self.admin = admin
        self.db_name = db_name

    async def _db_pids(self) -> list[int]:
        rows = await self.admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            self.db_name,
        )
        return [r["pid"] for r in rows]

    async def _sessions(self) -> int | None:
        try:  # pg_stat_database.sessions is PostgreSQL 14+
            await self.admin.execute("SELECT pg_stat_clear_snapshot()")
            value = await self.admin.fetchval(
                "SELECT sessions FROM pg_stat_database WHERE datname = $1", self.db_name
            )
        except asyncpg.PostgresError:
            return None
        return None if value is None else int(value)

    async def snapshot(self) -> CpuSnapshot:
        pids = await self._db_pids()
        sessions = await self._sessions()
        procs = all_proc_cpu()
        return CpuSnapshot(
            time.perf_counter(),
            time.process_time(),
            procs.get(self.server_pid),
            {p: procs[p] for p in pids if p in procs},
            procs,
            machine_busy(),
            sessions,
        )

    def delta(self, a: CpuSnapshot, b: CpuSnapshot) -> dict[str, float | None]:
        """CPU seconds spent between two snapshots. A process born in between counts whole;
        one that ended in between is missed (its time lands in ``unattributed_cpu_s``, as do
        interrupts and the backends that pool churn opened and closed)."""
        ours = {os.getpid(), self.server_pid, *a.db, *b.db}
        server = _sub(b.server, a.server)
        db = sum(c - a.db.get(p, 0.0) for p, c in b.db.items()) if b.db else None
        others = sum(c - a.procs.get(p, 0.0) for p, c in b.procs.items() if p not in ours)
        both = a.machine is not None and b.machine is not None
        busy = b.machine[0] - a.machine[0] if both else None  # type: ignore[index]
        steal = b.machine[1] - a.machine[1] if both else None  # type: ignore[index]
        parts = [b.generator - a.generator, server, db, others]
        rest = None if busy is None or None in parts else busy - sum(parts)  # type: ignore[arg-type]
        return {
            "wall_s": b.wall - a.wall,
            "generator_cpu_s": b.generator - a.generator,
            "server_cpu_s": server,
            "db_cpu_s": db,
            "other_cpu_s": others,
            "unattributed_cpu_s": rest,
            "machine_busy_s": busy,
            "steal_s": steal,
            "new_db_sessions": _sub(b.sessions, a.sessions),  # type: ignore[arg-type]
        }

    async def foreign_load(self, seconds: float = 0.5) -> float | None:
        """Share of a core that other processes used over ``seconds`` (we are idle meanwhile)."""
        a = await self.snapshot()
        await asyncio.sleep(seconds)
        other = self.delta(a, await self.snapshot())["other_cpu_s"]
        return None if other is None else other / seconds


# --------------------------------------------------------------------------------------------
# Database: create, migrate, bulk-load deals
# --------------------------------------------------------------------------------------------


def pg_dsn(sqlalchemy_url: str) -> str:
    """asyncpg's DSN for a SQLAlchemy ``postgresql+asyncpg://`` URL."""
    return sqlalchemy_url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def recreate_database(server_url: str, name: str) -> None:
    conn = await asyncpg.connect(pg_dsn(f"{server_url}/postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def drop_database(server_url: str, name: str) -> None:
    conn = await asyncpg.connect(pg_dsn(f"{server_url}/postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@dataclass
class Client:
    integration_id: uuid.UUID
    client_id: str
    client_secret: str


async def create_integration(db_url: str) -> Client:
    """An integration made by the service itself, as the operator's CLI makes one."""
    engine = create_engine(db_url, pool_size=1)
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            created = await integrations.create(session, "Benchmark marketplace")
    finally:
        await engine.dispose()
    i = created.integration
    return Client(i.id, i.client_id, created.client_secret)


# One statement per chunk: deals with varied, realistic fields and a created_at spread over a
# year (so newest-first order is meaningful and index order differs from heap order), plus each
# deal's first status-history row, as the service writes it.
LOAD_SQL = """
WITH new AS (
    INSERT INTO deals (id, integration_id, name, description, price_minor, currency, images,
                       package_type, status, seller, payment_status, version,
                       created_at, updated_at)
    SELECT gen_random_uuid(), $1::uuid,
           (ARRAY['Road bike', 'Sofa', 'Winter jacket', 'Bookshelf', 'Camera', 'Guitar',
                  'Desk lamp', 'Stroller'])[1 + i % 8] || ' #' || i,
           'Lightly used, smoke-free home. Pick-up in '
               || (ARRAY['Oslo', 'Bergen', 'Trondheim', 'Stavanger', 'Tromsø'])[1 + i % 5]
               || ' or shipping. Item ' || i || '.',
           100 + (i::bigint * 7919) % 5000000,
           'NOK',
           json_build_array('https://cdn.example.com/deals/' || i || '-1.jpg',
                            'https://cdn.example.com/deals/' || i || '-2.jpg'),
           (ARRAY['Small', 'Medium', 'Large', 'XL', NULL])[1 + i % 5],
           'Draft',
           json_build_object(
               'firstname', (ARRAY['Kari', 'Ola', 'Ingrid', 'Lars'])[1 + i % 4],
               'lastname', 'Nordmann' || i % 1000,
               'phone', '+47 4' || lpad((i % 10000000)::text, 7, '0'),
               'email', 'seller' || i || '@example.com',
               'address', 'Storgata ' || 1 + i % 200,
               'postcode', lpad((i % 10000)::text, 4, '0'),
               'town', (ARRAY['Oslo', 'Bergen', 'Trondheim', 'Stavanger', 'Tromsø'])[1 + i % 5]),
           NULL, 1, t, t
    FROM (
        SELECT i, $2::timestamptz - make_interval(secs => random() * $3) AS t
        FROM generate_series($4::int, $5::int) AS i
    ) AS src
    RETURNING id, integration_id, created_at
)
INSERT INTO deal_status_history
    (id, deal_id, integration_id, from_status, to_status, trigger, actor, created_at)
SELECT gen_random_uuid(), id, integration_id, NULL, 'Draft', 'created', 'integration', created_at
FROM new
"""

SPREAD_SECONDS = 365 * 24 * 3600.0


async def load_deals(
    conn: asyncpg.Connection, integration_id: uuid.UUID, first: int, last: int, chunk: int
) -> float:
    """Insert deals number ``first`` to ``last`` in chunks, then make the counters exact and
    ANALYZE. Returns the seconds it took."""
    started = time.perf_counter()
    now = datetime.now(UTC)
    await conn.execute("SET synchronous_commit = off")
    for lo in range(first, last + 1, chunk):
        hi = min(last, lo + chunk - 1)
        await conn.execute(LOAD_SQL, integration_id, now, SPREAD_SECONDS, lo, hi)
        if last - first >= 2 * chunk:
            print(f"    loaded {hi - first + 1:>9,} / {last - first + 1:,} deals", flush=True)
    await set_counters(conn, integration_id)
    await conn.execute("ANALYZE deals; ANALYZE deal_status_history; ANALYZE deal_counters")
    return time.perf_counter() - started


async def set_counters(conn: asyncpg.Connection, integration_id: uuid.UUID) -> int:
    """Spread the exact deal count over the counter slots, as concurrent creates would."""
    async with conn.transaction():
        total = await conn.fetchval(
            "SELECT count(*) FROM deals WHERE integration_id = $1", integration_id
        )
        await conn.execute("DELETE FROM deal_counters WHERE integration_id = $1", integration_id)
        slots = DealCounter.SLOTS
        await conn.executemany(
            "INSERT INTO deal_counters (integration_id, slot, count) VALUES ($1, $2, $3)",
            [
                (integration_id, s, total // slots + (1 if s < total % slots else 0))
                for s in range(slots)
            ],
        )
    return int(total)


# --------------------------------------------------------------------------------------------
# The server process
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def can_pin() -> bool:
    return hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2


class Server:
    """``uvicorn bench.ceiling_app:factory`` as a subprocess, optionally pinned with taskset."""

    def __init__(
        self, db_url: str, port: int, pin: bool, log_path: Path, pool_size: int | None = None
    ) -> None:
        self.port = port
        self.log_path = log_path
        python = [sys.executable, "-m", "uvicorn", "bench.ceiling_app:factory", "--factory"]
        python += ["--host", HOST, "--port", str(port), "--no-access-log", "--log-level", "warning"]
        self.pinned = pin and shutil.which("taskset") is not None
        self.cmd = (["taskset", "-c", str(SERVER_CORE)] if self.pinned else []) + python
        self.env = dict(os.environ)
        self.env.update(
            {
                "DEALBROKER_DATABASE_URL": db_url,
                "DEALBROKER_LOG_LEVEL": "warning",
                "DEALBROKER_BASE_URL": f"http://{HOST}:{port}",
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
                ),
            }
        )
        if pool_size is not None:
            self.env["DEALBROKER_DB_POOL_SIZE"] = str(pool_size)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, timeout: float = 30.0) -> None:
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.cmd, cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=f"http://{HOST}:{self.port}") as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.tail()}")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(CEILING_PATH)).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError(f"server did not answer within {timeout:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


# --------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------


@dataclass
class Scenario:
    """A named set of prebuilt requests (cycled in order) and the status they must get."""

    name: str
    label: str
    requests: list[bytes]
    expect: int
    check: Callable[[int, bytes], str | None] = lambda status, body: None


def create_body(i: int) -> bytes:
    """A realistic create body with seller data, varied per request."""
    body = {
        "name": f"Road bike #{i}",
        "description": "Aluminium frame, 56 cm, lightly used. Pick-up in Oslo or shipping.",
        "price": 4500.5 + i % 100,
        "images": [
            f"https://cdn.example.com/bench/{i}-1.jpg",
            f"https://cdn.example.com/bench/{i}-2.jpg",
        ],
        "packageType": "Large",
        "seller": {**SELLER, "email": f"seller{i}@example.com"},
    }
    return json.dumps(body, separators=(",", ":")).encode()


def make_scenarios(
    port: int,
    token: str,
    deal_ids: list[uuid.UUID],
    rng: random.Random,
    expected_total: Callable[[], int],
) -> dict[str, Scenario]:
    auth = {"Authorization": f"Bearer {token}"}
    json_auth = {**auth, "Content-Type": "application/json"}
    ids = list(deal_ids)
    rng.shuffle(ids)

    def check_ok(status: int, body: bytes) -> str | None:
        return None if json.loads(body) == {"status": "ok"} else f"unexpected body {body[:200]!r}"

    def check_create(status: int, body: bytes) -> str | None:
        deal = json.loads(body)
        ok = deal.get("status") == "Draft" and deal.get("seller", {}).get("town") == "Oslo"
        return None if ok else f"unexpected body {body[:200]!r}"

    def check_get(status: int, body: bytes) -> str | None:
        return None if json.loads(body).get("id") == str(ids[0]) else f"wrong deal {body[:200]!r}"

    def check_list(status: int, body: bytes) -> str | None:
        page = json.loads(body)
        total, want = page["page"]["totalCount"], expected_total()
        if total != want or len(page["items"]) != min(20, want):
            return f"totalCount {total} (expected {want}), {len(page['items'])} items"
        stamps = [d["createdAt"] for d in page["items"]]
        return None if stamps == sorted(stamps, reverse=True) else "items not newest first"

    return {
        "ceiling": Scenario(
            "ceiling",
            f"GET {CEILING_PATH}",
            [build_request("GET", CEILING_PATH, port, {})],
            200,
            check_ok,
        ),
        "ping": Scenario(
            "ping", "GET /ping", [build_request("GET", "/ping", port, {})], 200, check_ok
        ),
        "create": Scenario(
            "create",
            "POST /deals/v1/deals",
            [
                build_request("POST", "/deals/v1/deals", port, json_auth, create_body(i))
                for i in range(1000)
            ],
            201,
            check_create,
        ),
        "get": Scenario(
            "get",
            "GET /deals/v1/deals/{id}",
            [build_request("GET", f"/deals/v1/deals/{i}", port, auth) for i in ids],
            200,
            check_get,
        ),
        "list": Scenario(
            "list",
            "GET /deals/v1/deals?page=1",
            [build_request("GET", "/deals/v1/deals?page=1", port, auth)],
            200,
            check_list,
        ),
    }


async def verify(port: int, scenario: Scenario) -> None:
    """One request of the scenario must succeed and look right before it is measured."""
    conn = Conn(port)
    try:
        status, body = await conn.exchange(scenario.requests[0])
    finally:
        await conn.close()
    problem = f"HTTP {status}" if status != scenario.expect else scenario.check(status, body)
    if problem:
        raise RuntimeError(f"{scenario.label}: {problem}: {body[:300]!r}")


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One measured closed- or open-loop run of one scenario in one round."""

    scenario: str
    phase: str
    round: int
    mode: str  # "closed" (max throughput) or "open" (latency at a fixed rate)
    connections: int
    offered_rps: float | None
    achieved_rps: float
    completed: int
    errors: dict[str, int]
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    late_share: float | None
    timer_lag_p99_ms: float | None
    unsent: int
    cpu: dict[str, float | None]
    noisy: bool = False  # foreign CPU above --max-other during the run
    discarded: bool = False  # replaced by a retry; left out of the summary


def _ms(value: float) -> float:
    return round(value * 1000, 3)


def summarize_run(
    scenario: str,
    phase: str,
    rnd: int,
    mode: str,
    conns: int,
    offered: float | None,
    result: LoadResult,
    cpu: dict[str, float | None],
) -> Run:
    lat = sorted(result.latencies)
    lag = sorted(result.timer_lag)
    sent = result.completed or 1
    return Run(
        scenario=scenario,
        phase=phase,
        round=rnd,
        mode=mode,
        connections=conns,
        offered_rps=None if offered is None else round(offered, 1),
        achieved_rps=round(result.completed / result.wall, 1) if result.wall else 0.0,
        completed=result.completed,
        errors=dict(result.errors),
        p50_ms=_ms(percentile(lat, 50)),
        p90_ms=_ms(percentile(lat, 90)),
        p99_ms=_ms(percentile(lat, 99)),
        max_ms=_ms(lat[-1]) if lat else math.nan,
        late_share=round(result.late / sent, 4) if mode == "open" else None,
        timer_lag_p99_ms=_ms(percentile(lag, 99)) if lag else None,
        unsent=result.unsent,
        cpu={k: None if v is None else round(v, 3) for k, v in cpu.items()},
    )


class Bench:
    """Runs scenarios against the server and keeps every measured run."""

    def __init__(self, args: argparse.Namespace, port: int, meter: CpuMeter) -> None:
        self.args = args
        self.port = port
        self.meter = meter
        self.runs: list[Run] = []
        self.retries_left = args.retry_budget

    async def _quiet(self) -> float | None:
        """Wait up to ``--quiet-wait`` seconds for other tenants' CPU to drop below
        ``--max-other``; returns the foreign load last seen (share of a core)."""
        deadline = time.monotonic() + self.args.quiet_wait
        while True:
            load = await self.meter.foreign_load()
            if load is None or load <= self.args.max_other or time.monotonic() >= deadline:
                return load

    def _noisy(self, run: Run) -> bool:
        other, wall = run.cpu.get("other_cpu_s"), run.cpu.get("wall_s")
        return other is not None and bool(wall) and other / wall > self.args.max_other  # type: ignore[operator]

    async def _measured(
        self, work: Awaitable[LoadResult]
    ) -> tuple[LoadResult, dict[str, float | None]]:
        before = await self.meter.snapshot()
        result = await work
        after = await self.meter.snapshot()
        return result, self.meter.delta(before, after)

    async def max_throughput(
        self, sc: Scenario, phase: str, rnd: int, name: str | None = None
    ) -> Run:
        a = self.args
        await closed_loop(self.port, sc.requests, sc.expect, a.closed_conns, a.warmup)
        result, cpu = await self._measured(
            closed_loop(self.port, sc.requests, sc.expect, a.closed_conns, a.burst)
        )
        run = summarize_run(
            name or sc.name, phase, rnd, "closed", a.closed_conns, None, result, cpu
        )
        self.runs.append(run)
        return run

    async def latency(
        self, sc: Scenario, phase: str, rnd: int, rate: float, name: str | None = None
    ) -> Run:
        a = self.args
        result, cpu = await self._measured(
            open_loop(self.port, sc.requests, sc.expect, a.open_conns, rate, a.duration)
        )
        run = summarize_run(name or sc.name, phase, rnd, "open", a.open_conns, rate, result, cpu)
        self.runs.append(run)
        return run

    async def both(
        self, sc: Scenario, phase: str, rnd: int, name: str | None = None, rate: float | None = None
    ) -> None:
        """Max throughput (closed loop), then latency open-loop at ``rate`` or the load factor.

        Waits for a quiet machine first; a pair during which other tenants' CPU went above
        ``--max-other`` is measured again (``--retries`` times, ``--retry-budget`` in all).
        """
        for attempt in itertools.count():
            await self._quiet()
            top = await self.max_throughput(sc, phase, rnd, name)
            offered = rate if rate is not None else top.achieved_rps * self.args.load_factor
            low = await self.latency(sc, phase, rnd, max(offered, 1.0), name)
            top.noisy, low.noisy = self._noisy(top), self._noisy(low)
            retry = (
                (top.noisy or low.noisy) and attempt < self.args.retries and self.retries_left > 0
            )
            self._report(rnd, name or sc.name, top, low, "  noisy: again" if retry else "")
            if not retry:
                return
            top.discarded = low.discarded = True
            self.retries_left -= 1

    @staticmethod
    def _report(rnd: int, name: str, top: Run, low: Run, note: str) -> None:
        print(
            f"  round {rnd} {name:<11} max {top.achieved_rps:>8.1f} req/s   "
            f"open {low.offered_rps:>8.1f} req/s: p50 {low.p50_ms:>7.2f} ms  p99 {low.p99_ms:>8.2f} ms"
            f"  server cpu {_share(top, 'server_cpu_s')}/{_share(low, 'server_cpu_s')}"
            f"  other {_share(top, 'other_cpu_s')}/{_share(low, 'other_cpu_s')}"
            f"  new pg sessions {top.cpu['new_db_sessions']}/{low.cpu['new_db_sessions']}"
            f"{'  errors ' + str(top.errors | low.errors) if top.errors or low.errors else ''}"
            f"{note}",
            flush=True,
        )


def _share(run: Run, key: str) -> str:
    value, wall = run.cpu.get(key), run.cpu.get("wall_s")
    return "-" if value is None or not wall else f"{value / wall:.0%}"


def median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(present) if present else None


CPU_KEYS = (
    "generator_cpu_s",
    "server_cpu_s",
    "db_cpu_s",
    "other_cpu_s",
    "unattributed_cpu_s",
    "machine_busy_s",
    "steal_s",
)


def _per_request_us(runs: list[Run], key: str) -> float | None:
    """Median CPU microseconds per completed request: noise from other tenants changes how
    much CPU the server gets, hardly what one request costs."""
    return median(
        [
            None if r.cpu.get(key) is None or not r.completed else r.cpu[key] / r.completed * 1e6  # type: ignore[operator]
            for r in runs
        ]
    )


def summarize(runs: list[Run]) -> dict[str, dict[str, Any]]:
    """Per scenario: medians over rounds of max req/s, open-loop p50/p99, CPU per request and
    CPU shares. Runs replaced by a retry are left out (they stay in the JSON's ``runs``)."""
    out: dict[str, dict[str, Any]] = {}
    kept = [r for r in runs if not r.discarded]
    for name in dict.fromkeys(r.scenario for r in runs):
        closed = [r for r in kept if r.scenario == name and r.mode == "closed"]
        opened = [r for r in kept if r.scenario == name and r.mode == "open"]

        def share(rs: list[Run], key: str) -> float | None:
            return median(
                [
                    None if r.cpu.get(key) is None else r.cpu[key] / r.cpu["wall_s"]  # type: ignore[operator]
                    for r in rs
                ]
            )

        out[name] = {
            "rounds": len(closed),
            "max_rps": median([r.achieved_rps for r in closed]),
            "max_rps_all": [r.achieved_rps for r in closed],
            "open_rps": median([r.offered_rps for r in opened]),
            "p50_ms": median([r.p50_ms for r in opened]),
            "p99_ms": median([r.p99_ms for r in opened]),
            "p50_ms_all": [r.p50_ms for r in opened],
            "p99_ms_all": [r.p99_ms for r in opened],
            "server_us_per_req": _per_request_us(closed, "server_cpu_s"),
            "db_us_per_req": _per_request_us(closed, "db_cpu_s"),
            "generator_us_per_req": _per_request_us(closed, "generator_cpu_s"),
            "errors": sum(sum(r.errors.values()) for r in closed + opened),
            "noisy_runs": sum(r.noisy for r in closed + opened),
            "discarded_runs": sum(r.discarded for r in runs if r.scenario == name),
            "late_share": median([r.late_share for r in opened]),
            "cpu_share": {
                mode: {key: share(rs, key) for key in CPU_KEYS}
                for mode, rs in (("closed", closed), ("open", opened))
            },
            "cpu_seconds": {
                mode: {
                    key: median([r.cpu.get(key) for r in rs])
                    for key in (*CPU_KEYS, "wall_s", "new_db_sessions")
                }
                for mode, rs in (("closed", closed), ("open", opened))
            },
        }
    return out


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The target ratios (and list/ceiling, which has no target) with a met/missed verdict.

    ``by_cpu`` is the same ratio estimated from server CPU per request (ceiling's cost divided
    by the scenario's), which a noisy machine disturbs far less; for the list row it is list@big
    over list in server + PostgreSQL CPU per request."""

    def get(name: str, key: str) -> float | None:
        return summary.get(name, {}).get(key)

    def cost_ratio(name: str) -> float | None:
        return _div(get("ceiling", "server_us_per_req"), get(name, "server_us_per_req"))

    def total_cost(name: str) -> float | None:
        server, db = get(name, "server_us_per_req"), get(name, "db_us_per_req")
        return None if server is None else server + (db or 0.0)

    rows = {
        "create/ceiling": (
            _div(get("create", "max_rps"), get("ceiling", "max_rps")),
            cost_ratio("create"),
        ),
        "get/ceiling": (_div(get("get", "max_rps"), get("ceiling", "max_rps")), cost_ratio("get")),
        "list/ceiling": (
            _div(get("list", "max_rps"), get("ceiling", "max_rps")),
            cost_ratio("list"),
        ),
        "list@1M p50 / list@10k p50": (
            _div(get("list@big", "p50_ms"), get("list", "p50_ms")),
            _div(total_cost("list@big"), total_cost("list")),
        ),
    }
    out: dict[str, dict[str, Any]] = {}
    for name, (value, by_cpu) in rows.items():
        op, threshold = TARGETS.get(name, ("", math.nan))
        out[name] = {
            "value": value,
            "target": f"{op} {threshold}" if op else None,
            "met": _verdict(name, value),
            "by_cpu": by_cpu,
            "met_by_cpu": _verdict(name, by_cpu),
        }
    return out


def _verdict(name: str, value: float | None) -> bool | None:
    """Whether ``value`` meets the target of ratio ``name`` (None: no target or no value)."""
    if name not in TARGETS or value is None:
        return None
    op, threshold = TARGETS[name]
    return value >= threshold if op == ">=" else value <= threshold


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _yes(met: bool | None) -> str:
    return {True: "yes", False: "NO", None: "-"}[met]


def print_report(
    summary: dict[str, dict[str, Any]], verdicts: dict[str, dict[str, Any]], labels: dict[str, str]
) -> None:
    print("\nThroughput and latency (medians over rounds; CPU per request from the closed loop)")
    print(
        f"{'scenario':<12} {'endpoint':<36} {'max req/s':>9} {'open req/s':>10} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'server us/req':>13} {'pg us/req':>9} "
        f"{'errors':>6} {'noisy':>5} {'redone':>6}"
    )
    for name, s in summary.items():
        print(
            f"{name:<12} {labels.get(name, ''):<36} {_f(s['max_rps'], '9.1f')} "
            f"{_f(s['open_rps'], '10.1f')} {_f(s['p50_ms'], '8.2f')} {_f(s['p99_ms'], '8.2f')} "
            f"{_f(s['server_us_per_req'], '13.0f')} {_f(s['db_us_per_req'], '9.0f')} "
            f"{s['errors']:>6} {s['noisy_runs']:>5} {s['discarded_runs']:>6}"
        )

    print("\nRatios against targets (by CPU: the same ratio from CPU cost per request)")
    print(f"{'ratio':<28} {'value':>7} {'target':>8}  {'met':<4} {'by CPU':>7}  met")
    for name, v in verdicts.items():
        print(
            f"{name:<28} {_f(v['value'], '7.3f')} {v['target'] or '':>8}  {_yes(v['met']):<4} "
            f"{_f(v['by_cpu'], '7.3f')}  {_yes(v['met_by_cpu'])}"
        )
    noisy = [f"{name} ({s['noisy_runs']})" for name, s in summary.items() if s["noisy_runs"]]
    if noisy:
        print(
            "  warning: noisy runs were kept for " + ", ".join(noisy) + ". A scenario that did "
            "not get its core skews the\n  throughput ratios; the 'by CPU' column is the steadier "
            "estimate (see bench/README.md, Noise)."
        )

    print("\nCPU: share of one core during the measured window (medians over rounds)")
    print("  generator = this process (core 1), server = uvicorn (core 0), postgres = the bench")
    print("  database's live backends, others = every other process (other tenants: noise),")
    print("  unattr. = busy time no live process accounts for (exited backends of pool churn,")
    print("  interrupts), steal = time the hypervisor gave away, new pg sess = connections opened")
    print(
        f"{'scenario':<12} {'mode':<6} {'wall s':>6} {'gen cpu s':>9} {'server cpu s':>12} "
        f"{'generator':>9} {'server':>7} {'postgres':>8} {'others':>6} {'unattr.':>7} "
        f"{'steal':>6} {'new pg sess':>11}"
    )
    for name, s in summary.items():
        for mode in ("closed", "open"):
            sec, sh = s["cpu_seconds"][mode], s["cpu_share"][mode]
            print(
                f"{name:<12} {mode:<6} {_f(sec['wall_s'], '6.1f')} "
                f"{_f(sec['generator_cpu_s'], '9.2f')} {_f(sec['server_cpu_s'], '12.2f')} "
                f"{_pct(sh['generator_cpu_s']):>9} {_pct(sh['server_cpu_s']):>7} "
                f"{_pct(sh['db_cpu_s']):>8} {_pct(sh['other_cpu_s']):>6} "
                f"{_pct(sh['unattributed_cpu_s']):>7} {_pct(sh['steal_s']):>6} "
                f"{_f(sec['new_db_sessions'], '11.0f')}"
            )


# --------------------------------------------------------------------------------------------
# Optional profile of the server with py-spy (--profile)
# --------------------------------------------------------------------------------------------

# Top-level packages worth naming; py-spy prints frame paths relative to their sys.path entry.
LAYERS = {
    "dealbroker": "dealbroker",
    "sqlalchemy": "sqlalchemy",
    "asyncpg": "asyncpg",
    "fastapi": "fastapi",
    "starlette": "starlette",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
    "uvicorn": "uvicorn",
    "anyio": "anyio",
    "asyncio": "asyncio",
}


def py_spy() -> str | None:
    """py-spy next to this interpreter (the venv) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _frame(frame: str) -> tuple[str, str]:
    """``name (pkg/module.py:line)`` -> (``name (pkg/module.py)``, layer)."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    layer = LAYERS.get(path.split("/", 1)[0], "other (stdlib, C)")
    return f"{name} ({path})", layer


def summarize_profile(raw: Path, top: int = 12) -> dict[str, Any]:
    """Shares of samples from py-spy's raw (collapsed) output: by the leaf frame's layer, by
    leaf function (self time) and by dealbroker function anywhere on the stack (inclusive)."""
    by_layer: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
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
        leaf, layer = frames[-1]
        by_layer[layer] += count
        self_time[leaf] += count
        for name in {n for n, lay in frames if lay == "dealbroker"}:
            inclusive[name] += count

    def shares(counter: Counter[str], n: int) -> list[tuple[str, float]]:
        return [(k, round(v / total, 4)) for k, v in counter.most_common(n)] if total else []

    return {
        "samples": total,
        "self_by_layer": shares(by_layer, len(LAYERS)),
        "self_by_function": shares(self_time, top),
        "dealbroker_inclusive": shares(inclusive, top),
    }


async def profile(
    port: int, pid: int, sc: Scenario, conns: int, seconds: float, out: Path
) -> dict[str, Any] | None:
    """Record the server with py-spy while a closed loop drives ``sc``; None without py-spy."""
    spy = py_spy()
    if spy is None:
        print("  py-spy not found: pip install py-spy", flush=True)
        return None
    cmd = [spy, "record", "--pid", str(pid), "--duration", str(math.ceil(seconds))]
    cmd += ["--rate", "250", "--nonblocking", "--format", "raw", "--output", str(out)]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    await asyncio.sleep(0.5)  # let py-spy attach before the load starts
    await closed_loop(port, sc.requests, sc.expect, conns, math.ceil(seconds) + 1.0)
    _out, err = await proc.communicate()
    if proc.returncode != 0 or not out.exists():
        print(f"  py-spy failed: {err.decode(errors='replace')[-300:]}", flush=True)
        return None
    return summarize_profile(out)


def print_profile(name: str, prof: dict[str, Any]) -> None:
    print(f"\nProfile of the server under {name} ({prof['samples']} samples, shares of CPU)")
    print("  by layer (leaf frame): " + ", ".join(f"{k} {v:.0%}" for k, v in prof["self_by_layer"]))
    print("  top functions (self):")
    for k, v in prof["self_by_function"]:
        print(f"    {v:6.1%}  {k}")
    print("  dealbroker functions (inclusive):")
    for k, v in prof["dealbroker_inclusive"]:
        print(f"    {v:6.1%}  {k}")


# --------------------------------------------------------------------------------------------
# Orchestration
# --------------------------------------------------------------------------------------------


async def get_token(port: int, client: Client) -> str:
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}") as http:
        response = await http.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(client.client_id, client.client_secret),
        )
    response.raise_for_status()
    return str(response.json()["access_token"])


def source_identity() -> dict[str, str]:
    """Which dealbroker the run imported (PYTHONPATH may point elsewhere than this checkout)
    and a hash of its Python files, so that runs of the same code can be matched."""
    package = Path(dealbroker.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    inside = package.is_relative_to(REPO_ROOT)
    return {
        "dealbroker_source": str(package.relative_to(REPO_ROOT)) if inside else str(package),
        "dealbroker_sha256": digest.hexdigest()[:16],
    }


def environment(server: Server, pg_version: str) -> dict[str, Any]:
    """Facts that explain the numbers: versions, cores, pinning, the server's loop and parser."""

    def has(module: str) -> bool:
        probe = [sys.executable, "-c", f"import {module}"]
        return subprocess.run(probe, capture_output=True, check=False).returncode == 0

    git = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "postgres": pg_version,
        "server_cmd": " ".join(Path(c).name if c == sys.executable else c for c in server.cmd),
        "server_pinned_core": SERVER_CORE if server.pinned else None,
        "generator_pinned_core": GENERATOR_CORE if server.pinned else None,
        "uvloop_installed": has("uvloop"),
        "httptools_installed": has("httptools"),
        "git": git,
        **source_identity(),
    }


async def run(
    args: argparse.Namespace, db_url: str, client: Client, started: float
) -> dict[str, Any]:
    """Load phase-1 data, start the server, measure both phases; returns the results document."""
    rng = random.Random(args.seed)
    admin = await asyncpg.connect(pg_dsn(db_url))
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    port = free_port()
    server = Server(
        db_url,
        port,
        not args.no_pin and can_pin(),
        RESULTS_DIR / f"server-{stamp}.log",
        args.db_pool_size,
    )
    try:
        print(f"Loading {args.deals:,} deals …", flush=True)
        load_small = await load_deals(admin, client.integration_id, 1, args.deals, 100_000)
        deal_ids = [r["id"] for r in await admin.fetch("SELECT id FROM deals")]
        print(f"  {len(deal_ids):,} deals in {load_small:.1f}s", flush=True)

        await server.start()
        print(
            f"Server pid {server.pid} on port {port}"
            f"{f' pinned to core {SERVER_CORE}' if server.pinned else ' (not pinned)'}",
            flush=True,
        )
        env = environment(server, await admin.fetchval("SHOW server_version"))
        token = await get_token(port, client)

        async def total() -> int:
            return int(await admin.fetchval("SELECT count(*) FROM deals"))

        expected = [await total()]
        every = make_scenarios(port, token, deal_ids, rng, lambda: expected[0])
        scenarios = {name: sc for name, sc in every.items() if name in args.scenarios}
        bench = Bench(args, port, CpuMeter(server.pid, admin, args.db_name))

        for sc in scenarios.values():
            expected[0] = await total()
            await verify(port, sc)
        print("Warming up …", flush=True)
        for sc in scenarios.values():
            await closed_loop(port, sc.requests, sc.expect, args.closed_conns, args.warmup)

        print(f"Phase 1: {await total():,} deals, {args.rounds} round(s)", flush=True)
        for rnd in range(1, args.rounds + 1):
            for sc in scenarios.values():
                await bench.both(sc, "phase1", rnd)

        profiles: dict[str, dict[str, Any]] = {}

        async def profile_into(name: str, sc: Scenario) -> None:
            print(f"  profiling the server under {name} …", flush=True)
            out = RESULTS_DIR / f"profile-{name.replace('@', '-')}-{stamp}.txt"
            prof = await profile(port, server.pid, sc, args.closed_conns, args.duration, out)
            if prof is not None:
                profiles[name] = {"raw": str(out.relative_to(REPO_ROOT)), **prof}

        if args.profile:
            for name, sc in scenarios.items():
                await profile_into(name, sc)

        load_big = None
        if args.big_deals:
            have = await total()
            print(f"Loading deals up to {args.big_deals:,} …", flush=True)
            # Numbering continues after the first load so every generated deal is distinct.
            extra = max(0, args.big_deals - have)
            load_big = await load_deals(
                admin, client.integration_id, args.deals + 1, args.deals + extra, 100_000
            )
            expected[0] = await total()
            print(f"  {expected[0]:,} deals after {load_big:.1f}s (ANALYZE included)", flush=True)
            await verify(port, scenarios["list"])
            list_rate = median(
                [
                    r.offered_rps
                    for r in bench.runs
                    if r.scenario == "list" and r.mode == "open" and not r.discarded
                ]
            )
            await closed_loop(port, scenarios["list"].requests, 200, args.closed_conns, args.warmup)
            print(
                f"Phase 2: {expected[0]:,} deals; list open-loop at the phase-1 list rate "
                f"({list_rate:.1f} req/s)",
                flush=True,
            )
            for rnd in range(1, args.rounds + 1):
                if "ceiling" in scenarios:
                    await bench.both(scenarios["ceiling"], "phase2", rnd, "ceiling@big")
                await bench.both(scenarios["list"], "phase2", rnd, "list@big", rate=list_rate)
            if args.profile:
                await profile_into("list@big", scenarios["list"])
    finally:
        server.stop()
        await admin.close()

    summary = summarize(bench.runs)
    verdicts = ratios(summary)
    labels = {name: sc.label for name, sc in scenarios.items()}
    if "list" in labels:
        labels["list@big"] = labels["list"] + f" @{expected[0]:,}"
        labels["list"] += f" @{args.deals:,}"
    labels["ceiling@big"] = labels.get("ceiling", "")
    print_report(summary, verdicts, labels)
    for name, prof in profiles.items():
        print_profile(f"{name}: {labels[name]}", prof)
    doc = {
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(),
        "elapsed_s": round(time.time() - started, 1),
        "config": {k: v for k, v in vars(args).items() if k != "pg_url"},
        "environment": env,
        "load_seconds": {
            "small": round(load_small, 1),
            "big": None if load_big is None else round(load_big, 1),
        },
        "deals": {"phase1": args.deals, "phase2": expected[0] if args.big_deals else None},
        "summary": summary,
        "ratios": verdicts,
        "runs": [asdict(r) for r in bench.runs],
        "profiles": profiles,
    }
    out = RESULTS_DIR / f"bench-{stamp}.json"
    out.write_text(json.dumps(doc, indent=2, default=str))
    print(
        f"\nResults: {out.relative_to(REPO_ROOT)}   server log: {server.log_path.relative_to(REPO_ROOT)}"
    )
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    if not args.no_pin and can_pin():
        os.sched_setaffinity(0, {GENERATOR_CORE})
    db_url = f"{args.pg_url.rstrip('/')}/{args.db_name}"
    print(f"Creating database {args.db_name} and migrating …", flush=True)
    asyncio.run(recreate_database(args.pg_url, args.db_name))
    try:
        upgrade(db_url)  # sync: Alembic runs its own event loop
        client = asyncio.run(create_integration(db_url))
        asyncio.run(run(args, db_url, client, started))
    finally:
        if not args.keep_db:
            asyncio.run(drop_database(args.pg_url, args.db_name))
    print(f"Done in {time.time() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
