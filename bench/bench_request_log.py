"""What the API's request log costs per request, in the server process's CPU.

Two parts, each in process and measured with ``time.process_time`` (this process's own CPU):

* the request's path: a minimal ASGI app that names its integration (as the token check does)
  and answers 200, called directly (no HTTP), with and without ``RecordRequests`` around it,
  in interleaved rounds; the figure is the median difference per request;
* the flush: ``RequestLog.flush`` writing batches of ``--batch`` requests to a fresh, migrated
  PostgreSQL database, per request written (the database's own CPU is not counted here).

    .venv/bin/python bench/bench_request_log.py [--requests 50000] [--rounds 7] [--batch 1000]

Run from the repository root. Compare the sum with ``bench_api.py``'s server CPU per request
for a deal get; ``bench_api.py --setting API_REQUEST_LOG=false`` measures it end to end.
"""

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))

import harness as h  # noqa: E402
from starlette.types import ASGIApp, Message, Receive, Scope, Send  # noqa: E402

from dealbroker.core import callers  # noqa: E402
from dealbroker.core.db import create_engine, create_sessionmaker  # noqa: E402
from dealbroker.integrations.request_log import RecordRequests, RequestLog  # noqa: E402

START = {"type": "http.response.start", "status": 200, "headers": []}
BODY = {"type": "http.response.body", "body": b"{}"}


def endpoint(integration_id: uuid.UUID) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        callers.identify(scope, integration_id)
        await send(START)
        await send(BODY)

    return app


async def per_request(app: ASGIApp, requests: int) -> float:
    """CPU seconds per request of ``requests`` calls of ``app``."""

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        return None

    deal = str(uuid.uuid4())
    started = time.process_time()
    for n in range(requests):
        scope = {
            "type": "http",
            "method": "GET",
            "path": f"/deals/v1/deals/{deal}",
            "path_params": {"dealId": deal},
            "state": {"request_id": f"{n:032x}"},
        }
        await app(scope, receive, send)
    return (time.process_time() - started) / requests


async def measure_path(args: argparse.Namespace) -> float:
    integration_id = uuid.uuid4()
    bare = endpoint(integration_id)
    log = RequestLog(max_pending=args.requests + 1)
    recorded = RecordRequests(bare, log)
    differences = []
    for _ in range(args.rounds):
        without = await per_request(bare, args.requests)
        log._pending.clear()
        with_log = await per_request(recorded, args.requests)
        differences.append(with_log - without)
    return statistics.median(differences)


async def measure_flush(args: argparse.Namespace, db_url: str) -> float:
    client = await h.create_integration(db_url)
    engine = create_engine(db_url, pool_size=1)
    sessions = create_sessionmaker(engine)
    deal = str(uuid.uuid4())
    results = []
    try:
        for _ in range(args.rounds):
            log = RequestLog(max_pending=args.batch)
            for n in range(args.batch):
                row = (client.integration_id, time.time(), "GET", "/deals/v1/deals/{dealId}")
                log.note((*row, deal, 200, f"{n:032x}", 700))
            started = time.process_time()
            await log.flush(sessions)
            results.append((time.process_time() - started) / args.batch)
    finally:
        await engine.dispose()
    return statistics.median(results)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    h.add_common_args(p, "dealbroker_bench_request_log")
    p.add_argument("--requests", type=int, default=50_000, help="calls per round")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    p.add_argument("--batch", type=int, default=1000, help="requests per flush")
    args = p.parse_args()
    path = asyncio.run(measure_path(args))
    print(f"request's path: {path * 1e6:.2f} us per request (median of {args.rounds} rounds)")
    with h.fresh_database(args) as db_url:
        flush = asyncio.run(measure_flush(args, db_url))
    print(f"flush:          {flush * 1e6:.2f} us per request written, in batches of {args.batch}")
    print(f"together:       {(path + flush) * 1e6:.2f} us per request")


if __name__ == "__main__":
    main()
