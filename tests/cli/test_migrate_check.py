"""Deploys: ``migrate --check`` says whether the schema is the code's; ``serve`` (when it does
not migrate itself) and ``worker`` wait for the schema instead of failing on missing tables,
and give up with one line after ``DEALBROKER_STARTUP_WAIT_SECONDS``."""

import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest
from alembic import command

from dealbroker.core.migrate import alembic_config, head_revision
from tests.conftest import BACKENDS, database_url
from tests.payments.bank import RAIL
from tests.pg_cluster import sql
from tests.processes import Worker, cli, env, free_port, wait_until

pytestmark = pytest.mark.server

PREVIOUS = "0036"
PRODUCTION = {
    "DEALBROKER_ENVIRONMENT": "production",
    "DEALBROKER_SECRET_KEY": "p" * 40,
    "DEALBROKER_SUPPORT_EMAIL": "support@market.example.com",
    "DEALBROKER_SIMPLE_SIGNATURE": "true",
    "DEALBROKER_PAYMENT_PROVIDER": "stripe",
    "DEALBROKER_STRIPE_SECRET_KEY": "sk_test_production_test_key",
    "DEALBROKER_STRIPE_PUBLISHABLE_KEY": "pk_test_production_test_key",
    "DEALBROKER_STRIPE_WEBHOOK_SECRET": "whsec_production_test_secret",
    **RAIL,
}


def at(backend: str, tmp_path: Path, revision: str) -> str:
    """A database of ``backend`` whose schema is at ``revision`` ("base": nothing)."""
    url = database_url(backend, tmp_path, f"schema_{revision}_{uuid.uuid4().hex[:8]}")
    command.downgrade(alembic_config(url), revision)
    return url


def run(url: str, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dealbroker", *args],
        env=env(url, **settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_head_is_the_newest_migration():
    assert head_revision() == "0037"  # PREVIOUS above is the one before it


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_says_which_revision_it_is_at_and_which_it_needs(backend, tmp_path):
    url = at(backend, tmp_path, PREVIOUS)
    behind = run(url, "migrate", "--check")
    assert behind.returncode == 1, behind.stderr
    assert behind.stdout == ""
    (line,) = behind.stderr.splitlines()
    assert (
        f"the database schema is at {PREVIOUS}; this code needs {head_revision()}: "
        "run dealbroker migrate"
    ) in line

    assert cli(url, "migrate").returncode == 0
    current = run(url, "migrate", "--check")
    assert current.returncode == 0, current.stderr
    assert current.stdout.strip() == (
        f"database schema is at {head_revision()}, the one this code needs"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_of_an_empty_database(backend, tmp_path):
    checked = run(at(backend, tmp_path, "base"), "migrate", "--check")
    assert checked.returncode == 1
    assert "the database schema is at nothing" in checked.stderr


def test_check_with_the_database_down_is_one_line():
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/nothing"
    checked = run(url, "migrate", "--check")
    assert checked.returncode == 1
    (line,) = checked.stderr.splitlines()
    assert "the database does not answer" in line


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_waits_for_the_schema_then_runs(backend, tmp_path):
    """A worker started before the deployment's ``migrate`` waits for it, logging why once,
    with no error about missing tables, and starts its jobs once the schema is there."""
    url = at(backend, tmp_path, "base")
    worker = Worker(url, tmp_path, DEALBROKER_STARTUP_WAIT_SECONDS="120")
    try:
        wait_until(
            lambda: "the database schema is at nothing" in worker.output(),
            30,
            "the worker to say it waits for the schema",
        )
        assert worker.process.poll() is None
        migrated = cli(url, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        worker.wait_ready(60)
    finally:
        worker.close()
    output = worker.output()
    assert "does not exist" not in output, output
    assert "no such table" not in output, output
    assert "Traceback" not in output, output


@pytest.mark.parametrize("backend", BACKENDS)
def test_serve_that_does_not_migrate_gives_up_with_one_line(backend, tmp_path):
    url = at(backend, tmp_path, PREVIOUS)
    started = run(
        url,
        "serve",
        "--port",
        str(free_port()),
        DEALBROKER_MIGRATE_ON_START="off",
        DEALBROKER_STARTUP_WAIT_SECONDS="2",
    )
    assert started.returncode == 1
    lines = started.stderr.splitlines()
    assert len(lines) == 2, started.stderr  # it waits, then it gives up
    assert lines[-1].endswith(
        f"cannot start: the database schema is at {PREVIOUS}; this code needs "
        f"{head_revision()}: run dealbroker migrate (waited 2 s)"
    )
    assert "Traceback" not in started.stderr


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="production's default on PostgreSQL")
def test_production_serve_on_postgresql_waits_for_migrate_and_then_serves(tmp_path):
    """In production on PostgreSQL ``serve`` does not migrate by default (several instances
    start at once; ``migrate`` is a step of the deployment): it waits for it, then serves."""
    url = at("postgresql", tmp_path, PREVIOUS)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "dealbroker", "serve", "--port", str(port)],
        env=env(url, DEALBROKER_STARTUP_WAIT_SECONDS="120", **PRODUCTION),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def drain() -> None:
        assert process.stdout is not None
        lines.extend(line.rstrip() for line in process.stdout)

    threading.Thread(target=drain, daemon=True).start()
    try:
        wait_until(lambda: any("waiting up to 120 s" in line for line in lines), 60, "a wait")
        assert process.poll() is None
        assert run(url, "migrate", "--check").returncode == 1  # it changed nothing itself
        assert cli(url, "migrate").returncode == 0
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/readyz"), 60, "the server")
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert not any("Traceback" in line for line in lines), "\n".join(lines)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="production's default on PostgreSQL")
def test_production_serve_on_postgresql_does_not_migrate(tmp_path):
    url = at("postgresql", tmp_path, PREVIOUS)
    started = run(
        url, "serve", "--port", str(free_port()), DEALBROKER_STARTUP_WAIT_SECONDS="1", **PRODUCTION
    )
    assert started.returncode == 1
    assert "run dealbroker migrate" in started.stderr.splitlines()[-1]
    assert run(url, "migrate", "--check").returncode == 1  # still behind: it changed nothing


@pytest.mark.parametrize("backend", BACKENDS)
def test_code_runs_on_a_newer_release_schema_and_does_not_migrate_it(backend, tmp_path):
    """Expand, deploy, contract: the new release's migration runs first, so processes of the
    old release start on a schema they do not know. They run on it; nothing migrates it."""
    url = at(backend, tmp_path, "head")
    sql(url, "UPDATE alembic_version SET version_num = '9001'")  # a later release's
    checked = run(url, "migrate", "--check")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == (
        f"database schema is at 9001, newer than this code's {head_revision()}, which runs on it"
    )
    migrated = run(url, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "Traceback" not in migrated.stderr
    assert sql(url, "SELECT version_num FROM alembic_version") == [("9001",)]
    worker = Worker(url, tmp_path, DEALBROKER_STARTUP_WAIT_SECONDS="5")
    try:
        worker.wait_ready(60)
    finally:
        worker.close()


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="the lock is PostgreSQL's")
def test_migrations_started_at_once_run_one_after_the_other(tmp_path):
    """Several hosts running ``migrate`` (or ``serve`` with DEALBROKER_MIGRATE_ON_START=on) at
    the same moment: all succeed, the migrations having run once."""
    url = at("postgresql", tmp_path, "base")
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "dealbroker", "migrate"],
            env=env(url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [process.communicate(timeout=180) for process in processes]
    for process, (_, err) in zip(processes, results, strict=True):
        assert process.returncode == 0, err
    assert run(url, "migrate", "--check").returncode == 0
