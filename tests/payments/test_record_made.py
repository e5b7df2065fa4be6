"""Money the provider moved that our database forgot (a restore to an earlier moment): while
money out is held, ``dealbroker payments record-made`` records the refund or payout the provider
made as made, after reading the provider's record of it, so the worker never makes it again.

Stripe's case runs the real commands against localstripe and ``dealbroker serve``: the deal's
refund waits, held, while Stripe has the refund the forgotten worker made. The bank file's case
(no bank API to ask) runs in process.
"""

import asyncio
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import stripe
from sqlalchemy import select

from dealbroker.audit.models import AuditRecord
from dealbroker.audit.service import Actor as AuditActor
from dealbroker.core.errors import Conflict
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.payments import hold
from dealbroker.payments.models import ProviderCall
from dealbroker.payments.reconciliation import record_made
from dealbroker.payments.service import CallKind
from dealbroker.payments.tasks import make_pending_calls
from tests.payments.bank import pending_payout
from tests.payments.checkout import conserved, open_checkout, reconcile, stripe_deal
from tests.payments.emulator import LocalStripe
from tests.processes import env

pytestmark = pytest.mark.server


def cli(db_url: str, localstripe: LocalStripe, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dealbroker", "payments", *args],
        env=env(db_url, **localstripe.settings()),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(autouse=True)
async def released(sessionmaker):  # type: ignore[no-untyped-def]
    """The hold lives in the deployment's settings, which outlive a test: never leave it on."""
    yield
    async with sessionmaker() as session, session.begin():
        await hold.release(session, AuditActor.system())


def pay(client: stripe.StripeClient, intent_id: str) -> None:
    """The buyer's card on the checkout's PaymentIntent, confirmed (as Stripe.js would)."""
    client.v1.payment_intents.update(intent_id, params={"payment_method": "pm_card_visa"})
    assert client.v1.payment_intents.confirm(intent_id).status == "succeeded"


async def calls_of(sessionmaker, deal_id: uuid.UUID) -> list[ProviderCall]:  # type: ignore[no-untyped-def]
    async with sessionmaker() as session:
        rows = await session.scalars(
            select(ProviderCall)
            .where(ProviderCall.deal_id == deal_id)
            .order_by(ProviderCall.created_at)
        )
        return list(rows)


async def test_a_refund_stripe_made_that_the_database_forgot_is_recorded_not_made_again(
    sessionmaker, db_url, localstripe, stripe_server, stripe_settings
):
    since = datetime.now(UTC) - timedelta(seconds=5)
    client = stripe.StripeClient(
        stripe_settings.stripe_secret_key.get_secret_value(),
        base_addresses={"api": localstripe.base},
    )
    deal = await stripe_deal(sessionmaker, stripe_settings, "Pickup")
    payment = await open_checkout(deal, stripe_server)
    assert payment.stripe_payment_intent_id is not None
    pay(client, payment.stripe_payment_intent_id)
    await deal.wait_for("Paid")  # Stripe's webhook, taken by the server
    other = await stripe_deal(sessionmaker, stripe_settings, "Pickup")
    other_payment = await open_checkout(other, stripe_server)
    assert other_payment.stripe_payment_intent_id is not None
    pay(client, other_payment.stripe_payment_intent_id)
    await other.wait_for("Paid")

    # The database is back at a moment before the refund: money out is held, as the restore
    # holds it, and the deal's deadline queues its refund again, which waits unmade.
    held = await asyncio.to_thread(cli, db_url, localstripe, "hold", "--reason", "restore")
    assert held.returncode == 0, held.stderr
    await deal.fire(Trigger.PICKUP_EXPIRED, Actor.TIMER)
    await make_pending_calls(sessionmaker, stripe_settings)
    assert (await deal.payment()).status == "Paid"  # type: ignore[union-attr]
    (waiting,) = await calls_of(sessionmaker, deal.deal_id)
    assert (waiting.kind, waiting.status) == ("refund", "pending")
    # ... while Stripe has the refund the forgotten worker made (its own idempotency key).
    made = client.v1.refunds.create(
        params={"payment_intent": payment.stripe_payment_intent_id, "amount": 450_000},
        options={"idempotency_key": f"refund-{uuid.uuid4()}"},
    )
    stray = client.v1.refunds.create(
        params={"payment_intent": other_payment.stripe_payment_intent_id, "amount": 450_000}
    )
    named = await reconcile(db_url, localstripe, since)
    assert named.returncode == 1
    assert any(made.id in line for line in named.stdout.splitlines()), named.stdout

    def record(*args: str) -> subprocess.CompletedProcess[str]:
        return cli(db_url, localstripe, "record-made", str(deal.deal_id), *args)

    # Refused, and nothing changed: another payment's refund, an unknown one, the wrong kind.
    for ref, why in (
        (stray.id, f"Stripe has no refund {stray.id} of this payment's PaymentIntent."),
        ("re_nope", "Stripe has no refund re_nope of this payment's PaymentIntent."),
    ):
        refused = await asyncio.to_thread(record, "--kind", "refund", "--provider-ref", ref)
        assert (refused.returncode, refused.stderr) == (1, f"error: {why}\n")
    no_payout = await asyncio.to_thread(record, "--kind", "payout", "--provider-ref", made.id)
    assert no_payout.returncode == 1
    assert no_payout.stderr.startswith(f"error: Deal {deal.deal_id} has no payout to record")
    assert (await deal.payment()).status == "Paid"  # type: ignore[union-attr]

    done = await asyncio.to_thread(record, "--kind", "refund", "--provider-ref", made.id)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "callId": str(waiting.id),
        "kind": "refund",
        "paymentId": str(payment.id),
        "dealId": str(deal.deal_id),
        "providerRef": made.id,
        "checked": f"Stripe refund {made.id}: succeeded, NOK 4500.00",
    }
    refunded = await deal.payment()
    assert refunded is not None
    assert refunded.status == "Refunded"
    conserved(refunded)
    (recorded,) = await calls_of(sessionmaker, deal.deal_id)
    assert (recorded.status, recorded.provider_ref) == ("succeeded", made.id)
    async with sessionmaker() as session:
        trail = await session.scalar(
            select(AuditRecord).where(AuditRecord.action == "provider_call.record_made")
        )
    assert trail is not None
    assert (trail.target_id, trail.before["status"], trail.after["providerRef"]) == (
        str(waiting.id),
        "pending",
        made.id,
    )

    # Released, the worker makes nothing more: Stripe holds one refund of the payment.
    released = await asyncio.to_thread(cli, db_url, localstripe, "release")
    assert released.returncode == 0, released.stderr
    await make_pending_calls(sessionmaker, stripe_settings)
    refunds = client.v1.refunds.list(
        params={"payment_intent": payment.stripe_payment_intent_id}
    ).data
    assert [r.id for r in refunds if r.payment_intent == payment.stripe_payment_intent_id] == [
        made.id
    ]
    again = await asyncio.to_thread(record, "--kind", "refund", "--provider-ref", made.id)
    assert again.returncode == 1
    assert (
        again.stderr
        == f"error: Provider call {waiting.id} is succeeded: there is nothing to record.\n"
    )


async def test_a_bank_payout_is_recorded_only_held_as_its_own_and_checked_by_hand(
    sessionmaker, bank_rail
):
    deal = await pending_payout(sessionmaker, 120_000, "NO9386011117947")
    (call,) = [c for c in await calls_of(sessionmaker, deal.deal_id) if c.kind == "payout"]
    assert call.status in ("pending", "submitted")
    own = call.id.hex  # the transfer's end-to-end id

    def record(ref: str, by_hand: bool = True):  # type: ignore[no-untyped-def]
        return record_made(
            sessionmaker, bank_rail, deal.deal_id, CallKind.PAYOUT, ref, checked_by_hand=by_hand
        )

    # Not held, the worker or an export could make it meanwhile: refused.
    with pytest.raises(Conflict, match="hold money out first"):
        await record(own)
    async with sessionmaker() as session, session.begin():
        await hold.hold(session, "restore", AuditActor.system())
    with pytest.raises(Conflict, match="read it on the bank's statement"):
        await record(own, by_hand=False)
    with pytest.raises(Conflict, match=f"The bank knows this payout as {own}"):
        await record("E2E-1")
    with pytest.raises(Conflict, match="printable"):
        await record("x" * 101)
    assert (await deal.payment()).status == "PendingPayOut"  # type: ignore[union-attr]

    done = await record(str(call.id).upper())  # dashes and case aside, the call's own id

    paid = await deal.payment()
    assert paid is not None
    due = f"NOK {paid.payout_minor // 100}.{paid.payout_minor % 100:02d}"
    assert done.checked == f"bank transfer {own}: {due}, checked by hand on the bank's statement"
    assert paid.status == "PaidOut"
    conserved(paid)
    assert await deal.status() == "Completed"
    (recorded,) = [c for c in await calls_of(sessionmaker, deal.deal_id) if c.kind == "payout"]
    assert (recorded.id, recorded.status, recorded.provider_ref) == (call.id, "succeeded", own)
    with pytest.raises(Conflict, match="is succeeded: there is nothing to record"):
        await record(own)
