"""An approval lapses by itself in every running process kind: the approved buyer signed but
never paid, the sandbox clock moves past the approval's deadline (``flows.advance_clock``, what
``POST /sandbox/v1/clock/advance`` does before it fires), and the real process's deadline job,
not the test, lapses it:

* ``dealbroker serve`` on SQLite, whose embedded worker runs the jobs;
* ``dealbroker worker`` on PostgreSQL, beside no server at all.
"""

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from dealbroker.deals import flows
from dealbroker.deals.lifecycle import Actor
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.events.models import Event
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers.models import Offer
from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment
from dealbroker.signatures.service import SignatureType
from tests.conftest import BACKENDS
from tests.lifecycle_helpers import SETTINGS, new_deal
from tests.processes import FIRE_TIMEOUT, Server, Worker, run_on, wait_until

pytestmark = pytest.mark.server


def signed_unpaid(db_url: str) -> tuple[uuid.UUID, uuid.UUID, list[uuid.UUID]]:
    """A Signed deal whose approved buyer opened a payment and left; two other offers were
    declined by the approval. (deal id, integration id, offer ids, the approved one first)."""

    async def work(sessionmaker: Any) -> tuple[uuid.UUID, uuid.UUID, list[uuid.UUID]]:
        d = await new_deal(sessionmaker)
        ids = [await d.offer("Pickup", 400_000), await d.offer(), await d.offer()]
        await d.approve(ids[0])
        await d.sign(SignatureType.SELLER, Actor.SELLER)
        await d.sign(SignatureType.BUYER, Actor.BUYER)
        await d.step(lambda s, deal: payments.start(s, deal, SETTINGS))
        return d.deal_id, d.integration_id, ids

    return run_on(db_url, work)


def advance_sandbox_clock(db_url: str, integration_id: uuid.UUID, seconds: int) -> int:
    async def work(sessionmaker: Any) -> int:
        async with sessionmaker() as session, session.begin():
            return await flows.advance_clock(session, integration_id, seconds)

    return run_on(db_url, work)


def state(db_url: str, deal_id: uuid.UUID) -> dict[str, Any]:
    async def work(sessionmaker: Any) -> dict[str, Any]:
        async with sessionmaker() as session:
            deal = await session.get(Deal, deal_id)
            assert deal is not None
            listed = list(await session.scalars(select(Offer)))
            offers = {o.id: o.status for o in listed}
            payments_ = [p.status for p in await session.scalars(select(Payment))]
            timers = [
                (t.trigger, t.outcome)
                for t in await session.scalars(
                    select(DealTimer).where(DealTimer.deal_id == deal_id)
                )
            ]
            events = [
                (e.kind, json.loads(e.payload)["data"])
                for e in await session.scalars(
                    select(Event).where(Event.deal_id == deal_id).order_by(Event.seq)
                )
            ]
            reminders = [
                (m.to_email, m.body)
                for m in await session.scalars(
                    select(OutboxMessage).where(
                        OutboxMessage.deal_id == deal_id,
                        OutboxMessage.kind == "deadline_reminder",
                    )
                )
            ]
            return {
                "status": deal.status,
                "reminded": reminders,
                "emails": {o.id: o.buyer_email for o in listed},
                "buyer": deal.buyer_user_id,
                "price": deal.price_minor,
                "offers": offers,
                "payments": payments_,
                "timers": timers,
                "events": events,
            }

    return run_on(db_url, work)


def watch_it_lapse(db_url: str) -> None:
    deal_id, integration_id, ids = signed_unpaid(db_url)
    assert state(db_url, deal_id)["status"] == "Signed"
    # An hour before the deadline nothing happens.
    hours = SETTINGS.approval_deadline_hours
    assert advance_sandbox_clock(db_url, integration_id, (hours - 1) * 3600) == 1
    # The reminder (a day before) is due: the process sends it to the approved buyer, once.
    wait_until(
        lambda: len(state(db_url, deal_id)["reminded"]) == 1,
        FIRE_TIMEOUT,
        "the approved buyer to be reminded to sign and pay",
        interval=0.2,
    )
    seen = state(db_url, deal_id)
    ((to, body),) = seen["reminded"]
    assert to == seen["emails"][ids[0]]  # the approved buyer, not the others nor the seller
    assert "Your offer was approved. Sign the deal and pay on your offer page by" in body
    time.sleep(2)  # ten of the worker's polls: a timer not yet due stays unfired
    assert state(db_url, deal_id)["status"] == "Signed"
    # Past it, the process lapses the approval by itself.
    assert advance_sandbox_clock(db_url, integration_id, 3600 + 1) == 1
    wait_until(
        lambda: state(db_url, deal_id)["status"] == "Ad",
        FIRE_TIMEOUT,
        "the approval to lapse",
        interval=0.2,
    )
    seen = state(db_url, deal_id)
    assert len(seen["reminded"]) == 1  # no second reminder
    assert (seen["buyer"], seen["price"]) == (None, 450_000)
    assert seen["offers"] == {ids[0]: "Lapsed", ids[1]: "Denied", ids[2]: "Denied"}
    assert seen["payments"] == ["PaymentCancelled"]
    assert seen["timers"] == [("approval_lapsed", "fired")]
    tail = [(kind, data.get("status") or data.get("id")) for kind, data in seen["events"][-3:]]
    assert tail == [
        ("deal.status", "Ad"),
        ("payment.status", "PaymentCancelled"),
        ("deal.offerDenied", str(ids[0])),
    ]


def test_serve_on_sqlite_lapses_an_unpaid_approval(tmp_path: Path) -> None:
    if "sqlite" not in BACKENDS:
        pytest.skip("SQLite is not among the test backends")
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}"
    server = Server(db_url, tmp_path)  # migrates the database, embeds the worker
    try:
        watch_it_lapse(db_url)
    finally:
        server.stop()


def test_worker_on_postgresql_lapses_an_unpaid_approval(pg_url: str, tmp_path: Path) -> None:
    worker = Worker(pg_url, tmp_path)
    try:
        worker.wait_ready()
        watch_it_lapse(pg_url)
        worker.process.terminate()
        assert worker.wait() == 0, worker.output()
    finally:
        worker.close()
