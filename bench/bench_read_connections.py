"""What lending a connection costs the deal reads, in process: the same statement (``SELECT 1``,
prepared) run on a connection lent by asyncpg's ``Pool`` (as ``core.fastpath.statements`` used it: a timeout
on the acquire, no reset on release) and by ``core.fastpath.statements.DriverConnections``, and on one connection
held throughout (nothing lent: the statement alone), interleaved round by round.

    .venv/bin/python bench/bench_read_connections.py [--reads 10000] [--rounds 5]

Prints the median CPU µs per read over the rounds (``time.process_time``: this process's CPU,
asyncpg's protocol and the event loop included, PostgreSQL's not) and what lending adds to the
statement alone. Needs only a PostgreSQL server (``--pg-url``); no database is created.
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as h  # noqa: E402

from dealbroker.core.fastpath.statements import DriverConnections  # noqa: E402

SQL = "SELECT 1"


async def _nothing(conn: asyncpg.Connection) -> None:
    """No reset on release, as ``core.fastpath.statements`` configured asyncpg's pool."""


async def run(dsn: str, reads: int, rounds: int) -> dict[str, list[float]]:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, reset=_nothing)
    connections = DriverConnections(lambda: asyncpg.connect(dsn), 2)
    held = await asyncpg.connect(dsn)

    async def on_pool() -> None:
        async with pool.acquire(timeout=30) as conn:
            await conn.fetch(SQL)

    async def on_connections() -> None:
        conn = await connections.take(30)
        try:
            await conn.fetch(SQL)
        finally:
            connections.give(conn)

    async def alone() -> None:
        await held.fetch(SQL)

    variants: dict[str, Callable[[], Awaitable[None]]] = {
        "statement alone": alone,
        "asyncpg Pool": on_pool,
        "DriverConnections": on_connections,
    }
    results: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for _ in range(rounds):
            for name, read in variants.items():
                for _ in range(reads // 10):  # warm
                    await read()
                started = time.process_time()
                for _ in range(reads):
                    await read()
                results[name].append((time.process_time() - started) / reads * 1e6)
    finally:
        await pool.close()
        await connections.close()
        await held.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("DEALBROKER_BENCH_PG_URL", h.PG_URL),
        help="PostgreSQL server URL without a database name (env DEALBROKER_BENCH_PG_URL)",
    )
    parser.add_argument("--reads", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = uvloop.run(
        run(h.pg_dsn(f"{args.pg_url.rstrip('/')}/postgres"), args.reads, args.rounds)
    )
    alone = statistics.median(results["statement alone"])
    print(f"{'lent by':18} {'µs/read':>8} {'lending adds':>13}")
    for name, values in results.items():
        med = statistics.median(values)
        print(f"{name:18} {med:8.1f} {med - alone:13.1f}")


if __name__ == "__main__":
    main()
