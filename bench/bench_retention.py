"""Does the retention purge stall the API? p50/p99 of ``GET /deals/v1/deals/{id}`` with and
without the worker purging a big events table, and the purge's rate.

One run: a fresh PostgreSQL database; ``--deals`` deals and ``--rows`` events older than any
keep time, each with one delivery and one attempt (``INSERT … SELECT generate_series``); the
server of ``bench_api.py`` pinned to core 0; then ``--rounds`` rounds, each an open loop of
``--rate`` requests/s for ``--duration`` s without the worker, then the same with a
``dealbroker worker`` purging (started at the window's start, stopped at its end). See
``bench/README.md``.
"""

import argparse
import asyncio
import random
import statistics
import time
from datetime import UTC, datetime

import asyncpg
import harness as h
from bench_api import GENERATOR_CORE, load_deals, start_server

EVENT_SQL = """
INSERT INTO events (id, integration_id, deal_id, kind, payload, created_at)
SELECT gen_random_uuid(), $1::uuid, NULL, 'deal.status',
       '{"event":"deal.status","api_version":"v1","data":{"status":"Completed","n":' || i || ',"pad":"'
           || repeat('x', 300) || '"}}',
       $2::timestamptz - make_interval(days => 60) + make_interval(secs => i)
FROM generate_series($3::int, $4::int) AS i
"""
CHILDREN_SQL = """
WITH d AS (
    INSERT INTO deliveries (id, event_seq, endpoint_id, integration_id, status, attempts,
                            next_attempt_at, created_at, updated_at)
    SELECT gen_random_uuid(), seq, $1::uuid, integration_id, 'succeeded', 1, created_at,
           created_at, created_at
    FROM events WHERE seq BETWEEN $2 AND $3
    RETURNING id, endpoint_id, integration_id, created_at
)
INSERT INTO delivery_attempts (id, delivery_id, endpoint_id, event_id, integration_id,
                               attempted_at, success, status_code, latency_ms, response_excerpt)
SELECT gen_random_uuid(), d.id, d.endpoint_id, gen_random_uuid(), d.integration_id,
       d.created_at, true, 200, 40, 'ok'
FROM d
"""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    h.add_common_args(p, "dealbroker_bench_retention")
    p.add_argument("--rows", type=int, default=1_000_000, help="old events to purge")
    p.add_argument("--deals", type=int, default=10_000)
    p.add_argument("--rate", type=float, default=50.0, help="GET requests per second")
    p.add_argument("--duration", type=float, default=15.0, help="seconds per window")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--conns", type=int, default=32, help="open-loop connections")
    p.add_argument("--batch-size", type=int, default=1000, help="DEALBROKER_RETENTION_BATCH_SIZE")
    p.add_argument("--pause", type=float, default=0.2, help="DEALBROKER_RETENTION_PAUSE_SECONDS")
    args = p.parse_args()
    args.db_pool_size = None  # the server as bench_api.py starts it by default
    return args


async def fill(dsn: str, integration_id: object, rows: int, chunk: int = 100_000) -> float:
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SET synchronous_commit = off")
        endpoint = await conn.fetchval(
            "INSERT INTO webhook_endpoints (id, integration_id, url, enabled, created_at,"
            " updated_at) VALUES (gen_random_uuid(), $1, 'https://hooks.example.com', true,"
            " now(), now()) RETURNING id",
            integration_id,
        )
        now = datetime.now(UTC)
        for lo in range(1, rows + 1, chunk):
            hi = min(rows, lo + chunk - 1)
            first = await conn.fetchval("SELECT coalesce(max(seq), 0) + 1 FROM events")
            await conn.execute(EVENT_SQL, integration_id, now, lo, hi)
            await conn.execute(CHILDREN_SQL, endpoint, first, first + hi - lo)
            print(f"  {hi:,} / {rows:,} events (+ a delivery and an attempt each)", flush=True)
        await conn.execute("VACUUM ANALYZE events, deliveries, delivery_attempts")
    finally:
        await conn.close()
    return time.perf_counter() - started


async def count_events(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM events"))
    finally:
        await conn.close()


def stats(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    return h.percentile(ordered, 50) * 1000, h.percentile(ordered, 99) * 1000


async def bench(args: argparse.Namespace, db_url: str, dsn: str, stamp: str) -> None:
    client = await h.create_integration(db_url)
    conn = await asyncpg.connect(dsn)
    try:
        await load_deals(conn, client.integration_id, 1, args.deals, 10_000)
        ids = [r[0] for r in await conn.fetch("SELECT id FROM deals ORDER BY random() LIMIT 2000")]
    finally:
        await conn.close()
    print(f"filling {args.rows:,} old events …", flush=True)
    print(f"  filled in {await fill(dsn, client.integration_id, args.rows):.0f} s", flush=True)

    port = h.free_port()
    server = await start_server(args, db_url, port, h.RESULTS_DIR / f"retention-server-{stamp}.log")
    try:
        headers = {"Authorization": f"Bearer {await h.get_token(port, client)}"}
        requests = [h.build_request("GET", f"/deals/v1/deals/{i}", port, headers) for i in ids]
        random.shuffle(requests)
        await h.open_loop(port, requests, 200, args.conns, args.rate, 2.0)  # warm-up
        base: list[tuple[float, float]] = []
        purge: list[tuple[float, float]] = []
        rates: list[float] = []
        log = h.RESULTS_DIR / f"retention-worker-{stamp}.log"
        for n in range(1, args.rounds + 1):
            result = await h.open_loop(port, requests, 200, args.conns, args.rate, args.duration)
            base.append(stats(result.latencies))
            before = await count_events(dsn)
            started = time.perf_counter()
            worker = h.start_worker(
                db_url,
                log,
                GENERATOR_CORE if h.can_pin(args) else None,
                DEALBROKER_LOG_LEVEL="info",
                DEALBROKER_RETENTION_BATCH_SIZE=str(args.batch_size),
                DEALBROKER_RETENTION_PAUSE_SECONDS=str(args.pause),
            )
            result = await h.open_loop(port, requests, 200, args.conns, args.rate, args.duration)
            worker.stop(30)
            elapsed = time.perf_counter() - started
            after = await count_events(dsn)
            purge.append(stats(result.latencies))
            rates.append((before - after) / elapsed)
            errors = sum(result.errors.values())
            print(
                f"round {n}: without purge p50 {base[-1][0]:.1f} p99 {base[-1][1]:.1f} ms | "
                f"purging p50 {purge[-1][0]:.1f} p99 {purge[-1][1]:.1f} ms, "
                f"{before - after:,} events in {elapsed:.1f} s ({rates[-1]:,.0f}/s), "
                f"{after:,} left, errors {errors}",
                flush=True,
            )
            if after == 0:
                print("  the table ran dry during the window: use more --rows", flush=True)
    finally:
        server.stop()

    def med(pairs: list[tuple[float, float]], i: int) -> float:
        return statistics.median(p[i] for p in pairs)

    print(
        f"\nGET /deals/v1/deals/{{id}} at {args.rate:g}/s, {args.duration:g} s windows, "
        f"median of {args.rounds} rounds, batch {args.batch_size}, pause {args.pause:g} s"
    )
    print(f"{'':16} {'p50 ms':>8} {'p99 ms':>8}")
    print(f"{'without purge':16} {med(base, 0):8.1f} {med(base, 1):8.1f}")
    print(f"{'during purge':16} {med(purge, 0):8.1f} {med(purge, 1):8.1f}")
    print(
        f"p99 ratio {med(purge, 1) / med(base, 1):.2f} (median of the rounds' ratios "
        f"{statistics.median(p[1] / b[1] for p, b in zip(purge, base, strict=True)):.2f}); "
        "purge rate "
        f"{statistics.median(rates):,.0f} events/s (each with a delivery and an attempt)"
    )


def main() -> None:
    args = parse_args()
    h.RESULTS_DIR.mkdir(exist_ok=True)
    with h.pinned(GENERATOR_CORE if h.can_pin(args) else None), h.fresh_database(args) as db_url:
        asyncio.run(bench(args, db_url, h.pg_dsn(db_url), h.stamp()))


if __name__ == "__main__":
    main()
