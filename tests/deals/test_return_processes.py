"""Return then refund, with no one pressing anything after the operator's decision: the
return's deadlines fire in a real running process, once each, and the money moves.

The sandbox clock (``deals.flows.advance_clock``) brings the deal's deadlines closer; the
running process, not the test, fires what fell due, reminds the parties 24 hours before each
deadline and makes the refund or payout: ``dealbroker serve`` on SQLite (its embedded worker)
and ``dealbroker worker`` on PostgreSQL.
"""

import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from dealbroker.deals import flows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.notifications.models import OutboxMessage
from dealbroker.payments.models import Payment
from tests.conftest import make_settings
from tests.lifecycle_helpers import new_deal
from tests.processes import FIRE_TIMEOUT, Server, Worker, run_on, wait_until

pytestmark = pytest.mark.server

DAY = 24 * 3600
HOUR = 3600
ADDRESS = "Kari Nordmann, Storgata 1, 0155 Oslo"
SEND_DAYS, CONFIRM_DAYS = 7, 14  # the defaults


def _return_decided(db_url: str) -> tuple[uuid.UUID, uuid.UUID]:
    """A paid pickup deal the buyer denied, decided by the operator as return then refund;
    the seller has a payout account. The deal and its integration."""

    async def work(sessionmaker: Any) -> tuple[uuid.UUID, uuid.UUID]:
        d = await new_deal(sessionmaker)
        await d.to_signed("Pickup")
        await d.payout_account()
        await d.pay()
        await d.fire(Trigger.BUYER_DENIED, Actor.BUYER)
        settings = _settings(db_url)
        await d.step(
            lambda s, deal: flows.resolve_dispute(
                s,
                deal.id,
                flows.DisputeOutcome.RETURN_THEN_REFUND,
                settings,
                return_address=ADDRESS,
            )
        )
        assert await d.status() == "Pickup_Denied"
        return d.deal_id, d.integration_id

    return run_on(db_url, work)


def _settings(db_url: str) -> Any:
    return make_settings(db_url)


def _send_back(db_url: str, deal_id: uuid.UUID) -> None:
    async def work(sessionmaker: Any) -> None:
        async with sessionmaker() as session, session.begin():
            deal = await session.get(Deal, deal_id, with_for_update=True)
            assert deal is not None
            await flows.return_sent(session, deal, "Posten", "RR123NO", _settings(db_url))

    run_on(db_url, work)


def _advance(db_url: str, integration_id: uuid.UUID, seconds: int) -> int:
    async def work(sessionmaker: Any) -> int:
        async with sessionmaker() as session, session.begin():
            return await flows.advance_clock(session, integration_id, seconds)

    return run_on(db_url, work)


def _state(db_url: str, deal_id: uuid.UUID) -> dict[str, Any]:
    async def work(sessionmaker: Any) -> dict[str, Any]:
        async with sessionmaker() as session:
            deal = await session.get(Deal, deal_id)
            assert deal is not None
            payment = await session.scalar(select(Payment).where(Payment.deal_id == deal_id))
            assert payment is not None
            timers = list(
                await session.scalars(select(DealTimer).where(DealTimer.deal_id == deal_id))
            )
            reminders = list(
                await session.scalars(
                    select(OutboxMessage).where(
                        OutboxMessage.deal_id == deal_id,
                        OutboxMessage.kind == "deadline_reminder",
                    )
                )
            )
            return {
                "status": deal.status,
                "payment": payment.status,
                "amount": payment.amount_minor,
                "fee": payment.fee_minor,
                "refunded": payment.refunded_minor,
                "paid_out": payment.paid_out_minor,
                "send": [t.outcome for t in timers if t.trigger == "return_not_sent"],
                "confirm": [t.outcome for t in timers if t.trigger == "return_confirm_expired"],
                "reminded": sorted(m.to_email for m in reminders),
                "reminders": [m.body for m in reminders],
            }

    return run_on(db_url, work)


def _wait(db_url: str, deal_id: uuid.UUID, check: Any, what: str) -> dict[str, Any]:
    wait_until(lambda: check(_state(db_url, deal_id)), FIRE_TIMEOUT, what, interval=0.2)
    return _state(db_url, deal_id)


def _prove_the_sellers_deadline_refunds(db_url: str) -> None:
    deal_id, integration_id = _return_decided(db_url)
    # 23 hours before the buyer's deadline to send it: the process reminds the buyer.
    _advance(db_url, integration_id, SEND_DAYS * DAY - 23 * HOUR)
    state = _wait(db_url, deal_id, lambda s: len(s["reminded"]) == 1, "the buyer's reminder")
    assert "send the item back to the seller" in state["reminders"][0]
    assert state["send"] == [None]  # not yet due
    _send_back(db_url, deal_id)
    # The buyer's deadline passes: met, so closed as skipped, nothing moves.
    _advance(db_url, integration_id, DAY)
    state = _state(db_url, deal_id)
    assert (state["status"], state["payment"], state["send"]) == (
        "Pickup_Denied",
        "Paid",
        ["skipped"],
    )
    # 23 hours before the seller's deadline to confirm: the seller is reminded.
    _advance(db_url, integration_id, CONFIRM_DAYS * DAY - DAY - 23 * HOUR)
    state = _wait(db_url, deal_id, lambda s: len(s["reminded"]) == 2, "the seller's reminder")
    assert "kari@example.com" in state["reminded"]
    assert state["status"] == "Pickup_Denied"
    # The deadline passes: the process refunds the buyer, in full, once.
    _advance(db_url, integration_id, 23 * HOUR)
    state = _wait(
        db_url, deal_id, lambda s: s["payment"] == "Refunded", "the refund after the deadline"
    )
    assert state["status"] == "Refunded"
    assert state["confirm"] == ["fired"]
    assert (state["refunded"], state["paid_out"]) == (state["amount"], 0)


def _prove_an_unsent_return_pays_the_seller(db_url: str) -> None:
    deal_id, integration_id = _return_decided(db_url)
    _advance(db_url, integration_id, SEND_DAYS * DAY)
    state = _wait(
        db_url, deal_id, lambda s: s["payment"] == "PaidOut", "the payout after the deadline"
    )
    assert state["status"] == "Completed"
    assert state["send"] == ["fired"]
    assert (state["paid_out"], state["refunded"]) == (state["amount"] - state["fee"], 0)
    assert state["paid_out"] + state["fee"] == state["amount"]


def test_serve_on_sqlite_fires_the_returns_deadlines(tmp_path: Path) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'returns.db'}"
    server = Server(db_url, tmp_path)  # migrates the database, embeds the worker
    try:
        _prove_the_sellers_deadline_refunds(db_url)
        _prove_an_unsent_return_pays_the_seller(db_url)
    finally:
        server.stop()


def test_worker_on_postgresql_fires_the_returns_deadlines(
    pg_url: str,
    tmp_path: Path,
) -> None:
    worker = Worker(pg_url, tmp_path)
    try:
        worker.wait_ready()
        _prove_the_sellers_deadline_refunds(pg_url)
        _prove_an_unsent_return_pays_the_seller(pg_url)
    finally:
        worker.close()
