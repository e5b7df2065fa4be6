"""Money out held (after a restore to an earlier moment, ``payments.hold``): a real process's
worker completes one deal and expires another by their deadlines but makes neither the payout
nor the refund while held, says so once, and makes both once released; ``payouts export`` writes
no file meanwhile; the hold and its release are in the audit trail."""

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from dealbroker.audit.models import AuditRecord
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.payments.models import ProviderCall
from tests.conftest import BACKENDS
from tests.deals.test_deadline_processes import let_deadlines_pass, states
from tests.lifecycle_helpers import new_deal
from tests.processes import FIRE_TIMEOUT, Server, Worker, cli, run_on, wait_until

pytestmark = pytest.mark.server


async def _deals(sessionmaker: Any) -> tuple[uuid.UUID, uuid.UUID]:
    """A paid carrier deal arrived at the buyer, its seller with a payout account; a paid
    pickup deal whose 7 days run."""
    arrived = await new_deal(sessionmaker)
    await arrived.to_signed("Carrier")
    await arrived.pay()
    await arrived.payout_account()
    await arrived.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await arrived.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    pickup = await new_deal(sessionmaker)
    await pickup.to_signed("Pickup")
    await pickup.pay()
    return arrived.deal_id, pickup.deal_id


def _calls(db_url: str, deal_id: uuid.UUID) -> list[tuple[str, str, int]]:
    async def work(sessionmaker: Any) -> list[tuple[str, str, int]]:
        async with sessionmaker() as session:
            rows = await session.execute(
                select(ProviderCall.kind, ProviderCall.status, ProviderCall.attempts).where(
                    ProviderCall.deal_id == deal_id
                )
            )
            return sorted((r.kind, r.status, r.attempts) for r in rows)

    return run_on(db_url, work)


def _audited(db_url: str) -> list[str]:
    async def work(sessionmaker: Any) -> list[str]:
        async with sessionmaker() as session:
            rows = await session.scalars(
                select(AuditRecord.action)
                .where(AuditRecord.action.like("payments.%"))
                .order_by(AuditRecord.at)
            )
            return list(rows)

    return run_on(db_url, work)


def _prove(db_url: str, output: Callable[[], str], tmp_path: Path) -> None:
    """The deals made, the hold taken, the process (started already) watched."""
    arrived, pickup = run_on(db_url, _deals)
    held = cli(db_url, "payments", "hold", "--reason", "restored to 12:00")
    assert held.returncode == 0, held.stderr
    shown = json.loads(held.stdout)
    assert shown["held"] is True
    assert shown["reason"] == "restored to 12:00"
    again = json.loads(cli(db_url, "payments", "hold", "--reason", "other").stdout)
    assert again["reason"] == "restored to 12:00"  # the first hold stays

    assert let_deadlines_pass(db_url, [arrived, pickup]) >= 2
    # The deadlines fire: one deal completes, the other expires; their money waits.
    waiting = {arrived: ("Completed", "PendingPayOut"), pickup: ("Refunded", "Paid")}
    wait_until(
        lambda: states(db_url, [arrived, pickup]) == waiting,
        FIRE_TIMEOUT,
        f"the deadlines to fire: {states(db_url, [arrived, pickup])}",
        interval=0.2,
    )
    wait_until(
        lambda: "money out not made: payouts and refunds are held since" in output(),
        FIRE_TIMEOUT,
        f"the process saying money out is held: {output()}",
    )
    # Polls go by (every 0.2 s): neither call is made, and the process said it once.
    for _ in range(10):
        assert _calls(db_url, arrived) == [("payout", "pending", 0)]
        assert _calls(db_url, pickup) == [("refund", "pending", 0)]
        assert states(db_url, [arrived, pickup]) == waiting
        time.sleep(0.3)
    assert output().count("money out not made") == 1, output()
    export = cli(db_url, "payouts", "export", "--out", str(tmp_path / "held.xml"))
    assert export.returncode == 2
    assert export.stderr.startswith("error: payouts and refunds are held since ")
    assert "(restored to 12:00)" in export.stderr
    assert "`dealbroker payments release`" in export.stderr
    assert not (tmp_path / "held.xml").exists()

    released = cli(db_url, "payments", "release")
    assert released.returncode == 0, released.stderr
    assert json.loads(released.stdout)["held"] is False
    done = {arrived: ("Completed", "PaidOut"), pickup: ("Refunded", "Refunded")}
    wait_until(
        lambda: states(db_url, [arrived, pickup]) == done,
        FIRE_TIMEOUT,
        f"the payout and the refund made once released: {output()}",
        interval=0.2,
    )
    assert _calls(db_url, arrived) == [("payout", "succeeded", 1)]
    assert _calls(db_url, pickup) == [("refund", "succeeded", 1)]
    wait_until(lambda: "money out released" in output(), 10, "the process saying so")
    assert "Traceback" not in output()
    assert _audited(db_url)[-2:] == ["payments.hold", "payments.release"]
    nothing = cli(db_url, "payments", "release")
    assert nothing.returncode == 0
    assert nothing.stdout.startswith("payouts and refunds were not held")


def test_serve_on_sqlite_holds_money_out_until_released(tmp_path: Path) -> None:
    if "sqlite" not in BACKENDS:
        pytest.skip("SQLite is not among the test backends")
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}"
    server = Server(db_url, tmp_path)  # migrates the database, embeds the worker
    try:
        _prove(db_url, server.output, tmp_path)
    finally:
        server.stop()


def test_the_worker_on_postgresql_holds_money_out_until_released(pg_url: str, tmp_path: Path):
    worker = Worker(pg_url, tmp_path)
    try:
        worker.wait_ready()
        _prove(pg_url, worker.output, tmp_path)
    finally:
        worker.close()
