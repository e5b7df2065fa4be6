"""The delivery worker's send path, in process: CPU per attempt of ``DeliveryJob._send``.

A child process builds a ``DeliveryJob`` (no database: only its send path is called) on uvloop,
as ``dealbroker worker`` runs, and sends batches of ``--batch`` attempts at a time with
``asyncio.gather``, as a batch is sent, to ``bench_webhooks.py``'s loopback receiver: signing,
the aiohttp request, the bounded read of the answer, the peer check, the outcome and its
metrics. The figure is the child's CPU time per attempt (``time.process_time`` around each
batch's sending; the batch's rows are made outside it, one batch at a time, so the heap the
garbage collector walks stays about a worker's), after a warm-up batch that opens the
connections; the median of ``--rounds`` rounds.

With ``--baseline SRC`` (a ``src`` directory of other code, e.g. from ``git archive <commit> src
| tar -x -C ../before``), each round runs a child on that code and one on this tree's, in
alternating order, so both see the same noise. ``--policy production`` sends under the
production egress policy (the vetting resolver and the IP-literal middleware), with loopback
counted as public for the receiver's sake, as the tests' ``loopback_is_public`` does;
``sandbox`` (the default) as ``bench_webhooks.py``'s worker sends (private addresses allowed).
``--gc freeze`` (the default) freezes what the imports made before sending (``gc.freeze``), as
``dealbroker worker`` does once started; ``--gc default`` leaves the collector as it is, so its
full collections walk every object the imports made.

    .venv/bin/python bench/bench_send_path.py --baseline ../before/src [--rounds 7]

The child is pinned to core 0 and the receiver to core 1 (with ``taskset``, on 2 cores or more).
Run from the repository root.
"""

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).parent.parent
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # any base64 key: nobody verifies here


async def child(url: str, policy: str, batch: int, batches: int) -> float:
    """In the child: CPU seconds per attempt."""
    import ipaddress

    import orjson

    from dealbroker.events import egress
    from dealbroker.events.envelope import EventKind, deal_status, envelope
    from dealbroker.events.tasks import DeliveryJob

    if policy == "production":
        real = egress._non_public_reason
        loopback = ipaddress.ip_network("127.0.0.0/8")

        def reason(address):  # type: ignore[no-untyped-def]
            return None if address in loopback else real(address)

        egress._non_public_reason = reason  # type: ignore[assignment]
    job = DeliveryJob(
        SimpleNamespace(kw={}),  # type: ignore[arg-type]
        allow_private=policy == "sandbox",
        batch_size=batch,
    )
    now = datetime.now(UTC)
    endpoint_id, integration_id = uuid.uuid4(), uuid.uuid4()

    def row() -> SimpleNamespace:
        event_id = uuid.uuid4()
        data = deal_status(uuid.uuid4(), "Published", now)
        payload = orjson.dumps(envelope(event_id, EventKind.DEAL_STATUS, now, data, 1)).decode()
        return SimpleNamespace(
            id=uuid.uuid4(),
            endpoint_id=endpoint_id,
            event_id=event_id,
            integration_id=integration_id,
            attempts=0,
            webhook_secret=SECRET,
            previous_webhook_secret=None,
            previous_webhook_secret_expires_at=None,
            payload=payload,
            url=url,
            failing_since=None,
        )

    async def send(rows: list[SimpleNamespace]) -> None:
        outcomes = await asyncio.gather(*(job._send(r) for r in rows))
        if not all(o.success for o in outcomes):
            raise RuntimeError(f"not all answered 2xx: {outcomes[0]}")

    try:
        await send([row() for _ in range(batch)])  # opens the connections
        cpu = 0.0
        for _ in range(batches):
            rows = [row() for _ in range(batch)]  # made unmeasured, one batch at a time
            started = time.process_time()
            await send(rows)
            cpu += time.process_time() - started
        return cpu / (batch * batches)
    finally:
        await job.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=200, help="attempts sent at a time")
    parser.add_argument("--batches", type=int, default=50, help="measured batches per child")
    parser.add_argument("--policy", choices=("sandbox", "production"), default="sandbox")
    parser.add_argument("--baseline", help="a src directory of the code to compare with")
    parser.add_argument("--candidate", help="a src directory to measure instead of this tree's")
    parser.add_argument(
        "--gc",
        choices=("freeze", "default"),
        default="freeze",
        help="freeze what the imports made before sending, as dealbroker worker does (freeze), "
        "or leave the garbage collector as it is (default)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import gc

        import uvloop

        import dealbroker.events.egress_session
        import dealbroker.events.tasks  # noqa: F401

        if args.gc == "freeze":
            gc.collect()
            gc.freeze()

        seconds = uvloop.run(child(args.child, args.policy, args.batch, args.batches))
        print(json.dumps(seconds))
        return

    pin = (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    taskset = (lambda core: ["taskset", "-c", str(core)]) if pin else (lambda core: [])
    receiver = subprocess.Popen(
        [*taskset(1), sys.executable, str(ROOT / "bench" / "bench_webhooks.py"), "--receiver"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert receiver.stdout is not None
    url = f"http://127.0.0.1:{int(receiver.stdout.readline().split()[1])}/hooks"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEALBROKER_"))}
    variants = {"this": {**base, "PYTHONPATH": args.candidate or str(ROOT / "src")}}
    if args.baseline:
        variants = {"baseline": {**base, "PYTHONPATH": args.baseline}, **variants}
    per: dict[str, list[float]] = {name: [] for name in variants}
    command = [
        *taskset(0),
        sys.executable,
        __file__,
        "--child",
        url,
        "--policy",
        args.policy,
        "--gc",
        args.gc,
        "--batch",
        str(args.batch),
        "--batches",
        str(args.batches),
    ]
    try:
        for r in range(args.rounds):
            names = list(variants)[r % len(variants) :] + list(variants)[: r % len(variants)]
            for name in names:
                out = subprocess.run(
                    command, env=variants[name], capture_output=True, text=True, cwd=ROOT
                )
                if out.returncode:
                    raise SystemExit(f"{name}: child failed\n{out.stderr}")
                per[name].append(json.loads(out.stdout.strip().splitlines()[-1]) * 1e6)
                print(f"round {r + 1} {name:8} {per[name][-1]:6.1f} µs CPU/attempt", flush=True)
    finally:
        receiver.terminate()
        receiver.wait()
    print(f"\nmedians of {args.rounds} rounds of {args.batch * args.batches}", end="")
    print(f" ({args.policy} policy, gc {args.gc})")
    for name, figures in per.items():
        print(f"{name:8} {statistics.median(figures):6.1f} µs CPU/attempt", end="")
        print(f"  (min {min(figures):.1f}, max {max(figures):.1f})")
    if args.baseline:
        pairs = [t - b for b, t in zip(per["baseline"], per["this"], strict=True)]
        print(f"this - baseline, per round: median {statistics.median(pairs):+.1f} µs", end="")
        print(f" ({', '.join(f'{d:+.1f}' for d in pairs)})")


if __name__ == "__main__":
    main()
