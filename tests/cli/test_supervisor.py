"""``serve --workers N`` through a database outage and a failed start, with real processes: a
server process started while PostgreSQL is down serves 503 and recovers; the supervisor keeps
serving, and exits non-zero whenever something other than a stop signal ends it, so a unit with
``Restart=on-failure`` brings the API back.

The outage runs on a private PostgreSQL server (tests.pg_cluster) that the test stops and
starts; the shared one is never stopped."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dealbroker.core.migrate import upgrade
from tests.conftest import BACKENDS, SELLER, database_url
from tests.pg_cluster import Cluster, running, sql
from tests.processes import (
    Server,
    Worker,
    drop_database,
    env,
    free_port,
    server_processes,
    token,
    wait_until,
)

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif("postgresql" not in BACKENDS, reason="--workers needs PostgreSQL"),
]


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with running("dealbroker-supervisor-") as pg:
        yield pg


def replace_one(server: Server, old: int) -> int:
    """SIGTERM the server process ``old`` and wait for the supervisor's replacement."""
    before = server_processes(server.process.pid)
    os.kill(old, signal.SIGTERM)
    wait_until(
        lambda: (
            server.process.poll() is not None
            or (old not in (now := server_processes(server.process.pid)) and len(now) == 2)
        ),
        60,
        "the supervisor to replace a server process",
        interval=0.2,
    )
    assert server.process.poll() is None, f"the supervisor stopped:\n{server.output()}"
    (new,) = server_processes(server.process.pid) - before
    return new


def test_server_processes_started_during_an_outage_serve_503_then_recover(
    cluster, tmp_path, record_property
):
    """The production incident: PostgreSQL down, a server process stopped. Its replacement used
    to fail its start (the sandbox's link key is read from the database), and uvicorn's
    supervisor then stopped the healthy one too and exited 0. Now both replacements start,
    answer 503 with Retry-After while the database is down, and serve once it is back."""
    sql(f"{cluster.url}/postgres", "CREATE DATABASE supervised", autocommit=True)
    db = f"{cluster.url}/supervised"
    upgrade(db)
    server = Server(db, tmp_path, "--workers", "2", start_timeout=60)
    try:
        headers = token(server)
        wait_until(lambda: len(server_processes(server.process.pid)) == 2, 30, "two processes")
        cluster.stop()
        for old in sorted(server_processes(server.process.pid)):
            replace_one(server, old)
        # Both server processes now started without a database; each answers, and says why.
        for _ in range(10):
            answer = httpx.post(
                f"{server.base}/deals/v1/deals",
                json={"name": "During the outage", "price": 100, "seller": SELLER},
                headers=headers,
                timeout=30,
            )
            assert answer.status_code == 503, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.headers["retry-after"] == "5"

        cluster.start()
        back_at = time.monotonic()
        wait_until(
            lambda: httpx.get(f"{server.base}/ping", timeout=10).status_code == 200,
            30,
            "the API to answer again",
            interval=0.2,
        )
        record_property("seconds_to_serve_after_restart", round(time.monotonic() - back_at, 1))
        created = set()
        for _ in range(20):  # spread over both processes: each has loaded its links
            answer = httpx.post(
                f"{server.base}/deals/v1/deals",
                json={"name": "After the outage", "price": 100, "seller": SELLER},
                headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
                timeout=30,
            )
            if answer.status_code == 503:  # a process not yet reconnected: bounded retries
                time.sleep(0.5)
                continue
            assert answer.status_code == 201, answer.text
            assert answer.json()["url"].startswith(server.base)
            created.add(answer.json()["id"])
        assert len(created) >= 10
        assert server.process.poll() is None

        server.process.send_signal(signal.SIGTERM)  # a stop signal is a clean stop: 0
        assert server.process.wait(timeout=60) == 0, server.output()
    finally:
        server.stop()


def test_supervisor_exits_non_zero_when_a_server_process_cannot_start(tmp_path):
    """A replacement that cannot start for good (its database is gone) makes the supervisor
    stop; it exits 1 with one line saying so, not 0, so the service manager restarts it."""
    db = database_url("postgresql", tmp_path, f"gone_{uuid.uuid4().hex[:8]}")
    server = Server(db, tmp_path, "--workers", "2", start_timeout=60)
    try:
        wait_until(lambda: len(server_processes(server.process.pid)) == 2, 30, "two processes")
        drop_database(db)
        os.kill(min(server_processes(server.process.pid)), signal.SIGTERM)
        code = server.process.wait(timeout=90)
    finally:
        server.stop()
    output = server.output()
    assert code == 1, output
    assert output.splitlines()[-1].endswith(
        "stopped: a server process could not start (logged above)"
    ), output


def _start_with_no_database(command: str, tmp_path: Path, **settings: str) -> tuple[int, str]:
    closed = free_port()  # nothing listens there
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{closed}/nothing"
    args = [command, "--port", str(free_port())] if command == "serve" else [command]
    process = subprocess.run(
        [sys.executable, "-m", "dealbroker", *args],
        env=env(url, DEALBROKER_STARTUP_WAIT_SECONDS="2", **settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return process.returncode, process.stderr


@pytest.mark.parametrize("command", ["serve", "worker", "migrate"])
def test_start_with_the_database_down_is_one_line_and_non_zero(command, tmp_path):
    code, err = _start_with_no_database(command, tmp_path, DEALBROKER_LOG_FORMAT="text")
    assert code == 1, err
    lines = err.splitlines()
    assert "Traceback" not in err
    # At most the line saying it waits, and the one saying why it gives up.
    assert len(lines) <= 2, err
    assert "cannot start: the database does not answer" in lines[-1], err
    assert "(waited 2 s)" in lines[-1]


@pytest.mark.parametrize("command", ["serve", "worker", "migrate"])
def test_start_with_the_database_down_logs_json_in_json_mode(command, tmp_path):
    code, err = _start_with_no_database(command, tmp_path, DEALBROKER_LOG_FORMAT="json")
    assert code == 1, err
    records = [json.loads(line) for line in err.splitlines()]
    assert records[-1]["level"] == "ERROR"
    assert records[-1]["logger"] == "dealbroker.process"
    assert records[-1]["message"].startswith("cannot start: the database does not answer")


def test_server_and_worker_wait_for_the_database_at_start(cluster, tmp_path):
    """Started while PostgreSQL is down, both wait (bounded) and start once it answers."""
    sql(f"{cluster.url}/postgres", "CREATE DATABASE late", autocommit=True)
    db = f"{cluster.url}/late"
    upgrade(db)
    cluster.stop()
    worker = Worker(db, tmp_path, DEALBROKER_STARTUP_WAIT_SECONDS="120")
    try:
        wait_until(lambda: "waiting up to 120 s" in worker.output(), 30, "the worker to wait")
        cluster.start()
        worker.wait_ready(60)
        assert worker.process.poll() is None
    finally:
        worker.close()
    assert "Traceback" not in worker.output()
