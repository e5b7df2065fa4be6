"""Every branch of the lifecycle at the service level, on both databases: the real services,
timers through the sandbox clock, money and events checked at each end."""

import asyncio
from datetime import timedelta

import pytest

from dealbroker.core import clock, money
from dealbroker.core.errors import BadRequest, Conflict
from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import DealTimer
from dealbroker.deals.tasks import fire_due_timers
from dealbroker.payments import service as payments
from dealbroker.payments.provider import ProviderUnavailable, provider_for, startup_problem
from dealbroker.signatures.service import SignatureType
from tests.lifecycle_helpers import (
    SETTINGS,
    assert_events_match_changes,
    count,
    new_deal,
    payment_statuses,
    run_provider_calls,
)

FEE = money.fee_for(450_000, SETTINGS.fee_percent, SETTINGS.fee_fixed)


async def advance(sessionmaker, driver, seconds: int) -> int:
    async with sessionmaker() as session, session.begin():
        await flows.advance_clock(session, driver.integration_id, seconds)
    fired = await fire_due_timers(sessionmaker, SETTINGS)
    await run_provider_calls(sessionmaker)
    return fired


async def test_carrier_happy_path_to_paid_out(sessionmaker):
    d = await new_deal(sessionmaker)
    await d.to_signed("Carrier")
    assert await d.status() == "Signed"
    await d.pay()
    assert await d.status() == "Shipping_Pending"
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await d.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    assert await d.status() == "Shipping_Arrived"
    await d.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    deal = await d.deal()
    assert (deal.status, deal.payment_status) == ("Completed", "PendingPayOut")
    await d.payout_account()
    payment = await d.payment()
    assert payment.status == "PaidOut"
    assert payment.amount_minor == 450_000
    assert payment.fee_minor == FEE
    assert payment.paid_out_minor + payment.fee_minor == payment.amount_minor
    assert payment_statuses(await d.events("payment.status")) == [
        "Created",
        "Processing",
        "Paid",
        "PendingPayOut",
        "PaidOut",
    ]
    assert [h.to_status for h in await d.history()] == [
        "Draft",
        "Ad",
        "Signed",
        "Shipping_Pending",
        "Shipping_In_Progress",
        "Shipping_Arrived",
        "Completed",
    ]
    await assert_events_match_changes(d)


async def test_pickup_happy_path_with_account_registered_first(sessionmaker):
    d = await new_deal(sessionmaker)
    await d.to_signed("Pickup")
    await d.payout_account("86011117947")  # a domestic account number works too
    await d.pay()
    assert await d.status() == "Pickup_Pending"
    await d.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    payment = await d.payment()
    assert ((await d.deal()).status, payment.status) == ("Completed", "PaidOut")
    assert payment.paid_out_minor == 450_000 - FEE


async def test_review_period_ends_in_approval_after_24_hours(sessionmaker):
    d = await new_deal(sessionmaker)
    await d.to_signed("Carrier")
    await d.pay()
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.PROVIDER)
    await d.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    assert await advance(sessionmaker, d, 24 * 3600 - 60) == 0
    assert await d.status() == "Shipping_Arrived"
    assert await advance(sessionmaker, d, 60) == 1
    assert await d.status() == "Completed"
    assert (await d.payment()).status == "PendingPayOut"
    assert (await d.history())[-1].actor == "timer"


@pytest.mark.parametrize(
    ("shipping", "expired"), [("Carrier", "Shipping_Expired"), ("Pickup", "Pickup_Expired")]
)
async def test_seven_days_without_handover_expire_and_refund(sessionmaker, shipping, expired):
    d = await new_deal(sessionmaker)
    await d.to_signed(shipping)
    await d.pay()
    await advance(sessionmaker, d, 7 * 24 * 3600)
    assert [h.to_status for h in await d.history()][-2:] == [expired, "Refunded"]
    payment = await d.payment()
    assert payment.status == "Refunded"
    assert payment.refunded_minor == payment.amount_minor
    assert payment.paid_out_minor == 0
    await assert_events_match_changes(d)


async def test_timer_skips_a_deal_that_moved_on(sessionmaker):
    d = await new_deal(sessionmaker)
    await d.to_signed("Carrier")
    await d.pay()
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    assert await advance(sessionmaker, d, 8 * 24 * 3600) == 1
    assert await d.status() == "Shipping_In_Progress"
    async with sessionmaker() as session:
        from sqlalchemy import select

        timer = await session.scalar(
            select(DealTimer).where(DealTimer.trigger == "shipping_expired")
        )
    assert timer.outcome == "skipped"


async def test_timers_fire_exactly_once_with_racing_workers(sessionmaker, frozen_clock):
    drivers = [await new_deal(sessionmaker) for _ in range(4)]
    for d in drivers:
        await d.to_signed("Pickup")
        await d.pay()
    frozen_clock[0] += timedelta(days=8)
    fired = await asyncio.gather(*(fire_due_timers(sessionmaker, SETTINGS) for _ in range(4)))
    assert sum(fired) == 4
    for d in drivers:
        assert [h.to_status for h in await d.history()][-2:] == ["Pickup_Expired", "Refunded"]
    assert await fire_due_timers(sessionmaker, SETTINGS) == 0


async def test_returned_item_is_refunded(sessionmaker):
    d = await new_deal(sessionmaker)
    await d.to_signed("Carrier")
    await d.pay()
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.PROVIDER)
    await d.fire(Trigger.CARRIER_RETURNED, Actor.PROVIDER)
    assert [h.to_status for h in await d.history()][-2:] == ["Shipping_Returned", "Refunded"]
    assert (await d.payment()).status == "Refunded"


@pytest.mark.parametrize("release", [True, False])
@pytest.mark.parametrize("shipping", ["Carrier", "Pickup"])
async def test_denied_item_goes_to_dispute_then_release_or_refund(sessionmaker, release, shipping):
    d = await new_deal(sessionmaker)
    await d.to_signed(shipping)
    await d.payout_account()
    await d.pay()
    if shipping == "Carrier":
        await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
        await d.fire(Trigger.CARRIER_DELIVERED, Actor.BUYER)
    await d.fire(Trigger.BUYER_DENIED, Actor.BUYER)
    assert await d.status() == (
        "Shipping_Review_Denied" if shipping == "Carrier" else "Pickup_Denied"
    )
    # Nobody but the operator settles a dispute.
    with pytest.raises(Conflict):
        await d.fire(Trigger.DISPUTE_RELEASED, Actor.SELLER)
    await d.step(
        lambda s, deal: flows.resolve_dispute(
            s,
            deal.id,
            flows.DisputeOutcome.RELEASE if release else flows.DisputeOutcome.REFUND,
            SETTINGS,
        )
    )
    payment = await d.payment()
    if release:
        assert ((await d.deal()).status, payment.status) == ("Completed", "PaidOut")
        assert payment.paid_out_minor == payment.amount_minor - payment.fee_minor
    else:
        assert ((await d.deal()).status, payment.status) == ("Refunded", "Refunded")
        assert payment.refunded_minor == payment.amount_minor
    await assert_events_match_changes(d)


@pytest.mark.parametrize("stage", ["Draft", "Ad", "Signed"])
async def test_cancel_before_payment_denies_pending_offers(sessionmaker, stage):
    d = await new_deal(sessionmaker)
    pending = await d.offer()
    if stage != "Draft":
        await d.sign(SignatureType.SELLER, Actor.SELLER)
    if stage == "Signed":
        await d.approve(pending)
        with pytest.raises(Conflict):
            await d.offer()  # an approved deal takes no more offers
        await d.sign(SignatureType.BUYER, Actor.BUYER)
    assert await d.status() == stage
    await d.fire(Trigger.CANCEL, Actor.SELLER)
    assert await d.status() == "Cancelled"
    denied = await d.events("deal.offerDenied")
    assert len(denied) == (0 if stage == "Signed" else 1)
    with pytest.raises(Conflict):
        await d.pay()


async def test_no_cancel_after_payment(sessionmaker):
    d = await new_deal(sessionmaker)
    await d.to_signed()
    await d.pay()
    with pytest.raises(Conflict):
        await d.fire(Trigger.CANCEL, Actor.INTEGRATION)


@pytest.mark.parametrize("outcome", ["failed", "cancelled"])
async def test_failed_payment_leaves_the_deal_signed_and_can_be_retried(sessionmaker, outcome):
    d = await new_deal(sessionmaker)
    await d.to_signed()
    await d.pay(outcome)
    deal = await d.deal()
    assert deal.status == "Signed"
    assert deal.payment_status == ("PaymentFailed" if outcome == "failed" else "PaymentCancelled")
    await d.pay()
    assert await d.status() == "Shipping_Pending"
    assert payment_statuses(await d.events("payment.status")) == [
        "Created",
        "Processing",
        deal.payment_status,
        "Created",
        "Processing",
        "Paid",
    ]


async def test_payout_account_is_validated(sessionmaker):
    d = await new_deal(sessionmaker)
    with pytest.raises(BadRequest, match="IBAN or account number"):
        await d.payout_account("NO9386011117948")  # wrong check digits
    with pytest.raises(BadRequest):
        await d.payout_account("12345")


async def test_out_of_order_steps_are_refused_and_change_nothing(sessionmaker):
    d = await new_deal(sessionmaker)
    before = await count(sessionmaker, DealTimer), len(await d.events())
    with pytest.raises(Conflict):
        await d.sign(SignatureType.BUYER, Actor.BUYER)  # no approved offer yet
    with pytest.raises(Conflict):
        await d.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    with pytest.raises(Conflict):
        await d.fire(Trigger.SELLER_SIGNED, Actor.BUYER)  # the wrong party
    assert (await count(sessionmaker, DealTimer), len(await d.events())) == before
    assert clock.now()  # the clock was not moved by refusals


async def test_a_refused_payout_is_failed_not_lost_and_paid_when_retried(sessionmaker, monkeypatch):
    """A provider that refuses the payout: PayoutFailed; registering the account again pays."""
    from dealbroker.payments import tasks as payment_tasks
    from dealbroker.payments.provider import ProviderError, SimulatedProvider

    class RefusingProvider(SimulatedProvider):
        async def pay_out(self, payment, account, *, idempotency_key):  # type: ignore[no-untyped-def]
            raise ProviderError("the bank refused the account")

    d = await new_deal(sessionmaker)
    await d.to_signed("Pickup")
    await d.pay()
    monkeypatch.setattr(payment_tasks, "provider_of", lambda settings, payment: RefusingProvider())
    await d.payout_account()
    await d.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    payment = await d.payment()
    assert (payment.status, payment.paid_out_minor) == ("PayoutFailed", 0)
    monkeypatch.setattr(payment_tasks, "provider_of", lambda settings, payment: SimulatedProvider())
    await d.payout_account("86011117947")
    payment = await d.payment()
    assert payment.status == "PaidOut"
    assert payment.paid_out_minor == payment.amount_minor - payment.fee_minor
    assert payment_statuses(await d.events("payment.status"))[-4:] == [
        "PendingPayOut",
        "PayoutFailed",
        "PendingPayOut",
        "PaidOut",
    ]


async def test_production_takes_no_simulated_payment(sessionmaker):
    """The simulated provider moves no money: outside the sandbox checkout is refused and
    nothing is stored, however the app was started."""
    production = Settings(
        database_url="sqlite://",
        environment="production",
        secret_key="p" * 40,
        support_email="support@market.example.com",
    )
    assert startup_problem(SETTINGS) is None
    assert provider_for(SETTINGS).name == "simulated"
    assert "simulated payment provider" in (startup_problem(production) or "")
    d = await new_deal(sessionmaker)
    await d.to_signed("Pickup")
    before = len(await d.events())
    with pytest.raises(ProviderUnavailable) as refused:
        await d.step(lambda s, deal: payments.start(s, deal, production))
    assert refused.value.status == 503
    assert refused.value.detail == (
        "Payments are not available: no payment provider is configured for production."
    )
    assert await d.payment() is None
    assert (await d.status(), len(await d.events())) == ("Signed", before)
