"""The backup and the restore drill of docs/operations/backup-restore.md, with the scripts kept in the
repository: ``scripts/backup`` (pg_dump) while clients create deals, ``scripts/restore``
(pg_restore) into a new database; every deal, event and payment committed before the backup
started is there, nothing else, and the restored schema is the code's."""

import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from dealbroker.core.migrate import head_revision
from tests.conftest import BACKENDS, CREATED_DATABASES, PG_SERVER, SELLER, database_url
from tests.pg_cluster import sql
from tests.processes import Server, cli, env, token, wait_until

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif("postgresql" not in BACKENDS, reason="pg_dump and pg_restore"),
]

ROOT = Path(__file__).resolve().parent.parent
TABLES = ("deals", "events", "payments")


class Creates:
    """A client creating deals in a bounded loop, in a thread, until stopped."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        self.base, self.headers = base, headers
        self.created = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30) as client:
            for _ in range(20_000):  # bounded, whatever happens
                if self.stop.is_set():
                    return
                try:
                    answer = client.post(
                        "/deals/v1/deals",
                        json={"name": "During the backup", "price": 100, "seller": SELLER},
                        headers={**self.headers, "Idempotency-Key": str(uuid.uuid4())},
                    )
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                if answer.status_code == 201:
                    self.created += 1
                else:
                    self.failures.append(f"{answer.status_code}: {answer.text[:200]}")

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def ids(url: str, table: str) -> set[str]:
    return {str(row[0]) for row in sql(url, f"SELECT id FROM {table}")}  # noqa: S608


def sandbox(server: Server, name: str, body: dict) -> None:
    answer = httpx.post(
        f"{server.base}/webhooks/v1/{name}",
        json=body,
        headers={"webhook-secret": server.credential("webhook secret")},
        timeout=30,
    )
    assert answer.status_code in (200, 204), answer.text


def script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / args[0]), *args[1:]],
        env=env("unused", DEALBROKER=str(Path(sys.executable).parent / "dealbroker")),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_backup_under_load_restores_every_deal_event_and_payment(tmp_path, record_property):
    source = database_url("postgresql", tmp_path, f"backup_{uuid.uuid4().hex[:8]}")
    restored = f"{PG_SERVER}/restored_{uuid.uuid4().hex[:8]}"
    CREATED_DATABASES.add(restored.rsplit("/", 1)[1])  # dropped at the end of the run
    server = Server(source, tmp_path)
    creates = None
    try:
        headers = token(server)
        for _ in range(5):  # deals that got as far as a payment, with their events
            deal = httpx.post(
                f"{server.base}/deals/v1/deals",
                json={"name": "Paid", "price": 300, "seller": SELLER},
                headers=headers,
                timeout=30,
            ).json()
            sandbox(server, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
        creates = Creates(server.base, headers)
        wait_until(lambda: creates.created >= 20, 60, "deals created before the backup")
        committed = {table: ids(source, table) for table in TABLES}  # before the dump began
        before = creates.created
        backup = script("backup", source, str(tmp_path / "dealbroker.dump"))
        after = creates.created
        wait_until(lambda: creates.created >= after + 20, 60, "deals created after it")
        creates.finish()
        assert backup.returncode == 0, backup.stderr
        assert after > before  # the clients went on creating deals while it dumped
        record_property("deals_created_during_backup", after - before)
        assert creates.failures == []
    finally:
        if creates is not None:
            creates.finish()
        server.stop()

    restore = script("restore", str(tmp_path / "dealbroker.dump"), restored)
    assert restore.returncode == 0, restore.stderr
    assert f"database schema is at {head_revision()}" in restore.stdout
    assert len(committed["payments"]) == 5
    for table in TABLES:
        back = ids(restored, table)
        assert committed[table] <= back, f"{table}: {len(committed[table] - back)} missing"
        assert back <= ids(source, table), f"{table}: rows the source never had"
        assert f"{table} {len(back)}" in restore.stdout
        record_property(f"restored_{table}", len(back))
    # The restored database serves: the CLI reads a deal from it.
    some = next(iter(committed["deals"]))
    assert cli(restored, "deals", "show", some).returncode == 0
    # Money out is held until the operator has reconciled and releases it: no bank file.
    export = cli(restored, "payouts", "export", "--out", str(tmp_path / "after-restore.xml"))
    assert export.returncode == 2
    assert export.stderr.startswith("error: payouts and refunds are held since ")
    assert "restored from dealbroker.dump" in export.stderr
    assert not (tmp_path / "after-restore.xml").exists()
    released = cli(restored, "payments", "release")
    assert released.returncode == 0, released.stderr
    assert '"held":false' in released.stdout.replace(" ", "")


def test_restore_refuses_an_existing_database(tmp_path):
    existing = database_url("postgresql", tmp_path, f"existing_{uuid.uuid4().hex[:8]}")
    (tmp_path / "empty.dump").write_bytes(b"")
    restore = script("restore", str(tmp_path / "empty.dump"), existing)
    assert restore.returncode != 0
    assert "already exists" in restore.stderr
    assert ids(existing, "deals") == set()  # untouched


def test_backup_never_leaves_a_partial_file(tmp_path):
    target = tmp_path / "never.dump"
    url = f"{PG_SERVER}/no_such_database_{uuid.uuid4().hex[:8]}"
    backup = script("backup", url, str(target))
    assert backup.returncode != 0
    assert not target.exists()
    assert not Path(f"{target}.partial").exists()
