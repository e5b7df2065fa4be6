"""Disputes decided on evidence: the decision date each dispute opens with, and the operator's
three outcomes, return then refund among them, through the service functions the CLI and the
pages call. On SQLite and PostgreSQL (the ``sessionmaker`` fixture's backends)."""

import uuid
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from dealbroker import parties
from dealbroker.core import clock
from dealbroker.core.errors import BadRequest, Conflict, IllegalTransition
from dealbroker.deals import flows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import DealTimer
from dealbroker.deals.tasks import fire_due_timers
from dealbroker.notifications import service as notifications
from tests.lifecycle_helpers import (
    SETTINGS,
    DealDriver,
    assert_events_match_changes,
    new_deal,
    run_provider_calls,
)

DAY = 24 * 3600
ADDRESS = "Kari Nordmann, Storgata 1, 0155 Oslo"
RETURN = flows.DisputeOutcome.RETURN_THEN_REFUND


async def disputed_with_return(sessionmaker, shipping: str = "Pickup") -> DealDriver:
    """A paid deal the buyer reported a problem with; the seller has a payout account."""
    d = await new_deal(sessionmaker)
    await d.to_signed(shipping)
    await d.payout_account()
    await d.pay()
    if shipping == "Carrier":
        await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
        await d.fire(Trigger.CARRIER_DELIVERED, Actor.BUYER)
    await d.fire(Trigger.BUYER_DENIED, Actor.BUYER)
    return d


async def _decide(d: DealDriver, outcome: flows.DisputeOutcome, **kwargs: str) -> None:
    await d.step(lambda s, deal: flows.resolve_dispute(s, deal.id, outcome, SETTINGS, **kwargs))


async def _send_back(d: DealDriver, carrier: str = "Posten", tracking: str = "RR123NO") -> None:
    await d.step(lambda s, deal: flows.return_sent(s, deal, carrier, tracking, SETTINGS))


async def _advance(d: DealDriver, seconds: int) -> int:
    async with d.sessionmaker() as session, session.begin():
        await flows.advance_clock(session, d.integration_id, seconds)
    fired = await fire_due_timers(d.sessionmaker, SETTINGS)
    await run_provider_calls(d.sessionmaker)
    return fired


async def _timers(d: DealDriver, trigger: Trigger) -> list[DealTimer]:
    async with d.sessionmaker() as session:
        return list(
            await session.scalars(
                select(DealTimer).where(
                    DealTimer.deal_id == d.deal_id, DealTimer.trigger == trigger.value
                )
            )
        )


async def _messages(d: DealDriver, kind: str) -> list:
    async with d.sessionmaker() as session:
        return [m for m in await notifications.of_deal(session, d.deal_id) if m.kind == kind]


@pytest.mark.parametrize("shipping", ["Carrier", "Pickup"])
async def test_a_buyers_denial_opens_the_dispute_with_its_decision_date(sessionmaker, shipping):
    d = await disputed_with_return(sessionmaker, shipping)
    deal = await d.deal()
    opened = (await d.history())[-1]
    assert deal.decide_by == flows.decision_date(opened.created_at, SETTINGS)
    # Never a Saturday or Sunday on the deployment's calendar; in UTC it may be (a decision
    # date at 00:30 on a Monday in Oslo is 23:30 on the Sunday before in UTC).
    assert deal.decide_by.astimezone(ZoneInfo(SETTINGS.time_zone)).weekday() < 5
    # Both parties' dispute messages name it.
    told = await _messages(d, "deal_disputed")
    assert len(told) == 2
    assert all("We decide by " in m.body for m in told)


async def test_every_way_into_a_dispute_sets_the_decision_date(sessionmaker):
    # The seller of a pickup reports a problem.
    seller = await new_deal(sessionmaker)
    await seller.to_signed("Pickup")
    await seller.pay()
    await seller.step(
        lambda s, deal: parties.seller_reports_problem(s, deal, "no_show", None, SETTINGS)
    )
    # The buyer reports the parcel not received, and the transit deadline passes.
    missing = await new_deal(sessionmaker)
    await missing.to_signed("Carrier")
    await missing.pay()
    await missing.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await missing.fire(Trigger.BUYER_NOT_RECEIVED, Actor.BUYER)
    late = await new_deal(sessionmaker)
    await late.to_signed("Carrier")
    await late.pay()
    await late.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await _advance(late, SETTINGS.transit_deadline_days * DAY)
    for d in (seller, missing, late):
        deal = await d.deal()
        assert deal.status in ("Pickup_Denied", "Shipping_Review_Denied")
        opened = (await d.history())[-1]
        assert deal.decide_by == flows.decision_date(opened.created_at, SETTINGS), deal.status
        assert all("We decide by " in m.body for m in await _messages(d, "deal_disputed"))


async def test_a_dispute_past_its_decision_date_is_overdue_and_nothing_decides_it(sessionmaker):
    d = await disputed_with_return(sessionmaker)
    deal = await d.deal()
    assert not flows.decision_overdue(deal)
    clock.set_clock(lambda: deal.decide_by + timedelta(seconds=1))
    try:
        assert flows.decision_overdue(deal)
        await fire_due_timers(sessionmaker, SETTINGS)  # what falls due by then decides nothing
    finally:
        clock.reset_clock()
    assert ((await d.deal()).status, (await d.payment()).status) == ("Pickup_Denied", "Paid")


async def test_the_queue_is_ordered_by_the_decision_date(sessionmaker):
    first = await disputed_with_return(sessionmaker)
    second = await disputed_with_return(sessionmaker, "Carrier")
    async with sessionmaker() as session:
        queue = [deal.id for deal in await flows.in_dispute(session)]
    assert queue.index(first.deal_id) < queue.index(second.deal_id)
    # A dispute from before decision dates were kept (none) is the oldest: first.

    async def forget(session, deal):  # type: ignore[no-untyped-def]
        deal.decide_by = None

    await second.step(forget)
    async with sessionmaker() as session:
        queue = [deal.id for deal in await flows.in_dispute(session)]
    assert queue.index(second.deal_id) < queue.index(first.deal_id)


async def test_return_then_refund_ends_refunded_when_the_seller_confirms(sessionmaker):
    d = await disputed_with_return(sessionmaker)
    status = (await d.deal()).status
    await _decide(d, RETURN, return_address=ADDRESS, reason="The photos show a cracked frame.")
    deal = await d.deal()
    # The deal stays in its dispute, the money held; the return has its deadline to send.
    assert (deal.status, deal.payment_status) == (status, "Paid")
    assert deal.dispute_return == {
        "address": ADDRESS,
        "carrier": None,
        "tracking": None,
        "sentAt": None,
    }
    (send,) = await _timers(d, Trigger.RETURN_NOT_SENT)
    waits = (send.due_at - deal.updated_at).total_seconds()
    assert waits == pytest.approx(SETTINGS.return_send_days * DAY, abs=1)
    assert send.remind_at is not None
    told = await _messages(d, "dispute_return")
    assert len(told) == 2
    assert all(ADDRESS in m.body for m in told)
    assert all("Our reasons: The photos show a cracked frame." in m.body for m in told)

    # The seller cannot confirm an item not sent yet; the buyer sends it back.
    with pytest.raises(Conflict):
        await d.fire(Trigger.RETURN_RECEIVED, Actor.SELLER)
    await _send_back(d)
    deal = await d.deal()
    assert deal.dispute_return["tracking"] == "RR123NO"
    assert deal.dispute_return["sentAt"]
    assert [t.outcome for t in await _timers(d, Trigger.RETURN_NOT_SENT)] == ["skipped"]
    (confirm,) = await _timers(d, Trigger.RETURN_CONFIRM_EXPIRED)
    assert confirm.fired_at is None
    # Sent once only.
    with pytest.raises(Conflict):
        await _send_back(d)
    assert len(await _messages(d, "dispute_return")) == 4
    assert any("RR123NO" in m.body for m in await _messages(d, "dispute_return"))

    await d.fire(Trigger.RETURN_RECEIVED, Actor.SELLER)
    deal, payment = await d.deal(), await d.payment()
    assert (deal.status, payment.status) == ("Refunded", "Refunded")
    assert payment.refunded_minor == payment.amount_minor
    assert payment.paid_out_minor == 0
    refunded = await _messages(d, "deal_refunded")
    assert len(refunded) == 2
    assert any("The seller confirmed that they have the item back." in m.body for m in refunded)
    # Each step is a history row and a deal.status event (the status unchanged while the item
    # travels), in step.
    history = await d.history()
    assert [h.trigger for h in history[-3:]] == [
        "return_requested",
        "return_sent",
        "return_received",
    ]
    assert [h.to_status for h in history[-3:]] == [status, status, "Refunded"]
    await assert_events_match_changes(d)
    async with sessionmaker() as session:
        assert await flows.dispute_opened_by(session, await d.deal()) == "buyer"


async def test_the_sellers_deadline_to_confirm_refunds_the_buyer(sessionmaker):
    d = await disputed_with_return(sessionmaker, "Carrier")
    await _decide(d, RETURN, return_address=ADDRESS)
    await _advance(d, 3 * DAY)
    await _send_back(d)
    # The buyer's send deadline (7 days from the decision) passes: met, it fires nothing.
    await _advance(d, 5 * DAY)
    assert (await d.deal()).status == "Shipping_Review_Denied"
    await _advance(d, (SETTINGS.return_confirm_days - 5) * DAY)
    deal, payment = await d.deal(), await d.payment()
    assert (deal.status, payment.status) == ("Refunded", "Refunded")
    assert payment.refunded_minor == payment.amount_minor
    assert [t.outcome for t in await _timers(d, Trigger.RETURN_CONFIRM_EXPIRED)] == ["fired"]
    refunded = await _messages(d, "deal_refunded")
    assert any("did not confirm its receipt in time" in m.body for m in refunded)


async def test_a_return_not_sent_in_time_pays_the_seller(sessionmaker):
    d = await disputed_with_return(sessionmaker)
    await _decide(d, RETURN, return_address=ADDRESS)
    await _advance(d, SETTINGS.return_send_days * DAY)
    deal, payment = await d.deal(), await d.payment()
    assert (deal.status, payment.status) == ("Completed", "PaidOut")
    assert payment.paid_out_minor == payment.amount_minor - payment.fee_minor
    assert payment.refunded_minor == 0
    assert (await d.history())[-1].trigger == "return_not_sent"
    completed = await _messages(d, "deal_completed")
    assert any("did not send the item back by the deadline" in m.body for m in completed)
    # Too late to send it now.
    with pytest.raises(IllegalTransition):
        await _send_back(d)


async def test_the_operator_may_still_release_or_refund_during_a_return(sessionmaker):
    d = await disputed_with_return(sessionmaker)
    await _decide(d, RETURN, return_address=ADDRESS)
    await _decide(d, flows.DisputeOutcome.REFUND, reason="The seller agreed.")
    assert (await d.deal()).status == "Refunded"
    assert any(
        "Our reasons: The seller agreed." in m.body for m in await _messages(d, "deal_refunded")
    )
    # The return's deadline finds the deal moved on: closed, nothing fires.
    await _advance(d, SETTINGS.return_send_days * DAY)
    assert [t.outcome for t in await _timers(d, Trigger.RETURN_NOT_SENT)] == ["skipped"]
    payment = await d.payment()
    assert (payment.refunded_minor, payment.paid_out_minor) == (payment.amount_minor, 0)


async def test_illegal_decisions_are_refused_and_change_nothing(sessionmaker):
    d = await disputed_with_return(sessionmaker)
    before = (await d.deal()).version
    with pytest.raises(BadRequest, match="return address"):
        await _decide(d, RETURN)
    with pytest.raises(BadRequest, match="longer than"):
        await _decide(d, RETURN, return_address="x" * (flows.MAX_RETURN_ADDRESS + 1))
    with pytest.raises(BadRequest, match="longer than"):
        await _decide(d, flows.DisputeOutcome.REFUND, reason="x" * (flows.MAX_REASON + 1))
    # The buyer cannot send back what we did not ask for, nor the timer's steps be taken early.
    with pytest.raises(Conflict):
        await _send_back(d)
    with pytest.raises(Conflict):
        await d.fire(Trigger.RETURN_NOT_SENT, Actor.TIMER)
    assert (await d.deal()).version == before
    await _decide(d, RETURN, return_address=ADDRESS)
    with pytest.raises(Conflict, match="already under way"):
        await _decide(d, RETURN, return_address=ADDRESS)
    # Not in dispute: no return.
    paid = await new_deal(sessionmaker)
    await paid.to_signed("Pickup")
    await paid.pay()
    with pytest.raises(IllegalTransition):
        await _decide(paid, RETURN, return_address=ADDRESS)
    with pytest.raises(IllegalTransition):
        await _decide(paid, flows.DisputeOutcome.RELEASE)
    assert (await paid.deal()).dispute_return is None
    # Nobody else decides, nor takes a return's steps in another's place.
    with pytest.raises(IllegalTransition):
        await d.fire(Trigger.RETURN_REQUESTED, Actor.SELLER)
    with pytest.raises(IllegalTransition):
        await d.fire(Trigger.RETURN_RECEIVED, Actor.BUYER)


async def test_unknown_deal_is_not_found(sessionmaker):
    from dealbroker.core.errors import NotFound

    async with sessionmaker() as session, session.begin():
        with pytest.raises(NotFound):
            await flows.resolve_dispute(session, uuid.uuid4(), RETURN, SETTINGS, return_address="a")
