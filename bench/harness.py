"""What the benchmarks share: a fresh database, pinned processes, CPU accounting from /proc,
noise checks, percentiles, tables, results files, py-spy profiles and the load generator.

The load generator speaks raw HTTP/1.1 over asyncio streams on keep-alive connections, one
request in flight per connection. Its open loop is safe from coordinated omission: request
``i`` is due at ``start + i / rate`` and its latency counts from that time, so a stalled server
shows its queueing in p99 instead of slowing the generator down. See ``bench/README.md``.
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
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432"


def add_common_args(p: argparse.ArgumentParser, db_name: str) -> None:
    """The flags every benchmark on PostgreSQL takes."""
    p.add_argument(
        "--pg-url",
        default=os.environ.get("DEALBROKER_BENCH_PG_URL", PG_URL),
        help="PostgreSQL server URL without a database name (env DEALBROKER_BENCH_PG_URL)",
    )
    p.add_argument("--db-name", default=db_name, help="database to (re)create and drop")
    p.add_argument("--keep-db", action="store_true", help="do not drop the database at the end")
    p.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")


# --- Database ---------------------------------------------------------------------------------


def pg_dsn(sqlalchemy_url: str) -> str:
    """asyncpg's DSN for a SQLAlchemy ``postgresql+asyncpg://`` URL."""
    return sqlalchemy_url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def _recreate(server_url: str, name: str, create: bool) -> None:
    conn = await asyncpg.connect(pg_dsn(f"{server_url}/postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


@contextlib.contextmanager
def fresh_database(args: argparse.Namespace) -> Iterator[str]:
    """Drop and create ``--db-name``, migrate it and yield its URL; drop it at the end unless
    ``--keep-db``. Call it outside an event loop: Alembic runs its own."""
    from dealbroker.core.migrate import upgrade

    server_url = args.pg_url.rstrip("/")
    print(f"Creating database {args.db_name} and migrating …", flush=True)
    asyncio.run(_recreate(server_url, args.db_name, create=True))
    try:
        upgrade(f"{server_url}/{args.db_name}")
        yield f"{server_url}/{args.db_name}"
    finally:
        if not args.keep_db:
            asyncio.run(_recreate(server_url, args.db_name, create=False))


@dataclass
class Client:
    integration_id: uuid.UUID
    client_id: str
    client_secret: str
    webhook_secret: str


async def create_integration(db_url: str, name: str = "Benchmark marketplace") -> Client:
    """An integration made by the service itself, as the operator's CLI makes one."""
    from dealbroker.core.db import create_engine, create_sessionmaker
    from dealbroker.integrations import service as integrations

    engine = create_engine(db_url, pool_size=1)
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            created = await integrations.create(session, name)
    finally:
        await engine.dispose()
    i = created.integration
    return Client(i.id, i.client_id, created.client_secret, i.webhook_secret)


SELLER = {
    "firstname": "Kari",
    "lastname": "Nordmann",
    "phone": "+47 400 00 000",
    "address": "Storgata 1",
    "postcode": "0155",
    "town": "Oslo",
}


def create_deal_body(i: int) -> bytes:
    """The body of the benchmarks' ``POST /deals/v1/deals`` number ``i``: a realistic deal with
    seller data, its name, price, images and seller's e-mail varying with ``i``."""
    body = {
        "name": f"Road bike #{i}",
        "description": "Aluminium frame, 56 cm, lightly used. Pick-up in Oslo or shipping.",
        "price": 4500.5 + i % 100,
        "images": [f"https://cdn.example.com/bench/{i}-{n}.jpg" for n in (1, 2)],
        "packageType": "Large",
        "seller": {**SELLER, "email": f"seller{i}@example.com"},
    }
    return json.dumps(body, separators=(",", ":")).encode()


async def get_token(port: int, client: Client) -> str:
    import httpx

    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}") as http:
        response = await http.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(client.client_id, client.client_secret),
        )
    response.raise_for_status()
    return str(response.json()["access_token"])


# --- Processes --------------------------------------------------------------------------------


def can_pin(args: argparse.Namespace) -> bool:
    """Whether to pin processes: two cores or more, taskset at hand and no ``--no-pin``."""
    return (
        not args.no_pin
        and hasattr(os, "sched_setaffinity")
        and (os.cpu_count() or 1) >= 2
        and shutil.which("taskset") is not None
    )


@contextlib.contextmanager
def pinned(core: int | None) -> Iterator[None]:
    """Run this process on ``core`` for the block (no-op when None)."""
    if core is None:
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


def service_env(db_url: str, **extra: str) -> dict[str, str]:
    """This environment without its DEALBROKER_ settings, plus the bench database's and
    ``extra``; PYTHONPATH is kept, so an A/B run's other ``src`` reaches the child too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
    return env | {"DEALBROKER_DATABASE_URL": db_url, "DEALBROKER_LOG_LEVEL": "warning"} | extra


def settings_env(settings: list[str]) -> dict[str, str]:
    """``--setting NAME=VALUE`` options as environment variables (``DEALBROKER_NAME``)."""
    env = {}
    for setting in settings:
        name, _, value = setting.partition("=")
        env[f"DEALBROKER_{name.upper().removeprefix('DEALBROKER_')}"] = value
    return env


class Process:
    """A child process, pinned to ``core`` with taskset unless None, its output in a log."""

    def __init__(
        self, cmd: list[str], log_path: Path, env: dict[str, str], core: int | None, cwd: Path
    ) -> None:
        self.cmd = (["taskset", "-c", str(core)] if core is not None else []) + cmd
        self.core = core
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.cmd} exited with {self.proc.returncode}:\n{self.log()}")

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_worker(db_url: str, log: Path, core: int | None, **env: str) -> Process:
    """``python -m dealbroker worker`` on the bench database, with ``env`` on top."""
    cmd = [sys.executable, "-m", "dealbroker", "worker"]
    return Process(cmd, log, service_env(db_url, **env), core, Path(tempfile.gettempdir()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


# --- CPU accounting and noise -----------------------------------------------------------------


def proc_cpu(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds, from /proc/<pid>/stat (None if unreadable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # fields[0] is the state, field 3 of the man page
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def all_proc_cpu() -> dict[int, float]:
    """utime + stime of every process on the machine (every tenant), by pid."""
    return {
        int(e.name): cpu
        for e in os.scandir("/proc")
        if e.name.isdigit() and (cpu := proc_cpu(int(e.name))) is not None
    }


def machine_busy() -> tuple[float, float] | None:
    """Busy and stolen core-seconds of the whole machine since boot, from /proc/stat. Steal is
    time the hypervisor gave our virtual cores to someone else."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in first[1:9])
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


@dataclass
class Snapshot:
    wall: float
    own: float
    procs: dict[int, float]  # every process on the machine
    db: list[int]  # live backends of the bench database
    machine: tuple[float, float] | None
    sessions: int | None  # PostgreSQL sessions ever opened on the bench database


class CpuMeter:
    """CPU seconds of this process (``own``), of the named ``pids``, of the bench database's
    backends and of every other process on the machine (other tenants: the noise)."""

    def __init__(self, admin: asyncpg.Connection, db_name: str, own: str, **pids: int) -> None:
        self.admin, self.db_name, self.own, self.pids = admin, db_name, own, pids

    async def snapshot(self) -> Snapshot:
        rows = await self.admin.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            self.db_name,
        )
        sessions = None
        with contextlib.suppress(asyncpg.PostgresError):  # pg_stat_database.sessions: PG 14+
            await self.admin.execute("SELECT pg_stat_clear_snapshot()")
            sessions = await self.admin.fetchval(
                "SELECT sessions FROM pg_stat_database WHERE datname = $1", self.db_name
            )
        return Snapshot(
            time.perf_counter(),
            time.process_time(),
            all_proc_cpu(),
            [r["pid"] for r in rows],
            machine_busy(),
            sessions,
        )

    def delta(self, a: Snapshot, b: Snapshot) -> dict[str, float | None]:
        """CPU seconds spent between two snapshots. A process born in between counts whole;
        one that ended in between is missed: its time lands in ``unattributed_cpu_s``, as do
        interrupts and the backends that pool churn opened and closed."""

        def spent(pid: int) -> float | None:
            return None if pid not in b.procs else b.procs[pid] - a.procs.get(pid, 0.0)

        out: dict[str, float | None] = {
            "wall_s": b.wall - a.wall,
            f"{self.own}_cpu_s": b.own - a.own,
        }
        out |= {f"{name}_cpu_s": spent(pid) for name, pid in self.pids.items()}
        backends = {p for p in b.db if p in b.procs}
        out["db_cpu_s"] = sum(spent(p) or 0.0 for p in backends) if backends else None
        ours = {os.getpid(), *self.pids.values(), *a.db, *b.db}
        out["other_cpu_s"] = sum(spent(p) or 0.0 for p in b.procs if p not in ours)
        busy = steal = rest = None
        if a.machine and b.machine:
            busy, steal = b.machine[0] - a.machine[0], b.machine[1] - a.machine[1]
            parts = [v for k, v in out.items() if k != "wall_s"]
            rest = None if None in parts else busy - sum(parts)  # type: ignore[arg-type]
        out |= {"unattributed_cpu_s": rest, "machine_busy_s": busy, "steal_s": steal}
        new = None if a.sessions is None or b.sessions is None else b.sessions - a.sessions
        out["new_db_sessions"] = new
        return out

    async def measure(self, work: Awaitable[Any]) -> tuple[Any, dict[str, float | None]]:
        """Await ``work``; returns its result and the CPU spent meanwhile."""
        before = await self.snapshot()
        result = await work
        return result, self.delta(before, await self.snapshot())

    async def wait_quiet(self, max_other: float, seconds: float) -> float | None:
        """Wait up to ``seconds`` for the other processes to use less than ``max_other`` of a
        core (we are idle meanwhile); returns the share last seen."""
        deadline = time.monotonic() + seconds
        while True:
            _, cpu = await self.measure(asyncio.sleep(0.5))
            load = share(cpu, "other_cpu_s")
            if load is None or load <= max_other or time.monotonic() >= deadline:
                return load


def share(cpu: dict[str, float | None], key: str) -> float | None:
    """CPU seconds of ``key`` as a share of one core over the window."""
    value, wall = cpu.get(key), cpu.get("wall_s")
    return None if value is None or not wall else value / wall


# --- Statistics, tables, results --------------------------------------------------------------


def percentile(sorted_values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (NaN when empty)."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(1, math.ceil(pct / 100 * len(sorted_values))) - 1]


def median(values: Sequence[float | None]) -> float | None:
    """Median of the known values (None and NaN left out); None when there are none."""
    known = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(known) if known else None


def div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted, or ``-`` when unknown."""
    return "-" if value is None or math.isnan(value) else format(value, spec)


def pct(value: float | None) -> str:
    return fmt(None if value is None else value * 100, ".0f") + ("%" if value is not None else "")


def print_table(columns: Sequence[tuple[str, int]], rows: Sequence[Sequence[str]]) -> None:
    """A plain table; a negative width left-aligns the column."""

    def line(cells: Sequence[str]) -> str:
        return " ".join(
            f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, (_, w) in zip(cells, columns, strict=True)
        )

    print(line([name for name, _ in columns]))
    for row in rows:
        print(line(row))


def stamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def write_results(name: str, doc: dict[str, Any]) -> Path:
    """``doc`` as ``bench/results/<name>.json``; returns the path relative to the checkout."""
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"{name}.json"
    out.write_text(json.dumps(doc, indent=2, default=str))
    return out.relative_to(REPO_ROOT)


def environment(**extra: Any) -> dict[str, Any]:
    """Facts that explain the numbers, and which dealbroker the run imported (PYTHONPATH may
    point elsewhere than this checkout) with a hash of its Python files."""
    import dealbroker

    package = Path(dealbroker.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    git = ["git", "describe", "--always", "--dirty"]
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
        "git": subprocess.run(git, cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip(),
        "dealbroker_source": str(
            package.relative_to(REPO_ROOT) if package.is_relative_to(REPO_ROOT) else package
        ),
        "dealbroker_sha256": digest.hexdigest()[:16],
        **extra,
    }


# --- Profiles with py-spy ---------------------------------------------------------------------


async def profile(pid: int, out: Path, work: Awaitable[Any], rate: int = 250) -> bool:
    """Record ``pid`` with py-spy while awaiting ``work``; collapsed stacks into ``out``."""
    beside = Path(sys.executable).with_name("py-spy")
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        print("  py-spy not found: .venv/bin/pip install py-spy", flush=True)
        if asyncio.iscoroutine(work):
            work.close()
        return False
    cmd = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, "--format", "raw", "--output", str(out), stdout=subprocess.DEVNULL, stderr=-1
    )
    await asyncio.sleep(1.0)  # let py-spy attach before the load starts
    await work
    proc.send_signal(signal.SIGINT)
    _, err = await proc.communicate()
    if not out.exists():
        print(f"  py-spy failed: {err.decode(errors='replace')[-300:]}", flush=True)
    return out.exists()


# For a process that sends HTTP (the webhook worker): samples whose stack holds one of these
# layers (the first group that matches) count to that group.
CLIENT_GROUPS = {
    "HTTP client (aiohttp, yarl, multidict)": {"aiohttp", "yarl", "multidict"},
    "HTTP client (httpx, httpcore, h11, anyio)": {"httpx", "httpcore", "h11", "anyio"},
    "database (sqlalchemy, asyncpg)": {"sqlalchemy", "asyncpg"},
}
LAYERS = {"dealbroker", "fastapi", "starlette", "pydantic", "uvicorn", "asyncio"}
LAYERS |= set().union(*CLIENT_GROUPS.values())


def summarize_profile(
    raw: Path, top: int = 12, groups: dict[str, set[str]] | None = None
) -> dict[str, Any]:
    """Shares of py-spy's collapsed samples: by the leaf frame's layer (its top-level package),
    by leaf function (self), by dealbroker function anywhere on the stack (inclusive), by
    ``groups`` of layers on the stack when given, and inside the import machinery (an import
    failing on a hot path)."""
    by_layer, self_time, inclusive, in_group = Counter[str](), Counter[str](), Counter(), Counter()
    importing = total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = []
        for frame in stack.split(";") if count_text.isdigit() else ():
            name, paren, where = frame.partition(" (")
            path = where.rsplit(":", 1)[0]
            layer = path.split("/", 1)[0]
            if paren:
                frames.append(
                    (f"{name} ({path})", layer if layer in LAYERS else "other (stdlib, C)")
                )
        if not frames:
            continue
        count = int(count_text)
        total += count
        importing += count if "<frozen importlib" in stack else 0
        by_layer[frames[-1][1]] += count
        self_time[frames[-1][0]] += count
        for name in {n for n, layer in frames if layer == "dealbroker"}:
            inclusive[name] += count
        on_stack = {layer for _, layer in frames}
        group = next(
            (g for g, ls in (groups or {}).items() if on_stack & ls),
            "rest (event loop, signing, ...)",
        )
        in_group[group] += count

    def shares(counter: Counter[str], n: int | None = None) -> list[tuple[str, float]]:
        return [(k, round(v / total, 4)) for k, v in counter.most_common(n)] if total else []

    return {
        "raw": str(raw.relative_to(REPO_ROOT)),
        "samples": total,
        "self_by_layer": shares(by_layer),
        "self_by_function": shares(self_time, top),
        "dealbroker_inclusive": shares(inclusive, top),
        "stack_contains": shares(in_group) if groups else None,
        "importlib_share": round(importing / total, 4) if total else 0.0,
    }


def print_profile(title: str, prof: dict[str, Any], note: str = "") -> None:
    print(f"\nProfile of {title} ({prof['samples']} CPU samples{note})")
    if prof["stack_contains"] is not None:
        held = ", ".join(f"{k} {v:.0%}" for k, v in prof["stack_contains"])
        print(f"  samples whose stack holds: {held}")
        share = prof["importlib_share"]
        print(f"  samples inside importlib (an import retried on every request): {share:.0%}")
    print("  by layer (leaf frame): " + ", ".join(f"{k} {v:.0%}" for k, v in prof["self_by_layer"]))
    for heading, key in (
        ("top functions (self)", "self_by_function"),
        ("dealbroker functions (inclusive)", "dealbroker_inclusive"),
    ):
        print(f"  {heading}:")
        for k, v in prof[key]:
            print(f"    {v:6.1%}  {k}")


# --- The load generator -----------------------------------------------------------------------


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
        """Send ``request``, read the whole response by its Content-Length: status, body."""
        if self.writer is None:
            await self.open()
        assert self.reader is not None
        assert self.writer is not None
        self.writer.write(request)
        head = (await self.reader.readuntil(b"\r\n\r\n")).lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            raise RuntimeError(f"response without Content-Length: {head[:200]!r}")
        body = await self.reader.readexactly(int(head[at + 17 : head.index(b"\r\n", at + 2)]))
        if b"\r\nconnection: close" in head:
            await self.close()
        return int(head[9:12]), body


@dataclass
class LoadResult:
    """What one closed- or open-loop run saw (latencies in seconds)."""

    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    wall: float = 0.0
    late: int = 0  # open loop: requests that found every connection busy when due
    timer_lag: list[float] = field(default_factory=list)  # open loop: wake-up minus due time
    unsent: int = 0

    def summary(self) -> dict[str, Any]:
        lat, lag = sorted(self.latencies), sorted(self.timer_lag)

        def ms(pct: float, values: list[float] = lat) -> float:
            return round(percentile(values, pct) * 1000, 3)

        return {
            "achieved_rps": round(self.completed / self.wall, 1) if self.wall else 0.0,
            "completed": self.completed,
            "errors": dict(self.errors),
            "p50_ms": ms(50),
            "p90_ms": ms(90),
            "p99_ms": ms(99),
            "max_ms": ms(100),
            "late_share": round(self.late / (self.completed or 1), 4),
            "timer_lag_p99_ms": ms(99, lag) if lag else None,
            "unsent": self.unsent,
        }


async def _load(
    port: int, requests: Sequence[bytes], expect: int, conns: int, send: Any
) -> LoadResult:
    """Run ``send(conn, one, result)`` on each of ``conns`` connections until it returns."""
    result = LoadResult()
    pool = [Conn(port) for _ in range(conns)]
    await asyncio.gather(*(c.open() for c in pool))

    async def one(conn: Conn, request: bytes) -> None:
        try:
            status, _ = await conn.exchange(request)
        except (
            OSError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            RuntimeError,
        ) as exc:
            result.errors[type(exc).__name__] += 1
            await conn.close()
            return
        if status != expect:
            result.errors[f"HTTP {status}"] += 1

    start = time.perf_counter()
    try:
        await asyncio.gather(*(send(c, one, result, start) for c in pool))
    finally:
        result.wall = time.perf_counter() - start
        await asyncio.gather(*(c.close() for c in pool))
    return result


async def closed_loop(
    port: int, requests: Sequence[bytes], expect: int, conns: int, duration: float
) -> LoadResult:
    """Every connection sends its next request as soon as the last one is answered."""
    picks = itertools.count()

    async def send(conn: Conn, one: Any, result: LoadResult, start: float) -> None:
        while (sent := time.perf_counter()) < start + duration:
            await one(conn, requests[next(picks) % len(requests)])
            result.latencies.append(time.perf_counter() - sent)
            result.completed += 1

    return await _load(port, requests, expect, conns, send)


async def open_loop(
    port: int, requests: Sequence[bytes], expect: int, conns: int, rate: float, duration: float
) -> LoadResult:
    """Request ``i`` is due at ``start + i / rate``; the next free connection sends it.

    Latency counts from the due time: a request that had to wait for a free connection (the
    server was slow) carries that wait. Sending stops after three times ``duration``."""
    total = max(1, int(rate * duration))
    picks = itertools.count()

    async def send(conn: Conn, one: Any, result: LoadResult, start: float) -> None:
        start += 0.05  # every connection is open: the first request is due a little later
        while (i := next(picks)) < total:
            due = start + i / rate
            now = time.perf_counter()
            if now > start + 3 * duration:
                result.unsent += 1
                continue
            if due > now:
                await asyncio.sleep(due - now)
                result.timer_lag.append(time.perf_counter() - due)
            else:
                result.late += 1
            await one(conn, requests[i % len(requests)])
            result.latencies.append(time.perf_counter() - due)
            result.completed += 1

    return await _load(port, requests, expect, conns, send)
