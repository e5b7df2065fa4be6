"""Real ``dealbroker`` processes for end-to-end tests: ``serve`` on a loopback port, ``worker``
with its stderr drained, the CLI, and waiting for what they do."""

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from dealbroker.cli.common import start_messages
from dealbroker.core.db import create_engine, create_sessionmaker
from tests.conftest import drop_databases, make_settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port whose connections are made (by the kernel, into its backlog) and never
    answered: a database server hung, or behind a stuck proxy."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


def env(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
    env.update(
        {
            "DEALBROKER_DATABASE_URL": db_url,
            "DEALBROKER_LOG_LEVEL": "warning",
            "DEALBROKER_DEFAULT_LOCALE": "en",  # as make_settings: the tests read English
            **extra,
        }
    )
    return env


def cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dealbroker", *args],
        env=env(db_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


ROOT = Path(__file__).resolve().parents[1]


class EmulatorProcess:
    """A vendor's emulator (a test part, never production) as a process of its own on
    loopback. ``spawn`` starts ``command`` with its output in ``log`` and waits until ``ready``
    says it serves (30 s at most; a process that exits or never gets there is stopped, and the
    test fails with what it printed). ``name`` says which, in that failure."""

    name = "the emulator"
    process: "subprocess.Popen[bytes]"
    log: Path

    def spawn(
        self,
        command: list[str],
        log: Path,
        ready: Callable[[], bool],
        cwd: Path = ROOT,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                if ready():
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"{self.name} did not start:\n" + self.output())
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Server:
    """``python -m dealbroker serve`` on a free loopback port; ``settings`` are extra
    ``DEALBROKER_*`` variables. Its output up to the start is kept in ``banner``; after it, a
    thread drains the rest into ``lines``, so ``output()`` reads a running server too."""

    def __init__(
        self,
        db_url: str,
        cwd: Path,
        *args: str,
        start_timeout: float = 30,
        port: int | None = None,
        **settings: str,
    ) -> None:
        self.port = port or free_port()  # a port of its own, or the one a stopped server had
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dealbroker", "serve", "--port", str(self.port), *args],
            env=env(db_url, **settings),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.banner: list[str] = []
        deadline = time.monotonic() + start_timeout
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.banner.append(line.rstrip())
            if line.startswith("Serving on"):
                break
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/ping", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError("server did not start:\n" + "\n".join(self.banner))

    def credential(self, label: str) -> str:
        line = next(line for line in self.banner if line.strip().startswith(label + ":"))
        return line.split(":", 1)[1].strip()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        """What the server printed so far: all of it once it has stopped."""
        if self.process.poll() is not None:
            self._reader.join(timeout=5)
        return "\n".join([*self.banner, *self.lines])


class Worker:
    """``python -m dealbroker worker`` with a clean environment; stderr is drained by a thread."""

    def __init__(
        self,
        db_url: str,
        cwd: Path,
        batch: int = 50,
        lease: float = 2.0,
        poll: float = 0.2,
        **settings: str,
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
        env.update(
            {
                "DEALBROKER_DATABASE_URL": db_url,
                "DEALBROKER_WORKER_BATCH_SIZE": str(batch),
                "DEALBROKER_WORKER_LEASE_SECONDS": str(lease),
                "DEALBROKER_WORKER_POLL_SECONDS": str(poll),
                "DEALBROKER_LOG_LEVEL": "warning",
                "DEALBROKER_DEFAULT_LOCALE": "en",
                **settings,
            }
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dealbroker", "worker"],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip())
            if "running jobs:" in line:
                self.ready.set()

    def wait_ready(self, timeout: float = 20.0) -> None:
        if not self.ready.wait(timeout):
            raise AssertionError("worker did not start:\n" + self.output())

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait(self, timeout: float = 15.0) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def sent(self) -> int:
        """Deliveries the worker reported on a clean exit."""
        match = re.search(r"stopped after (\d+) deliveries", self.output())
        assert match, self.output()
        return int(match.group(1))

    def close(self) -> None:
        """Kill the process if it still runs (for ``finally``)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def drop_database(db_url: str) -> None:
    """Drop a PostgreSQL test database made by ``tests.conftest.database_url``."""
    drop_databases({db_url.rsplit("/", 1)[1]})


def wait_until(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def server_processes(supervisor: int) -> set[int]:
    """The server processes uvicorn's supervisor has spawned (not its other children)."""
    try:
        listed = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    except FileNotFoundError:
        return set()
    found = set()
    for pid in listed:
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(int(pid))
        except FileNotFoundError:
            continue  # it has just ended
    return found


def token(server: Server) -> dict[str, str]:
    """The headers of a call as the demo integration of the server's banner."""
    answer = httpx.post(
        f"{server.base}/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(server.credential("client id"), server.credential("client secret")),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['access_token']}"}


# How long a process is given to fire a deadline that has passed (seconds).
FIRE_TIMEOUT = 30.0


def run_on(db_url: str, work: Any) -> Any:
    """``await work(sessionmaker)`` on a short-lived engine, in an event loop of its own."""

    async def run() -> Any:
        engine = create_engine(db_url, pool_size=3)
        try:
            sessionmaker = create_sessionmaker(engine)
            await start_messages(sessionmaker, make_settings(db_url))  # deals here send some
            return await work(sessionmaker)
        finally:
            await engine.dispose()

    return asyncio.run(run())
