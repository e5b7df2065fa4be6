"""A private PostgreSQL server for tests that stop and start it (a database outage), so the
shared server the rest of the suite uses is never touched. Made with the installed server's own
``initdb`` and ``pg_ctl``, in a temporary directory, on a free loopback port; as the
``postgres`` user when the tests run as root (PostgreSQL refuses to run as root)."""

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text

from dealbroker.core.db import create_engine
from tests.processes import free_port


def _bin_dir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent  # a link in PATH to the version's own directory
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name)
    return versions[-1] if versions else None


class Cluster:
    """A server of its own; or, given ``standby_of``, a streaming standby of that running
    server, copied from it by ``pg_basebackup`` (which writes ``standby.signal`` and the
    primary's address). ``settings`` are PostgreSQL settings it starts with."""

    def __init__(
        self,
        directory: Path,
        standby_of: "Cluster | None" = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL's server programs (initdb, pg_ctl) are not installed")
        self.bin_dir = bin_dir
        self.directory = directory
        self.data = directory / "data"
        self.port = free_port()
        self.url = f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}"
        self.settings = dict(settings or {})
        directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(directory, "postgres", "postgres")
        if standby_of is None:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        else:
            self._run(
                "pg_basebackup",
                *("-h", "127.0.0.1", "-p", str(standby_of.port), "-U", "postgres"),
                *("-D", str(self.data), "--write-recovery-conf", "--no-sync"),
            )

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} -c fsync=off"
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.directory / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def crash(self) -> None:
        """Stop at once, as a crash does: no checkpoint, every connection cut."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def promote(self) -> None:
        """A standby becomes a primary (``pg_ctl`` waits until it takes writes)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def close(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.directory, ignore_errors=True)


@contextmanager
def running(
    prefix: str, standby_of: Cluster | None = None, settings: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """A private server (``Cluster``), started; stopped and removed afterwards. Not under
    pytest's temporary directory: the postgres user must be able to reach it."""
    pg = Cluster(Path(tempfile.mkdtemp(prefix=prefix)), standby_of, settings)
    try:
        pg.start()
        yield pg
    finally:
        pg.close()


def sql(url: str, statement: str, autocommit: bool = False) -> list:
    """Run one statement on ``url`` from outside the server under test; its rows."""

    async def run() -> list:
        engine = create_engine(url, pool_size=1)
        try:
            options = {"isolation_level": "AUTOCOMMIT"} if autocommit else {}
            async with engine.connect() as connection:
                connection = await connection.execution_options(**options)
                result = await connection.execute(text(statement))
                rows = list(result) if result.returns_rows else []
                await connection.commit()
                return rows
        finally:
            await engine.dispose()

    return asyncio.run(run())
