"""The operator's commands never create a database: run where there is none (outside the
directory ``serve`` runs in, where the default SQLite file would be made, empty), or on a
database not migrated, they say so in one line and exit 2; ``serve`` on a fresh machine still
makes and migrates its embedded database (the README's quick start)."""

import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from alembic import command

from dealbroker.core.migrate import alembic_config, head_revision, where
from tests.conftest import BACKENDS, database_url
from tests.processes import Server, free_port

pytestmark = pytest.mark.server

FIRST = "run `dealbroker serve` or `dealbroker migrate` first, or set DEALBROKER_DATABASE_URL"
COMMANDS = [
    ["integrations", "list"],
    ["portal", "members", "list", "dbk_nobody"],
    ["deals", "show", str(uuid.uuid4())],
    ["audit", "list"],
]


def run(cwd: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in ``cwd``, with no ``DEALBROKER_`` variable but ``settings``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
    return subprocess.run(
        [sys.executable, "-m", "dealbroker", *args],
        env={**clean, "DEALBROKER_LOG_LEVEL": "warning", **settings},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: " ".join(args[:2]))
def test_outside_the_checkout_one_line_and_nothing_created(args, tmp_path):
    line = one_line(run(tmp_path, *args))
    assert line == f"error: no database at {tmp_path.resolve() / 'dealbroker.db'}: {FIRST}"
    assert list(tmp_path.iterdir()) == []


def test_listen_without_a_secret_creates_nothing(tmp_path):
    done = run(
        tmp_path,
        "listen",
        "--forward-to",
        "http://127.0.0.1:9/hooks",
        "--client-id",
        "dbk_nobody",
        "--client-secret",
        "x",
        DEALBROKER_API_URL=f"http://127.0.0.1:{free_port()}",
    )
    line = one_line(done)
    assert "give --webhook-secret" in line
    assert f"no database at {tmp_path.resolve() / 'dealbroker.db'}" in line
    assert list(tmp_path.iterdir()) == []


def test_an_empty_sqlite_file_is_not_migrated(tmp_path):
    empty = tmp_path / "other.db"
    empty.touch()
    url = f"sqlite+aiosqlite:///{empty}"
    line = one_line(run(tmp_path, "integrations", "list", DEALBROKER_DATABASE_URL=url))
    assert line == f"error: no dealbroker schema in the database at {empty}: {FIRST}"
    with sqlite3.connect(empty) as opened:  # no tables made
        assert opened.execute("SELECT name FROM sqlite_master").fetchall() == []
    assert not (tmp_path / "dealbroker.db").exists()


def test_the_database_is_named_without_its_password():
    assert where("postgresql+asyncpg://broker:s3cret@db.internal:5432/deals") == (
        "postgresql+asyncpg://broker:***@db.internal:5432/deals"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_database_behind_the_code_is_refused(backend, tmp_path):
    url = database_url(backend, tmp_path, f"behind_{uuid.uuid4().hex[:8]}")
    command.downgrade(alembic_config(url), "base")
    line = one_line(run(tmp_path, "integrations", "list", DEALBROKER_DATABASE_URL=url))
    assert line.startswith("error: no dealbroker schema in the database at ")
    assert line.endswith(f": {FIRST}")

    command.upgrade(alembic_config(url), "0027")
    line = one_line(run(tmp_path, "integrations", "list", DEALBROKER_DATABASE_URL=url))
    assert line == (
        f"error: the database schema is at 0027; this code needs {head_revision()}: "
        "run dealbroker migrate"
    )


def test_serve_on_a_fresh_machine_makes_its_database_and_the_commands_use_it(tmp_path):
    """The README's quick start: ``serve`` in an empty directory with no settings makes and
    migrates ``dealbroker.db`` there; the operator's commands in that directory then work."""
    server = Server("sqlite+aiosqlite:///./dealbroker.db", tmp_path)
    try:
        assert httpx.get(f"{server.base}/readyz").status_code == 200
    finally:
        server.stop()
    assert (tmp_path / "dealbroker.db").exists()
    listed = run(tmp_path, "integrations", "list")
    assert listed.returncode == 0, listed.stderr
    assert "Demo integration" in listed.stdout
