"""An approved buyer who goes silent does not block the sale: the approval lapses when its
deadline passes, and the deal takes offers again (on SQLite and PostgreSQL, through the real
services and the deadline job; test_approval_lapse_processes.py watches a real worker do it).
"""

import asyncio
import json
import uuid
from datetime import timedelta

from sqlalchemy import select

from dealbroker import settlement
from dealbroker.core import clock
from dealbroker.deals import flows
from dealbroker.deals.actions import takes_offers
from dealbroker.deals.lifecycle import Actor
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.deals.tasks import fire_due_timers
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers.models import Offer
from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment
from dealbroker.signatures.service import SignatureType
from tests.lifecycle_helpers import SETTINGS, DealDriver, assert_events_match_changes, new_deal

HOURS = SETTINGS.approval_deadline_hours
ASKING = 450_000  # new_deal's price, in minor units


async def _approved(sessionmaker, *, seller_signs: bool = True) -> tuple[DealDriver, list]:
    """A deal with three offers, the first approved (the others declined by it)."""
    d = await new_deal(sessionmaker)
    ids = [await d.offer("Pickup", 400_000), await d.offer(), await d.offer("Pickup", 410_000)]
    await d.approve(ids[0])
    if seller_signs:
        await d.sign(SignatureType.SELLER, Actor.SELLER)
    return d, ids


async def _pass(d: DealDriver, seconds: int) -> int:
    """Let ``seconds`` pass for the deal (the sandbox clock's per-deal move), then run the
    deadline job once, as the worker would; how many timers it handled."""
    async with d.sessionmaker() as session, session.begin():
        await flows.advance_deal_clock(session, d.integration_id, d.deal_id, seconds)
    return await fire_due_timers(d.sessionmaker, SETTINGS)


async def _offers(d: DealDriver) -> dict[uuid.UUID, str]:
    async with d.sessionmaker() as session:
        return {o.id: o.status for o in await session.scalars(select(Offer))}


async def _messages(d: DealDriver, kind: str) -> list[str]:
    async with d.sessionmaker() as session:
        rows = await session.scalars(
            select(OutboxMessage.to_email).where(
                OutboxMessage.deal_id == d.deal_id, OutboxMessage.kind == kind
            )
        )
        return sorted(rows)


async def _payload(d: DealDriver, kind: str) -> list[dict]:
    return [json.loads(e.payload)["data"] for e in await d.events(kind)]


async def test_nothing_lapses_before_the_deadline(sessionmaker):
    d, ids = await _approved(sessionmaker)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    assert await _pass(d, HOURS * 3600 - 60) == 0
    assert await d.status() == "Signed"
    assert (await d.deal()).buyer_user_id is not None


async def test_a_signed_deal_whose_buyer_does_not_pay_takes_offers_again(sessionmaker):
    d, ids = await _approved(sessionmaker)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    await d.step(lambda s, deal: payments.start(s, deal, SETTINGS))  # opened, never paid
    assert (await d.deal()).price_minor == 400_000

    assert await _pass(d, HOURS * 3600 + 1) == 1
    deal = await d.deal()
    # The seller had signed: back to Ad, with no buyer, at the asking price.
    assert (deal.status, deal.buyer_user_id, deal.price_minor) == ("Ad", None, ASKING)
    assert (deal.shipping_type, deal.buyer_contact, deal.asking_price_minor) == (None, None, None)
    assert await _offers(d) == {ids[0]: "Lapsed", ids[1]: "Denied", ids[2]: "Denied"}
    payment = await d.payment()
    assert payment is not None
    assert payment.status == "PaymentCancelled"  # the open checkout can charge no more
    # The events: the status it returned to, the lapsed offer, the closed payment.
    assert [e["status"] for e in await _payload(d, "deal.status")][-1] == "Ad"
    denied = await _payload(d, "deal.offerDenied")
    assert [e["id"] for e in denied][-1] == str(ids[0])
    assert [e["status"] for e in await _payload(d, "payment.status")][-1] == "PaymentCancelled"
    await assert_events_match_changes(d)
    history = await d.history()
    assert (history[-1].from_status, history[-1].trigger, history[-1].actor) == (
        "Signed",
        "approval_lapsed",
        "timer",
    )
    # The lapsed buyer and the seller are told; every other buyer may offer again.
    assert len(await _messages(d, "approval_lapsed")) == 2
    assert len(await _messages(d, "offers_again")) == 2

    # It takes offers again: a new approval makes a new buyer, with a deadline of its own.
    again = await d.offer("Carrier", 430_000)
    await d.approve(again)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    await d.pay()
    deal = await d.deal()
    assert (deal.status, deal.price_minor, deal.payment_status) == (
        "Shipping_Pending",
        430_000,
        "Paid",
    )


async def test_an_approval_the_seller_never_signed_lapses_to_draft(sessionmaker):
    d, ids = await _approved(sessionmaker, seller_signs=False)
    assert await _pass(d, HOURS * 3600 + 1) == 1
    deal = await d.deal()
    assert (deal.status, deal.buyer_user_id, deal.price_minor) == ("Draft", None, ASKING)
    assert (await _offers(d))[ids[0]] == "Lapsed"
    assert [e["status"] for e in await _payload(d, "deal.status")][-1] == "Draft"
    async with sessionmaker() as session, session.begin():
        assert takes_offers(await session.get(Deal, d.deal_id))


async def test_a_buyer_who_pays_in_time_keeps_the_deal(sessionmaker):
    d, _ = await _approved(sessionmaker)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    await d.pay()
    async with sessionmaker() as session:
        timers = {
            t.trigger: t.outcome
            for t in await session.scalars(select(DealTimer).where(DealTimer.deal_id == d.deal_id))
        }
    # Paid: the approval's deadline is closed at once (no page counts down to it).
    assert timers == {"approval_lapsed": "skipped", "pickup_expired": None}
    await _pass(d, HOURS * 3600 + 1)
    assert await d.status() == "Pickup_Pending"
    assert (await d.deal()).buyer_user_id is not None


async def test_a_cancelled_deal_closes_the_approvals_deadline(sessionmaker):
    d, _ = await _approved(sessionmaker)
    await d.step(lambda s, deal: flows.fire(s, deal, flows.Trigger.CANCEL, Actor.SELLER, SETTINGS))
    assert await _pass(d, HOURS * 3600 + 1) == 0
    assert await d.status() == "Cancelled"


async def test_paying_as_the_deadline_fires_one_wins_and_no_money_is_kept(sessionmaker):
    """The buyer's payment and the lapse race on each of several deals: either the payment
    wins (the deal is paid, the timer then skips) or the lapse wins (the payment is closed
    and the provider's late success finds no open payment: nothing is charged)."""
    outcomes = []
    for _ in range(6):
        d, _ = await _approved(sessionmaker)
        await d.sign(SignatureType.BUYER, Actor.BUYER)
        await d.step(lambda s, deal: payments.start(s, deal, SETTINGS))
        async with sessionmaker() as session, session.begin():
            for timer in await session.scalars(
                select(DealTimer).where(DealTimer.deal_id == d.deal_id)
            ):
                timer.due_at = clock.now() - timedelta(seconds=1)

        async def pay(driver: DealDriver = d) -> str:
            try:
                await driver.step(
                    lambda s, locked: settlement.settle_payment(s, locked, "succeeded", SETTINGS)
                )
            except Exception as exc:  # the lapse closed the payment first
                return type(exc).__name__
            return "paid"

        paid, fired = await asyncio.gather(pay(), fire_due_timers(sessionmaker, SETTINGS))
        deal = await d.deal()
        async with sessionmaker() as session:
            rows = list(await session.scalars(select(Payment).where(Payment.deal_id == d.deal_id)))
        if paid == "paid":
            assert (deal.status, deal.payment_status) == ("Pickup_Pending", "Paid")
            assert deal.buyer_user_id is not None
        else:
            assert paid == "Conflict"
            assert (deal.status, deal.buyer_user_id) == ("Ad", None)
            assert [p.status for p in rows] == ["PaymentCancelled"]
            assert all(p.refunded_minor in (0, None) for p in rows)
        assert fired in (0, 1)
        await assert_events_match_changes(d)
        outcomes.append(paid)
    assert set(outcomes) <= {"paid", "Conflict"}


async def test_money_the_provider_takes_after_the_lapse_goes_back_in_full(sessionmaker):
    """The lapse won the race, and the provider's success for the closed payment comes after
    (Stripe's ``payment_intent.succeeded``, which its handler answers with ``refund_late``):
    the whole amount is refunded, and the lapsed buyer is told."""
    d, _ = await _approved(sessionmaker)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    await d.step(lambda s, deal: payments.start(s, deal, SETTINGS))
    await _pass(d, HOURS * 3600 + 1)
    assert await d.status() == "Ad"
    closed = await d.payment()
    assert closed is not None

    async def late(session, deal):  # type: ignore[no-untyped-def]
        payment = await session.get(Payment, closed.id)
        return await payments.refund_late(session, deal, payment)

    assert await d.step(late) is True
    refunded = await d.payment()
    assert refunded is not None
    assert (refunded.status, refunded.refunded_minor) == ("Refunded", refunded.amount_minor)
    told = await _messages(d, "late_payment_refunded")
    lapsed_buyer = await _messages(d, "approval_lapsed")
    assert len(told) == 2
    assert set(told) == set(lapsed_buyer)  # the seller and the buyer whose approval lapsed
