"""What the request metrics cost per request: the whole app, in process, with and without them.

Two apps are built from the same settings but ``DEALBROKER_METRICS_BIND``: one has the request
metrics middleware, one has not. Each is called directly over ASGI (no HTTP, no socket) on the
benchmark's ceiling route (``GET /bench/ceiling``, no database work), in interleaved rounds;
the figure is the median difference of CPU time per request. The metrics are written to a
shared directory in multiprocess mode, as under ``dealbroker serve``.

    .venv/bin/python bench/bench_request_metrics.py [--requests 20000] [--rounds 7]

Run from the repository root. Only the process's own CPU is measured (``time.process_time``).
"""

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# As serve does before anything imports prometheus_client: its values go to shared files.
os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="bench-metrics-")
sys.path.insert(0, str(Path(__file__).parent.parent))

from fastapi import FastAPI  # noqa: E402
from starlette.types import ASGIApp, Message, Receive, Scope, Send  # noqa: E402

from bench.ceiling_app import CEILING_PATH, ceiling  # noqa: E402
from dealbroker.app import create_app  # noqa: E402
from dealbroker.core.request_metrics import RequestMetricsMiddleware  # noqa: E402
from dealbroker.core.settings import Settings  # noqa: E402


def build(metrics: bool, database_url: str) -> FastAPI:
    settings = Settings(
        database_url=database_url,
        embedded_worker="off",
        log_level="warning",
        metrics_bind="127.0.0.1:9100" if metrics else "",
    )
    app = create_app(settings)
    app.add_api_route(CEILING_PATH, ceiling, methods=["GET"], include_in_schema=False)
    return app


CEILING_SCOPE = {
    "type": "http",
    "asgi": {"version": "3.0"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": CEILING_PATH,
    "raw_path": CEILING_PATH.encode(),
    "query_string": b"",
    "root_path": "",
    "headers": [(b"host", b"bench")],
    "client": ("127.0.0.1", 1),
    "server": ("127.0.0.1", 80),
}


async def receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def send(message: Message) -> None:
    return None


async def run(app: ASGIApp, requests: int, scope: Scope = CEILING_SCOPE) -> float:
    """CPU seconds per request over ``requests`` ASGI calls."""
    started = time.process_time()
    for _ in range(requests):
        await app(dict(scope), receive, send)
    return (time.process_time() - started) / requests


async def middleware_alone(requests: int, rounds: int) -> list[float]:
    """The middleware around an app that does nothing but answer: its own cost, without the
    app's noise. Seconds of CPU per request added, one figure per round."""
    from starlette.routing import Route

    route = Route("/deals/v1/deals/{dealId}", ceiling)

    async def bare(scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = route
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    metered = RequestMetricsMiddleware(bare)
    scope = {"type": "http", "method": "GET", "path": "/deals/v1/deals/x"}
    return [
        await run(metered, requests, scope) - await run(bare, requests, scope)
        for _ in range(rounds)
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    database = Path(tempfile.mkdtemp()) / "bench.db"
    from dealbroker.core.migrate import upgrade

    url = f"sqlite+aiosqlite:///{database}"
    await asyncio.to_thread(upgrade, url)
    apps = {"without": build(False, url), "with": build(True, url)}
    per: dict[str, list[float]] = {"without": [], "with": []}
    async with contextlib.AsyncExitStack() as stack:
        for app in apps.values():
            await stack.enter_async_context(app.router.lifespan_context(app))
            await run(app, 1000)  # warm up
        for _ in range(args.rounds):
            for name, app in apps.items():
                per[name].append(await run(app, args.requests))
    without, with_ = statistics.median(per["without"]), statistics.median(per["with"])
    diffs = [w - o for w, o in zip(per["with"], per["without"], strict=True)]
    alone = await middleware_alone(args.requests * 5, args.rounds)
    print(
        f"middleware alone: {statistics.median(alone) * 1e6:6.1f} µs/request "
        f"(rounds: {', '.join(f'{d * 1e6:.1f}' for d in alone)})"
    )
    print(f"without metrics: {without * 1e6:7.1f} µs CPU/request (median of {args.rounds})")
    print(f"with metrics:    {with_ * 1e6:7.1f} µs CPU/request")
    print(
        f"added:           {statistics.median(diffs) * 1e6:7.1f} µs/request "
        f"(rounds: {', '.join(f'{d * 1e6:.1f}' for d in diffs)})"
    )


if __name__ == "__main__":
    asyncio.run(main())
