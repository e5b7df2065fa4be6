"""A rolling restart: SIGHUP to ``serve --workers N`` replaces every server process, each new
one serving before the old one stops, while clients send requests throughout; not one fails.
(``ExecReload=`` in the units of docs/operations/deploy.md sends it.)"""

import re
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BACKENDS, SELLER, database_url
from tests.processes import Server, server_processes, token, wait_until

pytestmark = pytest.mark.server
OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations" / "deploy.md"


def documented_reload_signal() -> signal.Signals:
    """The signal the API unit of docs/operations/deploy.md sends on ``systemctl reload``."""
    unit = OPERATIONS.read_text().split("dealbroker-api.service", 1)[1].split("```", 1)[0]
    match = re.search(r"^ExecReload=/bin/kill -(\w+) \$MAINPID$", unit, re.MULTILINE)
    assert match, "the API unit has no ExecReload= sending a signal"
    return signal.Signals[f"SIG{match.group(1)}"]


CLIENTS = 4


class Load:
    """``CLIENTS`` threads, each creating a deal and reading it back in a bounded loop, on a
    keep-alive connection of its own (as an integration's client would).

    A server process that stops closes its idle keep-alive connections, and a request sent on
    one at that very moment meets a reset before the server read it: HTTP lets a client send an
    idempotent request again then (RFC 9110, 9.2.2), and a create carries its Idempotency-Key,
    so each request is sent at most twice, the second time only after such a reset, with the
    same key. A request that fails twice, or gets any answer but a success, is a failure."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        self.base, self.headers = base, headers
        self.statuses: Counter[int] = Counter()
        self.failures: list[str] = []
        self.resent = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(CLIENTS)]
        for thread in self.threads:
            thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30) as client:
            for _ in range(20_000):  # bounded, whatever happens
                if self.stop.is_set():
                    return
                key = str(uuid.uuid4())
                try:
                    created = self._send(
                        client,
                        "POST",
                        "/deals/v1/deals",
                        json={"name": "Reload", "price": 100, "seller": SELLER},
                        headers={**self.headers, "Idempotency-Key": key},
                    )
                    self._record(created)
                    if created.status_code == 201:
                        read = self._send(
                            client,
                            "GET",
                            f"/deals/v1/deals/{created.json()['id']}",
                            headers=self.headers,
                        )
                        self._record(read)
                except httpx.HTTPError as exc:
                    self.failures.append(f"no answer: {exc!r}")

    def _send(self, client: httpx.Client, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """The request, sent once more (as it was) if its connection was reset or closed under
        it before any answer."""
        try:
            return client.request(method, url, **kwargs)
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectError):
            self.resent += 1
            return client.request(method, url, **kwargs)

    def _record(self, response: httpx.Response) -> None:
        self.statuses[response.status_code] += 1
        if not response.is_success:
            self.failures.append(f"{response.status_code}: {response.text[:200]}")

    def total(self) -> int:
        return sum(self.statuses.values()) + len(self.failures)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="--workers needs PostgreSQL")
def test_reload_replaces_every_server_process_with_no_failed_request(tmp_path, record_property):
    db = database_url("postgresql", tmp_path, f"reload_{uuid.uuid4().hex[:8]}")
    # Unpaced clients on a fast machine pass the default 6,000 requests a minute: the rate
    # limit (tested on its own) is off, so every answer but a success is the reload's doing.
    server = Server(
        db,
        tmp_path,
        "--workers",
        "2",
        start_timeout=60,
        DEALBROKER_RATE_LIMIT_REQUESTS_PER_MINUTE="0",
    )
    load = None
    try:
        headers = token(server)
        wait_until(lambda: len(server_processes(server.process.pid)) == 2, 30, "two processes")
        old = server_processes(server.process.pid)
        load = Load(server.base, headers)
        wait_until(lambda: load.total() >= 50, 60, "requests before the reload")
        before = load.total()
        started = time.monotonic()
        server.process.send_signal(documented_reload_signal())
        wait_until(
            lambda: (
                server_processes(server.process.pid).isdisjoint(old)
                and len(server_processes(server.process.pid)) == 2
            ),
            120,
            "every server process to be replaced",
            interval=0.1,
        )
        reload_seconds = time.monotonic() - started
        during = load.total() - before
        after = load.total()
        wait_until(lambda: load.total() >= after + 50, 60, "requests after the reload")
        load.finish()
        assert server.process.poll() is None
        record_property("reload_seconds", round(reload_seconds, 1))
        record_property("requests_during_reload", during)
        record_property("failed_requests", len(load.failures))
        record_property("requests_sent_again_after_a_reset", load.resent)
        assert load.failures == [], load.failures[:5]
        assert during >= 20  # the requests did run throughout the reload
    finally:
        if load is not None:
            load.finish()
        server.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_single_server_survives_the_reload_signal(backend, tmp_path):
    """Without --workers there is nothing to replace: the signal is logged and ignored, never
    the end of the API (which systemd would count as a clean stop and not restart)."""
    db = database_url(backend, tmp_path, f"single_{uuid.uuid4().hex[:8]}")
    server = Server(db, tmp_path)
    try:
        server.process.send_signal(documented_reload_signal())
        wait_until(lambda: "SIGHUP ignored" in server.output(), 30, "the signal to be logged")
        assert server.process.poll() is None
        assert httpx.get(f"{server.base}/ping", timeout=10).status_code == 200
    finally:
        server.stop()
