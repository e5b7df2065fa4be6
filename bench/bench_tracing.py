"""What tracing costs per request: the whole app, in process, with tracing off and on.

Tracing is chosen once per process (``OTEL_EXPORTER_OTLP_ENDPOINT``), so each round runs a
child process per variant, interleaved: ``off`` (no endpoint: the code as every deployment
without tracing runs it) and ``on`` (spans exported over OTLP/HTTP to a loopback sink that
reads and drops them, in a thread of the parent). A child calls the app directly over ASGI (no
HTTP, no socket) on two routes: the benchmark's ceiling route (``GET /bench/ceiling``, no
database work: the request span alone) and ``GET /ping`` (one connection and ``SELECT 1``: the
request span plus the database's). The figure is CPU time per request of the child process,
its exporter thread included (``time.process_time``), median of the rounds. The access log is
on (level info, to a null stream) as in production, so the trace id's lookup is counted too.

    .venv/bin/python bench/bench_tracing.py [--requests 5000] [--rounds 5]

With ``--baseline SRC`` (a ``src`` directory of the code before tracing, e.g. from ``git archive
<commit> src | tar -x -C /tmp/before``), a third variant, ``without``, runs that code: ``off``
against it is what tracing costs a deployment that does not use it.

Run from the repository root.
"""

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).parent.parent
ROUTES = ("/bench/ceiling", "/ping")


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None


async def child(database_url: str, requests: int) -> dict[str, float]:
    """In the child: CPU seconds per request on each route."""
    sys.path.insert(0, str(ROOT))
    from bench.bench_request_metrics import CEILING_SCOPE, run
    from bench.ceiling_app import CEILING_PATH, ceiling
    from dealbroker.app import create_app
    from dealbroker.core import logs
    from dealbroker.core.settings import Settings

    logging.config.dictConfig(logs.config("info", "json"))
    logging.getLogger().handlers[0].setStream(open(os.devnull, "w"))  # type: ignore[attr-defined]
    app = create_app(Settings(database_url=database_url, embedded_worker="off"))
    app.add_api_route(CEILING_PATH, ceiling, methods=["GET"], include_in_schema=False)
    result = {}
    async with app.router.lifespan_context(app):
        for path in ROUTES:
            scope = {**CEILING_SCOPE, "path": path, "raw_path": path.encode()}
            await run(app, 500, scope)  # warm up
            result[path] = await run(app, requests, scope)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="a src directory of the code without tracing")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.child, args.requests))))
        return

    sys.path.insert(0, str(ROOT / "src"))
    from dealbroker.core.migrate import upgrade

    database = Path(tempfile.mkdtemp()) / "bench.db"
    url = f"sqlite+aiosqlite:///{database}"
    upgrade(url)
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEALBROKER_"))}
    variants = {
        **({"without": {**base, "PYTHONPATH": args.baseline}} if args.baseline else {}),
        "off": {**base, "PYTHONPATH": str(ROOT / "src")},
        "on": {
            **base,
            "PYTHONPATH": str(ROOT / "src"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_address[1]}",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        },
    }
    per: dict[str, dict[str, list[float]]] = {v: {r: [] for r in ROUTES} for v in variants}
    for _ in range(args.rounds):
        for name, env in variants.items():
            started = time.monotonic()
            out = subprocess.run(
                [sys.executable, __file__, "--child", url, "--requests", str(args.requests)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            for route in ROUTES:
                per[name][route].append(figures[route])
            print(f"  {name}: {figures} ({time.monotonic() - started:.1f} s)", file=sys.stderr)
    sink.shutdown()
    for route in ROUTES:
        off, on = (statistics.median(per[v][route]) for v in ("off", "on"))
        line = f"{route:15} off {off * 1e6:7.1f} µs CPU/request"
        if args.baseline:
            without = statistics.median(per["without"][route])
            line += f" (without tracing {without * 1e6:.1f}: {(off - without) * 1e6:+.1f} µs)"
        print(
            f"{line}, on {on * 1e6:7.1f} "
            f"(+{(on - off) * 1e6:.1f} µs, x{on / off:.2f}); median of {args.rounds} rounds"
        )


if __name__ == "__main__":
    main()
