"""Which async HTTP client sends webhooks cheapest: the same bare loop for each candidate.

Rounds of ``--requests`` POSTs of a signed webhook body, ``--concurrency`` at a time (the
worker's batch), from core 0 to ``bench_webhooks.py``'s loopback receiver on core 1; per client,
requests/s and CPU µs per request here (``time.process_time``, all threads). See bench/README.md.
"""

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import orjson

from dealbroker.events.egress import webhook_session
from dealbroker.events.envelope import EventKind, deal_status, envelope
from dealbroker.events.signing import signed_headers

Post = Callable[[str, bytes, dict[str, str]], Awaitable[int]]
Client = tuple[Post, Callable[[], Awaitable[object]]]  # post(url, body, headers) -> status; close


def httpx_client(limit: int) -> Client:
    import httpx

    # 20 kept alive, as the worker had it: with 200, httpcore's pool doubled the CPU per request.
    limits = httpx.Limits(max_connections=limit, max_keepalive_connections=min(20, limit))
    client = httpx.AsyncClient(limits=limits, timeout=15.0, trust_env=False)

    async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
        return (await client.post(url, content=body, headers=headers)).status_code

    return post, client.aclose


def aiohttp_session(limit: int, worker: bool = False) -> Client:
    from aiohttp import ClientSession, TCPConnector

    if worker:
        session = webhook_session(allow_private=True, max_connections=limit)
    else:
        session = ClientSession(connector=TCPConnector(limit=limit), trust_env=False)

    async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
        async with session.post(url, data=body, headers=headers, allow_redirects=False) as r:
            await r.content.read(64 * 1024)
            return r.status

    return post, session.close


def niquests_session(limit: int) -> Client:
    import niquests

    session = niquests.AsyncSession(pool_connections=1, pool_maxsize=limit)
    session.trust_env = False

    async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
        response = await session.post(url, data=body, headers=headers, allow_redirects=False)
        return response.status_code or 0

    return post, session.close


def pyreqwest_client(limit: int) -> Client:
    from pyreqwest.client import ClientBuilder

    client = ClientBuilder().max_connections(limit).follow_redirects(False).no_proxy().build()

    async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
        response = await client.post(url).headers(headers).body_bytes(body).build().send()
        await response.bytes()
        return response.status

    return post, client.close


CLIENTS: dict[str, Callable[[int], Client]] = {
    "httpx": httpx_client,
    "aiohttp": aiohttp_session,
    "niquests": niquests_session,
    "pyreqwest": pyreqwest_client,
    "worker": lambda limit: aiohttp_session(limit, worker=True),  # its own, sandbox policy
}


async def one_round(make: Callable[[int], Client], url: str, n: int, batch: int) -> list[float]:
    """[requests/s, CPU µs per request] of ``n`` POSTs, ``batch`` at a time."""
    now = datetime.now(UTC)
    data = deal_status(uuid.uuid4(), "Published", now)
    payload = orjson.dumps(envelope(uuid.uuid4(), EventKind.DEAL_STATUS, now, data, 1)).decode()
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # any base64 key: nobody verifies here
    headers = [signed_headers([secret], str(uuid.uuid4()), now, payload) for _ in range(n)]
    body, (post, close) = payload.encode(), make(batch)
    try:
        await asyncio.gather(*(post(url, body, h) for h in headers[:batch]))  # connect first
        cpu, start = time.process_time(), time.perf_counter()
        for i in range(0, n, batch):
            codes = await asyncio.gather(*(post(url, body, h) for h in headers[i : i + batch]))
            if any(code != 200 for code in codes):
                raise RuntimeError("the receiver did not answer 200")
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        await close()
    return [n / seconds, cpu * 1e6 / n]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=4000, help="POSTs per client per round")
    p.add_argument("--concurrency", type=int, default=200, help="the worker's batch size")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated, in order")
    args = p.parse_args()
    names = args.clients.split(",")
    cmd = [sys.executable, str(Path(__file__).with_name("bench_webhooks.py")), "--receiver"]
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        os.sched_setaffinity(0, {0})
        cmd = ["taskset", "-c", "1", *cmd]
    receiver = subprocess.Popen(cmd, stdout=subprocess.PIPE)  # prints "ready <port>"
    assert receiver.stdout is not None
    url = f"http://127.0.0.1:{int(receiver.stdout.readline().split()[1])}/hooks"
    results: dict[str, list[list[float]]] = {name: [] for name in names}  # [req/s, µs]
    try:
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
                row = asyncio.run(one_round(CLIENTS[name], url, args.requests, args.concurrency))
                results[name].append(row)
                print(f"round {r + 1} {name:10} {row[0]:7.0f} req/s {row[1]:7.0f} µs CPU/request")
    finally:
        receiver.terminate()
        receiver.wait()
    print(f"\nmedians of {args.rounds} rounds of {args.requests}, {args.concurrency} at a time")
    print(f"{'client':10} {'req/s':>7} {'µs CPU/req':>11}")
    for name, rows in results.items():
        rate, cpu = (statistics.median(column) for column in zip(*rows, strict=True))
        print(f"{name:10} {rate:7.0f} {cpu:11.0f}")


if __name__ == "__main__":
    main()
