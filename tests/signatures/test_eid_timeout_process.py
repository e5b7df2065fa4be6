"""A party who goes to the eID issuer and never comes back: the running process, not the
test, fails the flow once ``DEALBROKER_EID_FLOW_MINUTES`` have passed, so the integration's
``signature.status`` goes Initiated then Failed instead of staying Initiated: ``dealbroker
serve`` on SQLite (its embedded worker) and ``dealbroker worker`` on PostgreSQL.

The flow is started through the seller's service as the page starts it; the time that passes
is its start moved 11 minutes back (the limit is 10)."""

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from dealbroker import parties
from dealbroker.core import clock
from dealbroker.deals.models import Deal
from dealbroker.events.models import Event
from dealbroker.signatures.models import EidSignature
from tests.conftest import BACKENDS, make_settings
from tests.lifecycle_helpers import new_deal
from tests.processes import FIRE_TIMEOUT, Server, Worker, run_on, wait_until

pytestmark = pytest.mark.server


def _abandoned_flow(db_url: str) -> uuid.UUID:
    """A draft whose seller was sent to the issuer 11 minutes ago and is not back."""
    settings = make_settings(
        db_url,
        eid_issuer="http://127.0.0.1:9",
        eid_client_id="dealbroker",
        eid_client_secret="s" * 40,
    )

    async def work(sessionmaker: Any) -> uuid.UUID:
        d = await new_deal(sessionmaker)
        async with sessionmaker() as session, session.begin():
            deal = await session.get(Deal, d.deal_id, with_for_update=True)
            flow_id = await parties.seller_signs(session, deal, None, True, settings)
            assert flow_id is not None
            await session.execute(
                update(EidSignature)
                .where(EidSignature.id == flow_id)
                .values(started_at=clock.now() - timedelta(minutes=11))
            )
        return d.deal_id

    return run_on(db_url, work)


def _state(db_url: str, deal_id: uuid.UUID) -> tuple[list[str], str, str | None, str]:
    async def work(sessionmaker: Any) -> tuple[list[str], str, str | None, str]:
        async with sessionmaker() as session:
            events = await session.scalars(
                select(Event)
                .where(Event.kind == "signature.status", Event.deal_id == deal_id)
                .order_by(Event.seq)
            )
            statuses = [json.loads(e.payload)["data"]["status"] for e in events]
            flow = await session.scalar(select(EidSignature).where(EidSignature.deal_id == deal_id))
            deal = await session.get(Deal, deal_id)
            assert flow is not None
            assert deal is not None
            return statuses, flow.status, flow.failure, deal.status

    return run_on(db_url, work)


def _prove(db_url: str) -> None:
    deal_id = _abandoned_flow(db_url)
    wait_until(
        lambda: _state(db_url, deal_id)[1] == "Failed",
        FIRE_TIMEOUT + 10,  # the job looks every 10 s
        "the abandoned eID flow to fail",
        interval=0.5,
    )
    statuses, _status, failure, deal_status = _state(db_url, deal_id)
    assert statuses == ["Initiated", "Failed"]
    assert failure == "not back within 10 minutes"
    assert deal_status == "Draft"  # nothing signed; the seller may start again


def test_serve_on_sqlite_fails_an_abandoned_eid_flow(tmp_path: Path) -> None:
    if "sqlite" not in BACKENDS:
        pytest.skip("SQLite is not among the test backends")
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'eid.db'}"
    server = Server(db_url, tmp_path)  # migrates the database, embeds the worker
    try:
        _prove(db_url)
    finally:
        server.stop()


def test_worker_on_postgresql_fails_an_abandoned_eid_flow(
    pg_url: str,
    tmp_path: Path,
) -> None:
    worker = Worker(pg_url, tmp_path)
    try:
        worker.wait_ready()
        _prove(pg_url)
    finally:
        worker.close()
