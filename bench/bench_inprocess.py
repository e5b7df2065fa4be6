r"""The API's cost per request in process: the app as ``serve`` builds it, called over ASGI
without HTTP, against PostgreSQL, with the access log written (to a null stream), and the bare
FastAPI app (``bench/bare_app.py``) beside it. CPU per request (``time.process_time``: this
process's own CPU, asyncpg's protocol and the event loop included, PostgreSQL's not), so a
busy machine disturbs it far less than the HTTP benchmark's throughput.

With ``--baseline SRC`` the same rounds run, interleaved, against another tree's ``src`` (an
older checkout), each tree in a child process of its own, so both see the same moments::

    .venv/bin/python bench/bench_inprocess.py
    .venv/bin/python bench/bench_inprocess.py --baseline ../before/src --rounds 5

Prints the median over rounds of each scenario's CPU µs per request, and its ratio to the bare
route and to ``/healthz`` (as ``bench_api.py`` names them: ``healthz/bare`` is bare's cost over
``/healthz``'s, a throughput ratio).

On a machine shared with other work a round's mean moves with the others' load; with
``--least-of N`` a round's figure is instead the cheapest of its batches of ``N`` requests,
which moves far less (``--scenarios get,list`` runs only those, with bare)::

    .venv/bin/python bench/bench_inprocess.py --baseline ../before/src --rounds 10 \
        --requests 1000 --least-of 25 --scenarios get,list
"""

import argparse
import asyncio
import base64
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness as h  # noqa: E402

SCENARIOS = ("bare", "healthz", "get", "list", "create")


class Caller:
    """Calls an ASGI app as a server would, one request at a time."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(
        self, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b""
    ) -> tuple[int, bytes]:
        path, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1:8000"), *headers],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        sent = False
        status, chunks = 0, []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the client never disconnects
            raise AssertionError

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return status, b"".join(chunks)


async def _child(
    db_url: str, rounds: int, n: int, scenarios: tuple[str, ...], least_of: int
) -> dict[str, list[float]]:
    """Each of ``scenarios``, ``rounds`` times ``n`` requests, in this process; CPU µs per
    request (with ``least_of``, that of the cheapest batch of so many requests)."""
    client = await h.create_integration(db_url)
    os.environ.update(
        DEALBROKER_DATABASE_URL=db_url,
        DEALBROKER_BASE_URL="http://127.0.0.1:8000",
        DEALBROKER_RATE_LIMIT_REQUESTS_PER_MINUTE="1000000000",
        DEALBROKER_LOG_LEVEL="info",
    )
    import logging.config

    from bare_app import BARE_PATH
    from bare_app import app as bare_app

    from dealbroker.app import create_app
    from dealbroker.core import logs
    from dealbroker.core.settings import Settings

    settings = Settings()
    logging.config.dictConfig(logs.config(settings.log_level, settings.log_format))
    null = io.StringIO()
    for logger in (logging.getLogger(), *map(logging.getLogger, logging.root.manager.loggerDict)):
        for handler in getattr(logger, "handlers", []):
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(null)  # written, formatted, then dropped
    app = create_app(settings)
    bare, ours = Caller(bare_app), Caller(app)
    async with app.router.lifespan_context(app):
        basic = base64.b64encode(f"{client.client_id}:{client.client_secret}".encode())
        form = [(b"content-type", b"application/x-www-form-urlencoded")]
        status, body = await ours(
            "POST",
            "/oauth2/token",
            [(b"authorization", b"Basic " + basic), *form],
            b"grant_type=client_credentials",
        )
        assert status == 200, body
        auth = [(b"authorization", b"Bearer " + json.loads(body)["access_token"].encode())]
        as_json = [*auth, (b"content-type", b"application/json")]
        ids = []
        for i in range(100):
            status, body = await ours(
                "POST", "/deals/v1/deals", as_json, h.create_deal_body(i % 1000)
            )
            assert status == 201, body
            ids.append(json.loads(body)["id"])

        def request(name: str, i: int) -> Any:
            if name == "bare":
                return bare("GET", BARE_PATH, [])
            if name == "healthz":
                return ours("GET", "/healthz", [])
            if name == "get":
                return ours("GET", f"/deals/v1/deals/{ids[i % len(ids)]}", auth)
            if name == "list":
                return ours("GET", "/deals/v1/deals?page=1", auth)
            return ours("POST", "/deals/v1/deals", as_json, h.create_deal_body(i % 1000))

        results: dict[str, list[float]] = {name: [] for name in scenarios}
        for _ in range(rounds):
            for name in scenarios:
                for i in range(n // 10):  # warm
                    await request(name, i)
                batch = least_of or n
                costs = []
                for first in range(0, n - batch + 1, batch):
                    started = time.process_time()
                    for i in range(first, first + batch):
                        status, body = await request(name, i)
                        assert status in (200, 201), (name, status, body[:300])
                    costs.append((time.process_time() - started) / batch * 1e6)
                results[name].append(min(costs))
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    h.add_common_args(p, "dealbroker_bench_inprocess")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=2000, help="per scenario and round")
    p.add_argument("--baseline", help="another tree's src, measured interleaved as 'before'")
    p.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help="comma-separated, of " + ", ".join(SCENARIOS) + " (bare is always run)",
    )
    p.add_argument(
        "--least-of",
        type=int,
        default=0,
        metavar="N",
        help="a round's figure: its cheapest batch of N requests, not its mean",
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    scenarios = ("bare", *(s for s in args.scenarios.split(",") if s in SCENARIOS and s != "bare"))
    if args.child:
        import uvloop

        run = _child(args.child, 1, args.requests, scenarios, args.least_of)
        print(json.dumps(uvloop.run(run)))
        return

    trees = {"after": str(h.REPO_ROOT / "src")}
    if args.baseline:
        trees = {"before": str(Path(args.baseline).resolve()), **trees}
    with h.fresh_database(args) as db_url:
        runs: dict[str, dict[str, list[float]]] = {t: {s: [] for s in scenarios} for t in trees}
        for r in range(args.rounds):
            for tree, src in trees.items():
                env = {**os.environ, "PYTHONPATH": f"{src}:{h.BENCH_DIR}"}
                env = {k: v for k, v in env.items() if not k.startswith("DEALBROKER_")}
                cmd = [
                    sys.executable,
                    __file__,
                    "--child",
                    db_url,
                    "--requests",
                    str(args.requests),
                    "--scenarios",
                    ",".join(scenarios),
                    "--least-of",
                    str(args.least_of),
                ]
                with h.pinned(0 if h.can_pin(args) else None):
                    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
                if out.returncode != 0:
                    sys.exit(f"the {tree} tree failed:\n{out.stderr[-3000:]}")
                for name, values in json.loads(out.stdout.splitlines()[-1]).items():
                    runs[tree][name] += values
                print(
                    f"  round {r + 1} {tree}: "
                    + "  ".join(f"{n} {runs[tree][n][-1]:.0f}" for n in scenarios),
                    flush=True,
                )
    figure = f"the cheapest batch of {args.least_of}" if args.least_of else "the mean"
    print(f"\nCPU µs per request, in process (median of rounds, each {figure});")
    print("ratios as bench_api.py's")
    print(f"{'tree':8} {'scenario':9} {'µs/req':>8} {'/bare':>7} {'/healthz':>9}")
    for tree, per in runs.items():
        med = {n: statistics.median(v) for n, v in per.items()}
        for name in scenarios:
            ratio_bare = med["bare"] / med[name]
            health = f"{med['healthz'] / med[name]:9.3f}" if "healthz" in med else f"{'-':>9}"
            print(f"{tree:8} {name:9} {med[name]:8.0f} {ratio_bare:7.3f} {health}")
    h.write_results("inprocess", {"environment": h.environment(), "runs": runs})


if __name__ == "__main__":
    main()
