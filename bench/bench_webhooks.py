"""Benchmark of webhook delivery: one real ``dealbroker worker`` process, a real PostgreSQL, a
real ``dealbroker serve`` for the API and a loopback receiver process, over HTTP/1.1 on
127.0.0.1.

It measures, on a fresh database:

(a) throughput: the worker is stopped (SIGSTOP), ``--events`` deals are created through the API
    (one ``deal.created`` delivery each), then the worker is continued (SIGCONT) and drains the
    backlog; deliveries/s = events / (last arrival - continue), worker CPU per delivery from
    ``/proc``, repeats and lost as the receiver counts them;
(b) idle cost and latency: events emitted at a fixed ``--rate`` in small transactions while the
    worker runs; the worker's CPU as a share of one core, and latency = arrival time at the
    receiver - commit time in this process (both ``time.time()``);
(c) the baseline: a bare aiohttp loop, ``--batch-size`` concurrent tasks, POSTing the same
    signed bodies (the backlog's events) to the same receiver, from this process pinned to the
    worker's core.

The worker is pinned to core 0; the receiver, the API server and PostgreSQL run on core 1. When
a target is missed (or with ``--profile always``) one more throughput round runs under py-spy.
``--receiver --port P`` runs only the receiver (``ready <port>`` once listening). See
``bench/README.md``.
"""

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import harness as h

WORKER_CORE, RECEIVER_CORE = 0, 1
SERVER_CORE = RECEIVER_CORE  # the API server only works while the worker is stopped
HOOK_PATH = "/hooks"
API_CONNECTIONS = 8  # keep-alive connections creating the backlog
NOISY_OTHER = 0.25  # others' busy time (share of one core) above which a phase is noisy
TARGETS = {  # name -> (comparison, threshold)
    "worker deliveries/s": (">=", 1000.0),
    "worker / bare loop": (">=", 0.5),
    "worker / bare loop, by CPU per request": (">=", 0.5),
    "worker CPU share at --rate": ("<=", 0.20),
    "latency p50 ms": ("<=", 10.0),
    "latency p99 ms": ("<=", 50.0),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``--quick`` shrinks the run to well under a minute."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    h.add_common_args(p, "dealbroker_bench_webhooks")
    add = p.add_argument
    add("--quick", action="store_true", help="smoke run: 1 round, fewer events")
    add("--events", type=int, help="queued events per throughput round (10000)")
    add("--rounds", type=int, help="throughput and bare-loop rounds (3); medians")
    add("--batch-size", type=int, default=200, help="worker batch = bare loop's tasks")
    add("--rate", type=float, default=200.0, help="events/s in the latency phase")
    add("--per-tx", type=int, default=1, help="events per transaction (latency)")
    add("--latency-seconds", type=float, help="measured latency phase (10 s)")
    add("--warmup", type=float, default=1.0, help="unmeasured start of latency phase")
    add(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help="py-spy the worker under one extra throughput round: when a target is missed (auto)",
    )
    add(
        "--profile-idle",
        action="store_true",
        help="also py-spy the worker under one more phase at --rate events/s (its idle cost)",
    )
    add(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a DEALBROKER_ setting for the worker, e.g. FAST_PATHS=false (repeatable)",
    )
    add("--receiver", action="store_true", help=argparse.SUPPRESS)
    add("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    quick = args.quick
    args.events = args.events or (2_000 if quick else 10_000)
    args.rounds = args.rounds or (1 if quick else 3)
    args.latency_seconds = args.latency_seconds or (4.0 if quick else 10.0)
    return args


# --- The receiver: its own process, raw HTTP/1.1 on asyncio, answers 200 at once ---------------


class ReceiverProtocol(asyncio.Protocol):
    """Keep-alive HTTP/1.1 with Content-Length bodies, pipelining-safe. Records
    ``(webhook-id, time.time())`` of every webhook; ``/_stats``, ``/_dump`` and ``/_reset``
    let the bench read and clear them, and the TCP connections opened, between phases."""

    arrivals: list[tuple[str, float]] = []
    unique: set[str] = set()
    connections = 0  # opened since the last reset: shows connection churn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        ReceiverProtocol.connections += 1
        self.transport: Any = transport  # uvloop's transport is not an asyncio.Transport
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = bytes(self.buffer[:end]).split(b"\r\n")
            fields = {}
            for line in head[1:]:
                name, _, value = line.partition(b":")
                fields[name.strip().lower()] = value.strip()
            total = end + 4 + int(fields.get(b"content-length", 0))
            if len(self.buffer) < total:
                return
            del self.buffer[:total]
            webhook_id = fields.get(b"webhook-id")
            if webhook_id is None:
                self.transport.write(self._control(head[0].split(b" ")[1]))
                continue
            self.arrivals.append((webhook_id.decode(), time.time()))
            self.unique.add(self.arrivals[-1][0])
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")

    def _control(self, path: bytes) -> bytes:
        cls = ReceiverProtocol
        if path == b"/_stats":
            stats = {"requests": len(cls.arrivals), "unique": len(cls.unique)}
            body = json.dumps(stats | {"connections": cls.connections}).encode()
        elif path == b"/_dump":
            body = json.dumps(cls.arrivals).encode()
        elif path == b"/_reset":
            cls.arrivals.clear()
            cls.unique.clear()
            cls.connections = 0
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
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            ReceiverProtocol, h.HOST, port, backlog=4096, reuse_address=True
        )
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
        await stop.wait()
        server.close()

    asyncio.run(serve())


class Receiver:
    """The receiver subprocess, and a client for its control paths on one kept-alive raw
    connection (cheap enough to poll often)."""

    def __init__(self, core: int | None) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--receiver", "--port", "0"]
        cmd = (["taskset", "-c", str(core)] if core is not None else []) + cmd
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("ready "):
            self.stop()
            raise RuntimeError(f"receiver did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://{h.HOST}:{self.port}{HOOK_PATH}"
        self.control = h.Conn(self.port)

    async def get(self, path: str) -> Any:
        """GET ``/_stats``, ``/_dump`` or ``/_reset``; the decoded JSON body."""
        status, body = await self.control.exchange(h.build_request("GET", path, self.port, {}))
        if status != 200:
            raise RuntimeError(f"receiver: HTTP {status} for {path}")
        return json.loads(body)

    async def wait_for(self, unique: int, timeout: float) -> bool:
        """Until ``unique`` distinct webhook-ids have arrived; False on timeout."""
        deadline = time.monotonic() + timeout
        while (await self.get("/_stats"))["unique"] < unique:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def stop(self) -> None:
        if self.control.writer is not None:
            self.control.writer.close()
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=5)


# --- The bench database, through the service's own code -----------------------------------------


class Database:
    def __init__(self, db_url: str) -> None:
        from dealbroker.core.db import create_engine, create_sessionmaker

        self.engine = create_engine(db_url, pool_size=8)
        self.sessionmaker = create_sessionmaker(engine=self.engine)

    async def setup(self, db_url: str, receiver_url: str) -> None:
        """An integration and an endpoint at the receiver (sandbox: loopback allowed)."""
        from dealbroker.core.settings import Settings
        from dealbroker.events import service as events

        self.client = await h.create_integration(db_url, "Webhook bench")
        settings = Settings(environment="sandbox", embedded_worker="off")  # type: ignore[arg-type]
        async with self.sessionmaker() as session, session.begin():
            endpoint = await events.create_endpoint(
                session,
                self.client.integration_id,
                settings,
                url=receiver_url,
                event_kinds=None,
                description="bench receiver",
                enabled=True,
            )
        self.endpoint_id = endpoint.id

    async def emit(self, count: int) -> list[tuple[str, float]]:
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
                        self.client.integration_id,
                        EventKind.DEAL_STATUS,
                        data,
                        endpoint_ids=[self.endpoint_id],
                    )
                    ids.append(str(event.id))
            committed = time.time()
        return [(i, committed) for i in ids]

    async def delivered(self, after_seq: int) -> dict[str, int]:
        """The deliveries of the events after ``after_seq``, counted by status."""
        from sqlalchemy import func, select

        from dealbroker.events.models import Delivery

        async with self.sessionmaker() as session:
            rows = await session.execute(
                select(Delivery.status, func.count())
                .where(Delivery.event_seq > after_seq)
                .group_by(Delivery.status)
            )
            return {status: int(n) for status, n in rows}

    async def payloads(self, after_seq: int) -> list[tuple[str, str]]:
        """(event id, payload) of the events after ``after_seq``: the bodies the worker sent."""
        from sqlalchemy import select

        from dealbroker.events.models import Event

        async with self.sessionmaker() as session:
            rows = await session.execute(
                select(Event.id, Event.payload).where(Event.seq > after_seq).order_by(Event.seq)
            )
            return [(str(i), payload) for i, payload in rows]

    async def scalar(self, query: Any) -> Any:
        async with self.sessionmaker() as session:
            return await session.scalar(query)

    async def wait_recorded(self, timeout: float = 30.0) -> int:
        """Until no delivery is pending (the worker recorded its last batch); what is left."""
        from sqlalchemy import func, select

        from dealbroker.events.models import Delivery

        pending = select(func.count()).select_from(Delivery).where(Delivery.status == "pending")
        deadline = time.monotonic() + timeout
        while (left := await self.scalar(pending)) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return int(left or 0)

    async def attempt_starts(self, event_ids: set[str]) -> dict[str, float]:
        """When the worker started the first attempt of each event (its ``attempted_at``)."""
        from sqlalchemy import func, select

        from dealbroker.events.models import DeliveryAttempt as A

        async with self.sessionmaker() as session:
            rows = await session.execute(
                select(A.event_id, func.min(A.attempted_at))
                .where(A.event_id.in_([uuid.UUID(i) for i in event_ids]))
                .group_by(A.event_id)
            )
            return {str(event_id): at.timestamp() for event_id, at in rows}


# --- Measurements --------------------------------------------------------------------------------


def cpu_shares(cpu: dict[str, float | None]) -> dict[str, float | None]:
    """Shares of one core; ``other`` is everything else on the machine (other tenants, exited
    processes, the kernel)."""
    other = (
        cpu["other_cpu_s"]
        if cpu["unattributed_cpu_s"] is None
        else cpu["other_cpu_s"] + cpu["unattributed_cpu_s"]
    )  # type: ignore[operator]
    keys = {"worker": "worker_cpu_s", "receiver": "receiver_cpu_s", "bench": "bench_cpu_s"}
    keys |= {"postgres": "db_cpu_s", "machine": "machine_busy_s"}
    return {k: h.share(cpu, v) for k, v in keys.items()} | {"other": h.div(other, cpu["wall_s"])}


def repeats(arrivals: Sequence[tuple[str, float]]) -> int:
    return len(arrivals) - len({i for i, _ in arrivals})


class Api:
    """``dealbroker serve`` on the bench database, pinned to ``SERVER_CORE``: the backlog is made
    through the API, as an integration makes it."""

    SELLER = {"firstname": "Kari", "lastname": "Nordmann", "phone": "+47 400 00 000"} | {
        "address": "Storgata 1",
        "postcode": "0155",
        "town": "Oslo",
    }

    def __init__(self, db_url: str, log: Path, core: int | None) -> None:
        self.port = h.free_port()
        cmd = [sys.executable, "-m", "dealbroker", "serve", "--host", h.HOST]
        env = h.service_env(
            db_url,
            DEALBROKER_RATE_LIMIT_REQUESTS_PER_MINUTE="1000000000",  # never reached here
            DEALBROKER_EMBEDDED_WORKER="off",
        )
        cmd += ["--port", str(self.port)]
        self.process = h.Process(cmd, log, env, core, Path(tempfile.gettempdir()))

    async def ready(self, client: h.Client) -> None:
        """Until the server answers; then takes a token for ``client``."""
        ping = h.build_request("GET", "/ping", self.port, {})
        for _ in range(600):
            self.process.check_alive()
            conn = h.Conn(self.port)
            try:
                if (await conn.exchange(ping))[0] == 200:
                    break
            except OSError:
                pass
            finally:
                await conn.close()
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"server did not answer:\n{self.process.log()}")
        token = await h.get_token(self.port, client)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def create_request(self, i: int) -> bytes:
        body = {
            "name": f"Road bike #{i}",
            "description": "Aluminium frame, 56 cm, lightly used. Pick-up in Oslo or shipping.",
            "price": 4500.5 + i % 100,
            "packageType": "Large",
            "seller": {**self.SELLER, "email": f"seller{i % 1000}@example.com"},
        }
        data = json.dumps(body, separators=(",", ":")).encode()
        return h.build_request("POST", "/deals/v1/deals", self.port, self.headers, data)

    async def create_deals(self, n: int) -> None:
        """``n`` deals through ``POST /deals/v1/deals`` on ``API_CONNECTIONS`` connections."""
        numbers = iter(range(n))

        async def run() -> None:
            conn = h.Conn(self.port)
            try:
                for i in numbers:
                    status, body = await conn.exchange(self.create_request(i))
                    if status != 201:
                        raise RuntimeError(f"create answered {status}: {body[:300]!r}")
            finally:
                await conn.close()

        await asyncio.gather(*(run() for _ in range(API_CONNECTIONS)))

    def stop(self) -> None:
        self.process.stop()


async def new_event_ids(db: Database, after_seq: int) -> list[str]:
    from sqlalchemy import select

    from dealbroker.events.models import Event

    async with db.sessionmaker() as session:
        ids = await session.scalars(select(Event.id).where(Event.seq > after_seq))
        return [str(i) for i in ids]


async def last_seq(db: Database) -> int:
    from sqlalchemy import func, select

    from dealbroker.events.models import Event

    return int(await db.scalar(select(func.coalesce(func.max(Event.seq), 0))))


async def make_backlog(
    db: Database, api: Api, receiver: Receiver, worker: h.Process, events: int
) -> tuple[int, list[str], float]:
    """Stop the worker (SIGSTOP) and create ``events`` deals through the API; returns the last
    event before them, their events' ids and the rate they were made at. The worker stays
    stopped: ``drain_backlog``."""
    after = await last_seq(db)
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        await receiver.get("/_reset")
        made = time.perf_counter()
        await api.create_deals(events)
        made = time.perf_counter() - made
        ids = await new_event_ids(db, after)
        if len(ids) != events:
            raise RuntimeError(f"{events} deals made {len(ids)} events")
    except BaseException:
        os.kill(worker.pid, signal.SIGCONT)
        raise
    await asyncio.sleep(1.0)  # the server's request log flushes once a second
    return after, ids, events / made


async def drain_backlog(
    db: Database,
    receiver: Receiver,
    worker: h.Process,
    meter: h.CpuMeter,
    backlog: tuple[int, list[str], float],
) -> dict[str, Any]:
    """Continue the worker (SIGCONT) and time until every delivery of ``ids`` has arrived;
    count repeats and lost as the receiver saw them, and what the worker recorded."""
    after, ids, created_per_s = backlog
    events = len(ids)

    async def drain() -> float:
        os.kill(worker.pid, signal.SIGCONT)
        t0 = time.time()
        await receiver.wait_for(events, timeout=max(60.0, events / 50))
        return t0

    try:
        t0, cpu = await meter.measure(drain())
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    arrivals = await receiver.get("/_dump")
    connections = (await receiver.get("/_stats"))["connections"]
    wanted = set(ids)
    arrived = {i for i, _ in arrivals if i in wanted}
    times = sorted(t for _, t in arrivals)
    seconds, span = times[-1] - t0, times[-1] - times[0]
    left = await db.wait_recorded()
    statuses = await db.delivered(after)
    return {
        "events": events,
        "created_per_s": created_per_s,
        "seconds": seconds,
        "deliveries_per_s": len(arrived) / seconds,
        "first_to_last_per_s": (len(arrived) - 1) / span if span > 0 else math.nan,
        "repeats": repeats(arrivals),
        "lost": events - len(arrived),
        "recorded": statuses,
        "left_pending": left,
        "cpu": cpu_shares(cpu),
        "worker_cpu_us_per_delivery": h.div(cpu["worker_cpu_s"], events / 1e6),
        "postgres_cpu_us_per_delivery": h.div(cpu["db_cpu_s"], events / 1e6),
        "new_connections": connections,  # our control connection predates the reset
    }


async def latency_phase(
    db: Database, receiver: Receiver, meter: h.CpuMeter, args: argparse.Namespace
) -> dict[str, Any]:
    """Emit at ``--rate`` events/s in transactions of ``--per-tx``, each started on schedule in
    its own task; latency per event = first arrival - commit time."""
    await receiver.get("/_reset")
    tx_rate = args.rate / args.per_tx
    commits: dict[str, float] = {}
    measured: set[str] = set()
    limit = asyncio.Semaphore(16)

    async def one(k: int) -> None:
        async with limit:
            for event_id, committed in await db.emit(args.per_tx):
                commits[event_id] = committed
                if k >= args.warmup * tx_rate:
                    measured.add(event_id)

    async def emit_all() -> tuple[int, float]:
        late, tasks, start = 0, [], time.perf_counter()
        for k in range(math.ceil((args.warmup + args.latency_seconds) * tx_rate)):
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
        return late, emitted_for

    (late, emitted_for), cpu = await meter.measure(emit_all())
    arrivals = await receiver.get("/_dump")
    first: dict[str, float] = {}
    for event_id, at in arrivals:
        first.setdefault(event_id, at)
    await db.wait_recorded()
    started = await db.attempt_starts(measured)

    def ms(pairs: Sequence[tuple[float, float]]) -> list[float]:
        return sorted((b - a) * 1000 for a, b in pairs)

    latencies = ms([(commits[i], first[i]) for i in measured])
    queued = ms([(commits[i], started[i]) for i in measured if i in started])
    sending = ms([(started[i], first[i]) for i in measured if i in started])
    return {
        "rate": args.rate,
        "per_tx": args.per_tx,
        "seconds": args.latency_seconds,
        "measured_events": len(latencies),
        "achieved_rate": len(commits) / emitted_for,
        **{f"p{p}_ms": h.percentile(latencies, p) for p in (50, 90, 99)},
        "max_ms": latencies[-1],
        "late_tx": late,
        "repeats": repeats(arrivals),
        "cpu": cpu_shares(cpu),
        "worker_cpu_us_per_event": h.div(cpu["worker_cpu_s"], len(commits) / 1e6),
        # Where the time goes, from the worker's attempt rows: commit -> start of the attempt
        # (waiting to be claimed), start of the attempt -> arrival (signing and HTTP).
        **{f"queued_p{p}_ms": h.percentile(queued, p) for p in (50, 99)},
        **{f"sending_p{p}_ms": h.percentile(sending, p) for p in (50, 99)},
    }


async def bare_round(
    receiver: Receiver, bodies: Sequence[tuple[str, str]], secret: str, tasks: int, kind: str
) -> dict[str, Any]:
    """POST every ``(event id, payload)`` of ``bodies`` from ``tasks`` concurrent tasks, each
    taking the next body as soon as its last POST was answered, signed headers built beforehand
    (the same bodies and webhook ids the worker sent). ``kind`` "plain": an aiohttp session
    keeping every connection alive; "worker": the worker's own session (``webhook_session``,
    egress guard included) with its limits."""
    import aiohttp

    from dealbroker.events.egress import webhook_session
    from dealbroker.events.signing import signed_headers

    await receiver.get("/_reset")
    now = datetime.now(UTC)
    requests = [
        (payload.encode(), signed_headers([secret], event_id, now, payload))
        for event_id, payload in bodies
    ]
    if kind == "plain":
        connector = aiohttp.TCPConnector(limit=tasks)
        session = aiohttp.ClientSession(connector=connector, trust_env=False)
    else:
        session = webhook_session(allow_private=True, max_connections=tasks)
    numbers = iter(range(len(requests)))

    async def run() -> None:
        for i in numbers:
            body, headers = requests[i]
            async with session.post(receiver.url, data=body, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError("bare loop: the receiver did not answer 200")

    async with session:
        cpu, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(run() for _ in range(tasks)))
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    connections = (await receiver.get("/_stats"))["connections"]
    n = len(requests)
    return {
        "client": kind,
        "requests": n,
        "seconds": seconds,
        "per_s": n / seconds,
        "cpu_us_per_post": cpu * 1e6 / n,
        "new_connections": connections,
    }


# --- Report ------------------------------------------------------------------------------------


def judge(name: str, value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    op, threshold = TARGETS[name]
    met = {">=": value >= threshold, "<=": value <= threshold}[op]
    return "met" if met else "MISSED"


def print_report(s: dict[str, Any]) -> None:
    lat = s["latency"]
    rows = [
        ("worker deliveries/s", s["worker_per_s"], ".0f"),
        ("bare loop POST/s (aiohttp, keep-alive)", s["bare_plain_per_s"], ".0f"),
        ("bare loop POST/s (worker's client)", s["bare_worker_client_per_s"], ".0f"),
        ("worker / bare loop", s["ratio"], ".2f"),
        ("worker CPU us per delivery", s["worker_cpu_us_per_delivery"], ".0f"),
        ("postgres CPU us per delivery", s["postgres_cpu_us_per_delivery"], ".0f"),
        ("bare loop CPU us per POST (cheaper client)", s["bare_cpu_us_per_post"], ".0f"),
        ("worker / bare loop, by CPU per request", s["ratio_by_cpu"], ".2f"),
        ("worker CPU us per event at --rate", lat["worker_cpu_us_per_event"], ".0f"),
        ("worker CPU share at --rate", lat["worker_share"], ".2f"),
        ("latency p50 ms", lat["p50_ms"], ".1f"),
        ("latency p99 ms", lat["p99_ms"], ".1f"),
        ("latency max ms", lat["max_ms"], ".1f"),
    ]
    print()
    h.print_table(
        [("measure", -42), ("value", 9), ("target", 9), (" result", -7)],
        [
            [name, h.fmt(value, spec)]
            + (
                [f"{TARGETS[name][0]} {TARGETS[name][1]:g}", " " + judge(name, value)]
                if name in TARGETS
                else ["", ""]
            )
            for name, value, spec in rows
        ],
    )
    print(
        f"\nbacklog: {s['events']} deals made through the API while the worker was stopped; "
        f"repeats {s['repeats']['throughput']}, lost {s['lost']}, "
        f"first to last arrival {s['first_to_last_per_s']:.0f}/s"
    )
    print(
        f"latency at {lat['rate']:g} events/s offered ({lat['achieved_rate']:.0f} achieved, "
        f"{lat['rate'] / s['worker_per_s']:.0%} of the measured throughput), "
        f"{lat['per_tx']} per transaction, {lat['measured_events']} events measured, "
        f"{lat['late_tx']} transactions started late, p90 {lat['p90_ms']:.1f} ms"
    )
    print(
        f"latency breakdown: commit -> attempt start p50 {lat['queued_p50_ms']:.1f} ms, "
        f"p99 {lat['queued_p99_ms']:.1f} ms; attempt start -> arrival p50 "
        f"{lat['sending_p50_ms']:.1f} ms, p99 {lat['sending_p99_ms']:.1f} ms"
    )
    per_1000 = ", ".join(f"{k} {v:.0f}" for k, v in s["connections_per_1000"].items())
    print(f"new TCP connections per 1000 requests: {per_1000}")
    print("repeats: " + ", ".join(f"{k} {v}" for k, v in s["repeats"].items()))
    print("\nCPU, share of one core over the measured window:")
    columns = ("worker", "receiver", "bench", "postgres", "other", "machine")
    h.print_table(
        [("  phase", -24)] + [(c, 9) for c in columns],
        [
            [f"  {phase}"] + [h.pct(shares[c]) for c in columns]
            for phase, shares in s["cpu"].items()
        ],
    )
    if s["noisy_phases"]:
        print(
            f"  warning: other load above {NOISY_OTHER:.0%} of a core during "
            f"{', '.join(s['noisy_phases'])}: another tenant shared our cores, so these figures "
            "understate the worker"
        )


def summarize(throughput: list[dict], bare: list[dict], latency: dict[str, Any]) -> dict[str, Any]:
    def med(rows: list[dict], key: str, client: str | None = None) -> float:
        value = h.median([r[key] for r in rows if client in (None, r.get("client"))])
        return math.nan if value is None else value

    worker = med(throughput, "deliveries_per_s")
    plain, same = med(bare, "per_s", "plain"), med(bare, "per_s", "worker")
    # The target compares with the faster and cheaper of the two bare loops, so that a
    # baseline slowed by its own client settings cannot flatter the worker.
    worker_cpu = med(throughput, "worker_cpu_us_per_delivery")
    bare_cpu = min(med(bare, "cpu_us_per_post", kind) for kind in ("plain", "worker"))
    for r in throughput + bare:
        r["per_1000"] = r["new_connections"] * 1000 / r.get("events", r.get("requests"))
    mid = sorted(throughput, key=lambda t: t["deliveries_per_s"])[len(throughput) // 2]
    # At the offered rate: the worker's CPU per event times the rate, so that a generator
    # slowed by other tenants (achieving less than --rate) does not flatter the worker.
    per_event = latency["worker_cpu_us_per_event"]
    latency["worker_share"] = None if per_event is None else per_event * latency["rate"] / 1e6
    summary = {
        "events": throughput[0]["events"],
        "worker_per_s": worker,
        "first_to_last_per_s": med(throughput, "first_to_last_per_s"),
        "bare_plain_per_s": plain,
        "bare_worker_client_per_s": same,
        "ratio": worker / max(plain, same),
        "worker_cpu_us_per_delivery": worker_cpu,
        "postgres_cpu_us_per_delivery": med(throughput, "postgres_cpu_us_per_delivery"),
        "bare_cpu_us_per_post": bare_cpu,
        "ratio_by_cpu": h.div(bare_cpu, worker_cpu),
        "lost": sum(t["lost"] for t in throughput),
        "connections_per_1000": {
            "worker": med(throughput, "per_1000"),
            "bare (plain)": med(bare, "per_1000", "plain"),
            "bare (worker)": med(bare, "per_1000", "worker"),
        },
        "latency": latency,
        "repeats": {
            "throughput": sum(t["repeats"] for t in throughput),
            "latency": latency["repeats"],
        },
        "cpu": {"throughput (median)": mid["cpu"], "latency": latency["cpu"]},
    }
    judged = {
        "worker deliveries/s": worker,
        "worker / bare loop": summary["ratio"],
        "worker / bare loop, by CPU per request": summary["ratio_by_cpu"],
        "worker CPU share at --rate": latency["worker_share"],
        "latency p50 ms": latency["p50_ms"],
        "latency p99 ms": latency["p99_ms"],
    }
    summary["targets"] = {k: judge(k, v) for k, v in judged.items()}
    noisy = [p for p, shares in summary["cpu"].items() if (shares["other"] or 0) > NOISY_OTHER]
    return summary | {"noisy_phases": noisy}


# --- Orchestration -----------------------------------------------------------------------------


async def bench(args: argparse.Namespace, db_url: str, stamp: str, pin: bool) -> dict[str, Any]:
    import asyncpg

    receiver = Receiver(RECEIVER_CORE if pin else None)
    db = Database(db_url)
    worker = api = None
    admin = await asyncpg.connect(h.pg_dsn(db_url))
    doc: dict[str, Any] = {"throughput": [], "bare": []}
    try:
        await db.setup(db_url, receiver.url)
        api = Api(
            db_url, h.RESULTS_DIR / f"webhooks-server-{stamp}.log", SERVER_CORE if pin else None
        )
        await api.ready(db.client)
        log = h.RESULTS_DIR / f"webhooks-worker-{stamp}.log"
        batch = str(args.batch_size)
        worker = h.start_worker(
            db_url,
            log,
            WORKER_CORE if pin else None,
            DEALBROKER_WORKER_BATCH_SIZE=batch,
            **h.settings_env(args.setting),
        )
        for _ in range(600):
            worker.check_alive()
            if "running jobs" in worker.log():
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"worker did not start:\n{worker.log()}")
        await asyncio.sleep(0.5)  # its LISTEN connection opens just after the banner
        meter = h.CpuMeter(
            admin,
            args.db_name,
            "bench",
            worker=worker.pid,
            receiver=receiver.process.pid,
            server=api.process.pid,
        )

        for r in range(args.rounds):  # (a) throughput: a backlog made while the worker stopped
            backlog = await make_backlog(db, api, receiver, worker, args.events)
            t = await drain_backlog(db, receiver, worker, meter, backlog)
            doc["throughput"].append(t)
            cpu = t["cpu"]
            print(
                f"backlog round {r + 1}: {t['deliveries_per_s']:.0f} deliveries/s "
                f"({t['events']} in {t['seconds']:.2f} s, made at {t['created_per_s']:.0f}/s; "
                f"repeats {t['repeats']}, lost {t['lost']}; "
                f"{t['new_connections']} new connections; worker "
                f"{t['worker_cpu_us_per_delivery']:.0f} us/delivery, cpu {h.pct(cpu['worker'])}, "
                f"postgres {h.pct(cpu['postgres'])}, other {h.pct(cpu['other'])})",
                flush=True,
            )

        lat = doc["latency"] = await latency_phase(db, receiver, meter, args)  # (b) idle cost
        print(
            f"at {lat['achieved_rate']:.0f} events/s: worker cpu {h.pct(lat['cpu']['worker'])}, "
            f"latency p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms "
            f"(other {h.pct(lat['cpu']['other'])})",
            flush=True,
        )

        bodies = await db.payloads(backlog[0])
        for r in range(args.rounds):  # (c) the bare loop, on the worker's core, worker idle
            for kind in ("plain", "worker"):
                with h.pinned(WORKER_CORE if pin else None):
                    b = await bare_round(
                        receiver, bodies, db.client.webhook_secret, args.batch_size, kind
                    )
                doc["bare"].append(b)
                print(
                    f"bare loop round {r + 1} ({kind}): {b['per_s']:.0f} POST/s, "
                    f"{b['cpu_us_per_post']:.0f} CPU us per POST, "
                    f"{b['new_connections']} new connections",
                    flush=True,
                )

        doc["summary"] = summarize(doc["throughput"], doc["bare"], lat)
        missed = "MISSED" in doc["summary"]["targets"].values()
        if args.profile == "always" or (args.profile == "auto" and missed):
            print("\nprofiling the worker under one more backlog round (py-spy) ...", flush=True)
            out = h.RESULTS_DIR / f"webhooks-profile-{stamp}.txt"
            rounds: list[dict[str, Any]] = []
            backlog = await make_backlog(db, api, receiver, worker, args.events)

            async def deliver() -> None:
                rounds.append(await drain_backlog(db, receiver, worker, meter, backlog))

            if await h.profile(worker.pid, out, deliver(), rate=200):
                doc["profile_round"] = rounds[0]
                doc["profile"] = h.summarize_profile(out, 15, h.CLIENT_GROUPS)
        if args.profile_idle:
            print(f"\nprofiling the worker at {args.rate:g} events/s (py-spy) ...", flush=True)
            out = h.RESULTS_DIR / f"webhooks-profile-idle-{stamp}.txt"
            phases: list[dict[str, Any]] = []

            async def emit() -> None:
                phases.append(await latency_phase(db, receiver, meter, args))

            if await h.profile(worker.pid, out, emit(), rate=200):
                doc["profile_idle_phase"] = phases[0]
                doc["profile_idle"] = h.summarize_profile(out, 15, h.CLIENT_GROUPS)
    finally:
        if worker is not None and worker.stop() not in (0, None):
            print(f"worker exited with {worker.proc.returncode}; see {worker.log_path}", flush=True)
        if api is not None:
            api.stop()
        receiver.stop()
        await db.engine.dispose()
        await admin.close()
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.receiver:
        run_receiver(args.port)
        return 0
    h.RESULTS_DIR.mkdir(exist_ok=True)
    stamp, pin = h.stamp(), h.can_pin(args)
    print(
        f"webhook bench: {args.events} events x {args.rounds} rounds, batch {args.batch_size}, "
        f"latency at {args.rate:g}/s for {args.latency_seconds:g} s, "
        f"{'pinned' if pin else 'not pinned'}",
        flush=True,
    )
    # This process shares core 1 with the receiver; it moves to core 0 for the bare loop.
    with h.fresh_database(args) as db_url, h.pinned(RECEIVER_CORE if pin else None):
        doc = asyncio.run(bench(args, db_url, stamp, pin))
    print_report(doc["summary"])
    if "profile" in doc:
        t = doc["profile_round"]
        note = (
            f"; {t['deliveries_per_s']:.0f} deliveries/s; worker on CPU {h.pct(t['cpu']['worker'])}"
        )
        h.print_profile(
            "the worker under a throughput round", doc["profile"], note + " of one core"
        )
    if "profile_idle" in doc:
        p = doc["profile_idle_phase"]
        note = (
            f"; {p['achieved_rate']:.0f} events/s; worker on CPU {h.pct(p['cpu']['worker'])}"
            f", {p['worker_cpu_us_per_event']:.0f} us per event"
        )
        h.print_profile("the worker at a steady rate", doc["profile_idle"], note + " of one core")
    config = {k: v for k, v in vars(args).items() if k not in ("receiver", "port", "pg_url")}
    doc = {"config": config, "started": stamp, "environment": h.environment(pinned=pin), **doc}
    print(f"\nresults: {h.write_results(f'webhooks-{stamp}', doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
