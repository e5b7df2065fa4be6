"""What a rate limit check costs per request: counted in memory alone (SQLite's one process),
and sharing the budget through PostgreSQL by claimed blocks (``core.ratelimit``).

Each round lets ``--requests`` requests of one key (at most the limit) through
``RateLimiter.take`` one after another, none refused, and reports the wall time per request (the
claims' round trips included), the process's CPU per request and the claims made. Rounds of
the two modes are interleaved; the figures are medians.

    .venv/bin/python bench/bench_ratelimit.py [--requests 6000] [--rounds 5]

Run from the repository root.
"""

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

from sqlalchemy import event  # noqa: E402

from bench.harness import add_common_args, fresh_database, print_table  # noqa: E402
from dealbroker.core.db import create_engine  # noqa: E402
from dealbroker.core.ratelimit import RateLimiter  # noqa: E402


async def _round(limiter: RateLimiter, key: str, n: int, limit: int) -> tuple[float, float]:
    now = time.time()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        assert await limiter.take("bench", key, limit, now) is None
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


async def measure(db_url: str, requests: int, rounds: int, limits: list[int]) -> None:
    engine = create_engine(db_url, pool_size=2)
    shared_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
    claims = 0

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def count(*_: object) -> None:
        nonlocal claims
        claims += 1

    rows = []
    try:
        for limit in limits:
            results: dict[str, list[tuple[float, float]]] = {"memory": [], "postgresql": []}
            made = []
            for i in range(rounds):
                results["memory"].append(
                    await _round(RateLimiter(), f"m{i}", requests, requests * 100)
                )
                before = claims
                shared = RateLimiter(shared_engine)
                n = min(requests, limit)  # none refused
                results["postgresql"].append(await _round(shared, f"p{limit}:{i}", n, limit))
                made.append(claims - before)
            for mode, values in results.items():
                rows.append(
                    [
                        mode,
                        str(limit) if mode == "postgresql" else "-",
                        f"{statistics.median(v[0] for v in values) * 1e6:.2f}",
                        f"{statistics.median(v[1] for v in values) * 1e6:.2f}",
                        str(statistics.median(made)) if mode == "postgresql" else "0",
                    ]
                )
    finally:
        await engine.dispose()
    print_table(
        [("mode", 12), ("limit/min", 10), ("wall µs/req", 12), ("CPU µs/req", 11), ("claims", 7)],
        rows,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p, "dealbroker_bench_ratelimit")
    p.add_argument("--requests", type=int, default=6000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    limits = [args.requests, args.requests * 2, 120]
    with fresh_database(args) as db_url:
        asyncio.run(measure(db_url, args.requests, args.rounds, limits))


if __name__ == "__main__":
    main()
