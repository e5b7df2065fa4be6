"""HTTP benchmark of the deal API against a real server and a real PostgreSQL.

One run creates a fresh database, loads deals in bulk, starts the server (pinned to core 0),
and drives it from this process (pinned to core 1) with the harness's load generator:

* a closed-loop burst on N keep-alive connections finds each scenario's maximum throughput;
* an open-loop run at ``--load-factor`` of that maximum gives latency percentiles, counted from
  each request's due time (no coordinated omission).

Scenarios: the bare route (a FastAPI app of its own with one JSON route and nothing else, the
outside baseline), the ceiling (a plain JSON route of dealbroker's app, no database),
``GET /healthz``, ``GET /ping`` (``SELECT 1``), create, get-one and list page 1 at ``--deals``
deals; then the table grows to ``--big-deals`` and list is measured again. Every scenario is
reported as a ratio to the bare route and to ``/healthz``. See ``bench/README.md``.
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import harness as h
import httpx
import uvloop

SERVER_CORE, GENERATOR_CORE = 0, 1
CEILING_PATH = "/bench/ceiling"  # added by bench/ceiling_app.py
BARE_PATH = "/json"  # bench/bare_app.py
SCENARIOS = ("bare", "ceiling", "healthz", "ping", "create", "get", "list")
# The scenarios each throughput is divided by: the bare FastAPI route, dealbroker's /healthz.
BASES = ("bare", "healthz")
TARGETS = {  # ratio -> (comparison, threshold)
    "healthz/bare": (">=", 0.70),
    "get/bare": (">=", 0.30),
    "list/bare": (">=", 0.15),
    "create/bare": (">=", 0.15),
    "create/ceiling": (">=", 0.25),
    "get/ceiling": (">=", 0.35),
    "list@1M p50 / list@10k p50": ("<=", 1.5),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``--quick`` shrinks every duration and the big table."""
    p = argparse.ArgumentParser(
        description="Benchmark the dealbroker HTTP API (see bench/README.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    h.add_common_args(p, "dealbroker_bench")
    add = p.add_argument
    add("--deals", type=int, default=10_000, help="deals loaded before phase 1")
    add("--big-deals", type=int, default=1_000_000, help="deals in all for phase 2 (0: skip)")
    add("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset to run")
    add("--rounds", type=int, default=3, help="interleaved rounds per phase")
    add("--warmup", type=float, default=1.0, help="seconds of unmeasured load first")
    add("--burst", type=float, default=3.0, help="seconds of closed-loop max search")
    add("--duration", type=float, default=5.0, help="seconds of open-loop load")
    add("--load-factor", type=float, default=0.8, help="open-loop rate as a share of the max")
    add("--closed-conns", type=int, default=8, help="connections, closed loop (below the pool)")
    add("--open-conns", type=int, default=64, help="connections, open loop")
    add("--db-pool-size", type=int, help="DEALBROKER_DB_POOL_SIZE for the server")
    add(
        "--log-level",
        default="info",
        help="DEALBROKER_LOG_LEVEL for the server; info (serve's default) writes the access log",
    )
    add(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a DEALBROKER_ setting for the server, e.g. API_REQUEST_LOG=false (repeatable)",
    )
    add("--max-other", type=float, default=0.25, help="others' CPU share that makes a run noisy")
    add("--quiet-wait", type=float, default=3.0, help="seconds to wait for a quiet machine")
    add("--retries", type=int, default=1, help="re-runs of a noisy scenario-round")
    add("--retry-budget", type=int, default=5, help="re-runs in all, per run")
    add("--profile", action="store_true", help="then record the server with py-spy")
    add("--seed", type=int, default=1, help="random seed (ids, bodies)")
    add("--quick", action="store_true", help="smoke run: 1 round, short, 100k deals in phase 2")
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


# --- Data ----------------------------------------------------------------------------------------

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
        SELECT i, $2::timestamptz - make_interval(secs => random() * 365 * 86400)  AS t
        FROM generate_series($3::int, $4::int) AS i
    ) AS src
    RETURNING id, integration_id, created_at
)
INSERT INTO deal_status_history
    (id, deal_id, integration_id, from_status, to_status, trigger, actor, created_at)
SELECT gen_random_uuid(), id, integration_id, NULL, 'Draft', 'created', 'integration', created_at
FROM new
"""


async def load_deals(
    conn: asyncpg.Connection, integration_id: uuid.UUID, first: int, last: int, chunk: int
) -> float:
    """Insert deals number ``first`` to ``last`` in chunks, spread the exact count over the
    counter slots as concurrent creates would, and ANALYZE. Returns the seconds it took."""
    from dealbroker.deals.models import DealCounter

    started, now = time.perf_counter(), datetime.now(UTC)
    await conn.execute("SET synchronous_commit = off")
    for lo in range(first, last + 1, chunk):
        hi = min(last, lo + chunk - 1)
        await conn.execute(LOAD_SQL, integration_id, now, lo, hi)
        if last - first >= 2 * chunk:
            print(f"    loaded {hi - first + 1:>9,} / {last - first + 1:,} deals", flush=True)
    async with conn.transaction():
        total = await conn.fetchval(
            "SELECT count(*) FROM deals WHERE integration_id = $1", integration_id
        )
        await conn.execute("DELETE FROM deal_counters WHERE integration_id = $1", integration_id)
        n = DealCounter.SLOTS
        await conn.executemany(
            "INSERT INTO deal_counters (integration_id, slot, count) VALUES ($1, $2, $3)",
            [(integration_id, s, total // n + (s < total % n)) for s in range(n)],
        )
    await conn.execute("ANALYZE deals; ANALYZE deal_status_history; ANALYZE deal_counters")
    return time.perf_counter() - started


async def start_server(args: argparse.Namespace, db_url: str, port: int, log: Any) -> h.Process:
    """``uvicorn bench.ceiling_app:factory`` as ``dealbroker serve`` runs the app (factory, one
    worker, no access log), pinned to core 0; returns once it answers."""
    cmd = [sys.executable, "-m", "uvicorn", "bench.ceiling_app:factory", "--factory"]
    cmd += ["--host", h.HOST, "--port", str(port), "--no-access-log", "--log-level", "warning"]
    # The load is far above the default per-integration limit; the limit is still checked on
    # every request, so its cost is measured, but never reached.
    env = h.service_env(
        db_url,
        DEALBROKER_BASE_URL=f"http://{h.HOST}:{port}",
        DEALBROKER_RATE_LIMIT_REQUESTS_PER_MINUTE="1000000000",
        DEALBROKER_LOG_LEVEL=getattr(args, "log_level", "warning"),
    )
    env["PYTHONPATH"] = ":".join(p for p in (str(h.REPO_ROOT), env.get("PYTHONPATH")) if p)
    if args.db_pool_size is not None:
        env["DEALBROKER_DB_POOL_SIZE"] = str(args.db_pool_size)
    env |= h.settings_env(args.setting)
    server = h.Process(cmd, log, env, SERVER_CORE if h.can_pin(args) else None, h.REPO_ROOT)
    return await _answering(server, port, CEILING_PATH)


async def start_bare_server(args: argparse.Namespace, port: int, log: Any) -> h.Process:
    """``uvicorn bench.bare_app:app`` on the same core and with the same uvicorn options as
    dealbroker's server (loop and HTTP parser: uvicorn's choice, uvloop and httptools)."""
    cmd = [sys.executable, "-m", "uvicorn", "bench.bare_app:app"]
    cmd += ["--host", h.HOST, "--port", str(port), "--no-access-log", "--log-level", "warning"]
    env = h.service_env("")
    env["PYTHONPATH"] = ":".join(p for p in (str(h.REPO_ROOT), env.get("PYTHONPATH")) if p)
    server = h.Process(cmd, log, env, SERVER_CORE if h.can_pin(args) else None, h.REPO_ROOT)
    return await _answering(server, port, BARE_PATH)


async def _answering(server: h.Process, port: int, path: str) -> h.Process:
    async with httpx.AsyncClient(base_url=f"http://{h.HOST}:{port}") as client:
        for _ in range(300):
            server.check_alive()
            with contextlib.suppress(httpx.TransportError):
                if (await client.get(path)).status_code == 200:
                    return server
            await asyncio.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server did not answer within 30 s:\n{server.log()}")


# --- Scenarios ---------------------------------------------------------------------------------


@dataclass
class Scenario:
    """A named set of prebuilt requests (cycled in order) and the status they must get, sent
    to ``port``, where the server ``server`` (``dealbroker`` or ``bare``) listens."""

    name: str
    label: str
    requests: list[bytes]
    expect: int
    check: Callable[[bytes], str | None]
    port: int
    server: str = "dealbroker"


def make_scenarios(
    port: int,
    bare_port: int,
    token: str,
    ids: list[uuid.UUID],
    expected_total: Callable[[], int],
) -> dict[str, Scenario]:
    auth = {"Authorization": f"Bearer {token}"}
    json_auth = {**auth, "Content-Type": "application/json"}

    def check_ok(body: bytes) -> str | None:
        return None if json.loads(body) == {"status": "ok"} else "unexpected body"

    def check_create(body: bytes) -> str | None:
        deal = json.loads(body)
        ok = deal.get("status") == "Draft" and deal.get("seller", {}).get("town") == "Oslo"
        return None if ok else "unexpected body"

    def check_get(body: bytes) -> str | None:
        return None if json.loads(body).get("id") == str(ids[0]) else "wrong deal"

    def check_list(body: bytes) -> str | None:
        page = json.loads(body)
        total, want = page["page"]["totalCount"], expected_total()
        if total != want or len(page["items"]) != min(20, want):
            return f"totalCount {total} (expected {want}), {len(page['items'])} items"
        stamps = [d["createdAt"] for d in page["items"]]
        return None if stamps == sorted(stamps, reverse=True) else "items not newest first"

    def get(path: str, headers: dict[str, str], at: int = port) -> list[bytes]:
        return [h.build_request("GET", path, at, headers)]

    create = [
        h.build_request("POST", "/deals/v1/deals", port, json_auth, h.create_deal_body(i))
        for i in range(1000)
    ]
    gets = [h.build_request("GET", f"/deals/v1/deals/{i}", port, auth) for i in ids]
    return {
        sc.name: sc
        for sc in (
            Scenario(
                "bare",
                f"GET {BARE_PATH} (bare FastAPI app)",
                get(BARE_PATH, {}, bare_port),
                200,
                check_ok,
                bare_port,
                "bare",
            ),
            Scenario("ceiling", f"GET {CEILING_PATH}", get(CEILING_PATH, {}), 200, check_ok, port),
            Scenario("healthz", "GET /healthz", get("/healthz", {}), 200, check_ok, port),
            Scenario("ping", "GET /ping", get("/ping", {}), 200, check_ok, port),
            Scenario("create", "POST /deals/v1/deals", create, 201, check_create, port),
            Scenario("get", "GET /deals/v1/deals/{id}", gets, 200, check_get, port),
            Scenario(
                "list",
                "GET /deals/v1/deals?page=1",
                get("/deals/v1/deals?page=1", auth),
                200,
                check_list,
                port,
            ),
        )
    }


async def verify(sc: Scenario) -> None:
    """One request of the scenario must succeed and look right before it is measured."""
    conn = h.Conn(sc.port)
    try:
        status, body = await conn.exchange(sc.requests[0])
    finally:
        await conn.close()
    problem = f"HTTP {status}" if status != sc.expect else sc.check(body)
    if problem:
        raise RuntimeError(f"{sc.label}: {problem}: {body[:300]!r}")


# --- Measuring ---------------------------------------------------------------------------------


class Bench:
    """Runs scenarios against the server and keeps every measured run."""

    def __init__(self, args: argparse.Namespace, meters: dict[str, h.CpuMeter]) -> None:
        """``meters``: per server name, the meter that counts that server as ``server``."""
        self.args, self.meters = args, meters
        self.runs: list[dict[str, Any]] = []
        self.retries_left = args.retry_budget

    async def _run(self, sc: Scenario, name: str, rnd: int, rate: float | None) -> dict[str, Any]:
        a = self.args
        if rate is None:
            await h.closed_loop(sc.port, sc.requests, sc.expect, a.closed_conns, a.warmup)
            load = h.closed_loop(sc.port, sc.requests, sc.expect, a.closed_conns, a.burst)
        else:
            load = h.open_loop(sc.port, sc.requests, sc.expect, a.open_conns, rate, a.duration)
        result, cpu = await self.meters[sc.server].measure(load)
        run = {
            "scenario": name,
            "round": rnd,
            "mode": "closed" if rate is None else "open",
            "offered_rps": None if rate is None else round(rate, 1),
            **result.summary(),
            "cpu": {k: None if v is None else round(v, 3) for k, v in cpu.items()},
            "noisy": (h.share(cpu, "other_cpu_s") or 0) > a.max_other,
            "discarded": False,  # replaced by a retry; left out of the summary
        }
        self.runs.append(run)
        return run

    async def both(self, sc: Scenario, rnd: int, name: str = "", rate: float = 0.0) -> None:
        """Max throughput (closed loop), then latency in the open loop at ``rate`` or at
        ``--load-factor`` of that max. Waits for a quiet machine first; a pair during which
        others' CPU went above ``--max-other`` is measured again (``--retries`` times,
        ``--retry-budget`` in all)."""
        name = name or sc.name
        for attempt in itertools.count():
            await self.meters[sc.server].wait_quiet(self.args.max_other, self.args.quiet_wait)
            top = await self._run(sc, name, rnd, None)
            low = await self._run(
                sc, name, rnd, max(rate or top["achieved_rps"] * self.args.load_factor, 1.0)
            )
            retry = (
                (top["noisy"] or low["noisy"])
                and attempt < self.args.retries
                and self.retries_left > 0
            )
            errors = top["errors"] | low["errors"]
            print(
                f"  round {rnd} {name:<11} max {top['achieved_rps']:>8.1f} req/s   "
                f"open {low['offered_rps']:>8.1f} req/s: p50 {low['p50_ms']:>7.2f} ms  "
                f"p99 {low['p99_ms']:>8.2f} ms  server cpu {shares('server_cpu_s', top, low)}  "
                f"other {shares('other_cpu_s', top, low)}"
                f"  new pg sessions {top['cpu']['new_db_sessions']}/{low['cpu']['new_db_sessions']}"
                f"{f'  errors {errors}' if errors else ''}{'  noisy: again' if retry else ''}",
                flush=True,
            )
            if not retry:
                return
            top["discarded"] = low["discarded"] = True
            self.retries_left -= 1


def shares(key: str, *runs: dict[str, Any]) -> str:
    return "/".join(h.pct(h.share(r["cpu"], key)) for r in runs)


def us_per_req(runs: list[dict[str, Any]], key: str) -> float | None:
    """Median CPU microseconds per request: noise from other tenants changes how much CPU the
    server gets, hardly what one request costs."""
    return h.median([h.div(r["cpu"][key], r["completed"] / 1e6) for r in runs])


# CPU shares the report shows, per scenario and mode
CPU_KEYS = (
    "generator_cpu_s",
    "server_cpu_s",
    "db_cpu_s",
    "other_cpu_s",
    "unattributed_cpu_s",
    "steal_s",
)


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per scenario: medians over rounds of max req/s, open-loop p50/p99, CPU per request (from
    the closed loop) and CPU shares. Runs replaced by a retry are left out."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["scenario"] for r in runs):
        mine = [r for r in runs if r["scenario"] == name]
        kept = {
            m: [r for r in mine if r["mode"] == m and not r["discarded"]]
            for m in ("closed", "open")
        }
        closed, opened = kept["closed"], kept["open"]

        def stat(rs: list[dict[str, Any]], key: str) -> float | None:
            return h.median([r[key] for r in rs])

        out[name] = {
            "max_rps": stat(closed, "achieved_rps"),
            "open_rps": stat(opened, "offered_rps"),
            "p50_ms": stat(opened, "p50_ms"),
            "p99_ms": stat(opened, "p99_ms"),
            "server_us_per_req": us_per_req(closed, "server_cpu_s"),
            "db_us_per_req": us_per_req(closed, "db_cpu_s"),
            "errors": sum(sum(r["errors"].values()) for r in closed + opened),
            "noisy_runs": sum(r["noisy"] for r in closed + opened),
            "discarded_runs": sum(r["discarded"] for r in mine),
            "cpu_share": {
                m: {k: h.median([h.share(r["cpu"], k) for r in rs]) for k in CPU_KEYS}
                for m, rs in kept.items()
            },
            "cpu_seconds": {
                m: {
                    k: h.median([r["cpu"][k] for r in rs])
                    for k in ("wall_s", "generator_cpu_s", "server_cpu_s", "new_db_sessions")
                }
                for m, rs in kept.items()
            },
        }
    return out


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every scenario's max throughput over each base's (the bare route's, /healthz's), the old
    ratios to the ceiling, and list@big's p50 over list's, with a met/missed verdict where
    there is a target.

    ``by_cpu`` is the same ratio from server CPU per request (the base's cost over the
    scenario's), which a noisy machine disturbs far less; for the list row it is list@big over
    list in server + PostgreSQL CPU per request."""

    def get(name: str, key: str) -> float | None:
        return summary.get(name, {}).get(key)

    def cost(name: str) -> float | None:
        server, db = get(name, "server_us_per_req"), get(name, "db_us_per_req")
        return None if server is None else server + (db or 0.0)

    rows = {}
    for base in (*BASES, "ceiling"):
        for n in summary:
            if n in (base, "bare", "ceiling@big", "list@big") or base not in summary:
                continue
            if base == "ceiling" and n not in ("create", "get", "list"):
                continue
            rows[f"{n}/{base}"] = (
                h.div(get(n, "max_rps"), get(base, "max_rps")),
                h.div(get(base, "server_us_per_req"), get(n, "server_us_per_req")),
            )
    rows["list@1M p50 / list@10k p50"] = (
        h.div(get("list@big", "p50_ms"), get("list", "p50_ms")),
        h.div(cost("list@big"), cost("list")),
    )

    def verdict(name: str, value: float | None) -> bool | None:
        if name not in TARGETS or value is None:
            return None
        op, threshold = TARGETS[name]
        return value >= threshold if op == ">=" else value <= threshold

    return {
        name: {
            "value": value,
            "target": " ".join(map(str, TARGETS[name])) if name in TARGETS else None,
            "met": verdict(name, value),
            "by_cpu": by_cpu,
            "met_by_cpu": verdict(name, by_cpu),
        }
        for name, (value, by_cpu) in rows.items()
    }


def print_report(summary: dict[str, Any], verdicts: dict[str, Any], labels: dict[str, str]) -> None:
    f = h.fmt
    print("\nThroughput and latency (medians over rounds; CPU per request from the closed loop)")
    columns = [("scenario", -12), ("endpoint", -36), ("max req/s", 9), ("open req/s", 10)]
    columns += [("p50 ms", 8), ("p99 ms", 8), ("server us/req", 13), ("pg us/req", 9)]
    columns += [("errors", 6), ("noisy", 5), ("redone", 6)]
    h.print_table(
        columns,
        [
            [name, labels.get(name, ""), f(s["max_rps"], ".1f"), f(s["open_rps"], ".1f")]
            + [f(s["p50_ms"], ".2f"), f(s["p99_ms"], ".2f")]
            + [f(s["server_us_per_req"], ".0f"), f(s["db_us_per_req"], ".0f")]
            + [str(s["errors"]), str(s["noisy_runs"]), str(s["discarded_runs"])]
            for name, s in summary.items()
        ],
    )
    yes = {True: "yes", False: "NO", None: "-"}
    print("\nRatios against targets (by CPU: the same ratio from CPU cost per request)")
    h.print_table(
        [("ratio", -28), ("value", 7), ("target", 8), ("met", -4), ("by CPU", 7), ("met", -3)],
        [
            [name, f(v["value"], ".3f"), v["target"] or "", yes[v["met"]]]
            + [f(v["by_cpu"], ".3f"), yes[v["met_by_cpu"]]]
            for name, v in verdicts.items()
        ],
    )
    noisy = [f"{name} ({s['noisy_runs']})" for name, s in summary.items() if s["noisy_runs"]]
    if noisy:
        print(
            f"  warning: noisy runs were kept for {', '.join(noisy)}. A scenario that did not get "
            "its core skews the\n  throughput ratios; the 'by CPU' column is the steadier "
            "estimate (see bench/README.md, Noise)."
        )
    print("\nCPU: share of one core during the measured window (medians over rounds)")
    print("  generator = this process (core 1), server = uvicorn (core 0), postgres = the bench")
    print("  database's live backends, others = every other process (other tenants: noise),")
    print("  unattr. = busy time no live process accounts for (exited backends of pool churn,")
    print("  interrupts), steal = time the hypervisor gave away, new pg sess = connections opened")
    columns = [("scenario", -12), ("mode", -6), ("wall s", 6), ("gen cpu s", 9)]
    columns += [("server cpu s", 12), ("generator", 9), ("server", 7), ("postgres", 8)]
    columns += [("others", 6), ("unattr.", 7), ("steal", 6), ("new pg sess", 11)]
    rows = []
    for name, s in summary.items():
        for mode in ("closed", "open"):
            sec, sh = s["cpu_seconds"][mode], s["cpu_share"][mode]
            rows.append(
                [name, mode, f(sec["wall_s"], ".1f"), f(sec["generator_cpu_s"], ".2f")]
                + [f(sec["server_cpu_s"], ".2f")]
                + [h.pct(sh[k]) for k in CPU_KEYS]
                + [f(sec["new_db_sessions"], ".0f")]
            )
    h.print_table(columns, rows)


# --- Orchestration -----------------------------------------------------------------------------


async def run(args: argparse.Namespace, db_url: str, started: float) -> None:
    """Load phase-1 data, start the server, measure both phases, print and save the results."""
    client = await h.create_integration(db_url)
    admin = await asyncpg.connect(h.pg_dsn(db_url))
    h.RESULTS_DIR.mkdir(exist_ok=True)
    stamp, port, bare_port = h.stamp(), h.free_port(), h.free_port()
    log = h.RESULTS_DIR / f"server-{stamp}.log"
    server = bare = None
    profiles: dict[str, dict[str, Any]] = {}
    load_big = None
    try:
        print(f"Loading {args.deals:,} deals …", flush=True)
        load_small = await load_deals(admin, client.integration_id, 1, args.deals, 100_000)
        ids = [r["id"] for r in await admin.fetch("SELECT id FROM deals")]
        random.Random(args.seed).shuffle(ids)
        print(f"  {len(ids):,} deals in {load_small:.1f}s", flush=True)
        server = await start_server(args, db_url, port, log)
        where = f"pinned to core {SERVER_CORE}" if server.core is not None else "(not pinned)"
        print(f"Server pid {server.pid} on port {port} {where}", flush=True)
        if "bare" in args.scenarios:
            bare_log = h.RESULTS_DIR / f"bare-{stamp}.log"
            bare = await start_bare_server(args, bare_port, bare_log)
            print(f"Bare FastAPI app pid {bare.pid} on port {bare_port} {where}", flush=True)
        env = h.environment(
            postgres=await admin.fetchval("SHOW server_version"),
            server_cmd=" ".join("python" if c == sys.executable else c for c in server.cmd),
            server_pinned_core=server.core,
            generator_pinned_core=GENERATOR_CORE if server.core is not None else None,
            server_settings=args.setting,
            server_log_level=args.log_level,
            bare_cmd=bare and " ".join("python" if c == sys.executable else c for c in bare.cmd),
        )

        async def total() -> int:
            return int(await admin.fetchval("SELECT count(*) FROM deals"))

        expected = [await total()]
        token = await h.get_token(port, client)
        every = make_scenarios(port, bare_port, token, ids, lambda: expected[0])
        scenarios = {name: sc for name, sc in every.items() if name in args.scenarios}
        pids = {"dealbroker": server.pid} | ({"bare": bare.pid} if bare is not None else {})
        meters = {
            name: h.CpuMeter(admin, args.db_name, "generator", server=pid)
            for name, pid in pids.items()
        }
        bench = Bench(args, meters)
        for sc in scenarios.values():
            expected[0] = await total()
            await verify(sc)
        print("Warming up …", flush=True)
        for sc in scenarios.values():
            await h.closed_loop(sc.port, sc.requests, sc.expect, args.closed_conns, args.warmup)

        print(f"Phase 1: {await total():,} deals, {args.rounds} round(s)", flush=True)
        for rnd in range(1, args.rounds + 1):
            for sc in scenarios.values():
                await bench.both(sc, rnd)

        async def profile(name: str, sc: Scenario) -> None:
            print(f"  profiling the server under {name} …", flush=True)
            out = h.RESULTS_DIR / f"profile-{name.replace('@', '-')}-{stamp}.txt"
            load = h.closed_loop(sc.port, sc.requests, sc.expect, args.closed_conns, args.duration)
            if await h.profile(pids[sc.server], out, load):
                profiles[name] = h.summarize_profile(out)

        if args.profile:
            for name, sc in scenarios.items():
                await profile(name, sc)

        if args.big_deals:
            print(f"Loading deals up to {args.big_deals:,} …", flush=True)
            # Numbering continues after the first load so every generated deal is distinct.
            last = args.deals + max(0, args.big_deals - await total())
            load_big = await load_deals(admin, client.integration_id, args.deals + 1, last, 100_000)
            expected[0] = await total()
            print(f"  {expected[0]:,} deals after {load_big:.1f}s (ANALYZE included)", flush=True)
            lst = scenarios["list"]
            await verify(lst)
            opened = [r for r in bench.runs if r["scenario"] == "list" and r["mode"] == "open"]
            list_rate = h.median([r["offered_rps"] for r in opened if not r["discarded"]]) or 1.0
            await h.closed_loop(lst.port, lst.requests, 200, args.closed_conns, args.warmup)
            print(
                f"Phase 2: {expected[0]:,} deals; list open-loop at the phase-1 list rate "
                f"({list_rate:.1f} req/s)",
                flush=True,
            )
            for rnd in range(1, args.rounds + 1):
                if "ceiling" in scenarios:
                    await bench.both(scenarios["ceiling"], rnd, "ceiling@big")
                await bench.both(lst, rnd, "list@big", rate=list_rate)
            if args.profile:
                await profile("list@big", lst)
    finally:
        for process in (server, bare):
            if process is not None:
                process.stop()
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
        h.print_profile(f"the server under {name}: {labels[name]}", prof)
    doc = {
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(),
        "elapsed_s": round(time.time() - started, 1),
        "config": {k: v for k, v in vars(args).items() if k != "pg_url"},
        "environment": env,
        "load_seconds": {"small": round(load_small, 1), "big": load_big and round(load_big, 1)},
        "deals": {"phase1": args.deals, "phase2": expected[0] if args.big_deals else None},
        "summary": summary,
        "ratios": verdicts,
        "runs": bench.runs,
        "profiles": profiles,
    }
    out = h.write_results(f"bench-{stamp}", doc)
    print(f"\nResults: {out}   server log: {log.relative_to(h.REPO_ROOT)}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    with h.pinned(GENERATOR_CORE if h.can_pin(args) else None), h.fresh_database(args) as db_url:
        # On uvloop, as the servers: the generator must outpace the bare route's server.
        uvloop.run(run(args, db_url, started))
    print(f"Done in {time.time() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
