"""Money is conserved on every path off the happy one, read from the payment's own records (its
refunded and paid-out amounts, not only its status): a refund returns the whole amount and pays
the seller nothing; a release pays the seller the amount less our fee, exactly once, and
refunds nothing; an approval that lapses before payment moves no money at all.

The paths: the carrier returns the parcel; the buyer reports it not received, or the transit
deadline passes, and the operator decides either way; the pickup seller reports a problem and
the operator decides either way. On SQLite and PostgreSQL (the ``sessionmaker`` fixture)."""

import pytest

from dealbroker import parties
from dealbroker.deals import flows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.tasks import fire_due_timers
from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment
from dealbroker.signatures.service import SignatureType
from tests.lifecycle_helpers import SETTINGS, DealDriver, new_deal, run_provider_calls

PRICE = 450_000  # the helpers' offer, in minor units
FEE = PRICE * 5 // 100  # 5 %
OUTCOME = {True: flows.DisputeOutcome.RELEASE, False: flows.DisputeOutcome.REFUND}


async def _payment(d: DealDriver) -> Payment:
    payment = await d.payment()
    assert payment is not None
    return payment


async def _refunded_in_full(d: DealDriver) -> None:
    payment = await _payment(d)
    assert (await d.status(), payment.status) == ("Refunded", "Refunded")
    assert payment.amount_minor == PRICE
    assert payment.refunded_minor == payment.amount_minor
    assert payment.paid_out_minor == 0


async def _paid_out_less_the_fee(d: DealDriver) -> None:
    # The seller says where the money goes; the payout is then made (the worker's job).
    await d.payout_account()
    payment = await _payment(d)
    assert (await d.status(), payment.status) == ("Completed", "PaidOut")
    assert (payment.amount_minor, payment.fee_minor) == (PRICE, FEE)
    assert payment.paid_out_minor == payment.amount_minor - payment.fee_minor
    assert payment.refunded_minor == 0


async def _decide(d: DealDriver, release: bool) -> None:
    await d.step(lambda s, deal: flows.resolve_dispute(s, deal.id, OUTCOME[release], SETTINGS))
    await run_provider_calls(d.sessionmaker)


async def _in_transit(sessionmaker) -> DealDriver:
    d = await new_deal(sessionmaker)
    await d.to_signed("Carrier")
    await d.pay()
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    assert await d.status() == "Shipping_In_Progress"
    return d


async def _held(d: DealDriver, status: str) -> None:
    """In dispute: the money is held, nothing refunded or paid out yet."""
    payment = await _payment(d)
    assert (await d.status(), payment.status) == (status, "Paid")
    assert (payment.refunded_minor, payment.paid_out_minor) == (0, 0)


async def test_a_returned_parcel_refunds_the_whole_amount(sessionmaker):
    d = await _in_transit(sessionmaker)
    await d.fire(Trigger.CARRIER_RETURNED, Actor.PROVIDER)
    await _refunded_in_full(d)


@pytest.mark.parametrize("release", [False, True], ids=["refund", "release"])
async def test_a_parcel_the_buyer_reports_not_received(sessionmaker, release):
    d = await _in_transit(sessionmaker)
    await d.fire(Trigger.BUYER_NOT_RECEIVED, Actor.BUYER)
    await _held(d, "Shipping_Review_Denied")
    await _decide(d, release)
    await (_paid_out_less_the_fee(d) if release else _refunded_in_full(d))


@pytest.mark.parametrize("release", [False, True], ids=["refund", "release"])
async def test_a_parcel_past_the_transit_deadline(sessionmaker, release):
    d = await _in_transit(sessionmaker)
    async with sessionmaker() as session, session.begin():
        await flows.advance_clock(session, d.integration_id, SETTINGS.transit_deadline_days * 86400)
    await fire_due_timers(sessionmaker, SETTINGS)
    await run_provider_calls(sessionmaker)
    await _held(d, "Shipping_Review_Denied")
    await _decide(d, release)
    await (_paid_out_less_the_fee(d) if release else _refunded_in_full(d))


@pytest.mark.parametrize("release", [False, True], ids=["refund", "release"])
async def test_a_pickup_the_seller_reports_a_problem_with(sessionmaker, release):
    d = await new_deal(sessionmaker)
    await d.to_signed("Pickup")
    await d.pay()
    await d.step(lambda s, deal: parties.seller_reports_problem(s, deal, "took", None, SETTINGS))
    await _held(d, "Pickup_Denied")
    # The 7 days pass: the pickup deadline refunds nothing while the dispute is open.
    async with sessionmaker() as session, session.begin():
        await flows.advance_clock(session, d.integration_id, 8 * 86400)
    await fire_due_timers(sessionmaker, SETTINGS)
    await run_provider_calls(sessionmaker)
    await _held(d, "Pickup_Denied")
    await _decide(d, release)
    await (_paid_out_less_the_fee(d) if release else _refunded_in_full(d))


async def test_an_approval_that_lapses_moves_no_money(sessionmaker):
    d = await new_deal(sessionmaker)
    offer = await d.offer("Pickup")
    await d.approve(offer)
    await d.sign(SignatureType.SELLER, Actor.SELLER)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    # The buyer opens a payment and leaves without paying.
    await d.step(lambda s, deal: payments.start(s, deal, SETTINGS))
    async with sessionmaker() as session, session.begin():
        await flows.advance_clock(
            session, d.integration_id, SETTINGS.approval_deadline_hours * 3600 + 1
        )
    await fire_due_timers(sessionmaker, SETTINGS)
    await run_provider_calls(sessionmaker)
    assert await d.status() == "Ad"
    payment = await _payment(d)
    assert payment.status == "PaymentCancelled"
    assert (payment.refunded_minor, payment.paid_out_minor) == (0, 0)
