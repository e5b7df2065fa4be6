"""No charge on a cancelled deal: the cancel closes the open payment, a real ``dealbroker worker``
cancels its PaymentIntent at Stripe (localstripe), the checkout refuses it, and money that
reaches Stripe anyway (the buyer's charge racing the cancel) is refunded in full, both parties
told, and ``payments reconcile`` clean. The simulated provider of the sandbox is held to the
same: its test page cannot pay a payment the cancel closed.
"""

import asyncio
import json
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import stripe
from sqlalchemy import select, update

from dealbroker.audit.models import AuditRecord
from dealbroker.deals import flows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers.models import Offer
from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment, ProviderCall, StripeEvent
from tests.lifecycle_helpers import SETTINGS, DealDriver, new_deal
from tests.payments.checkout import StripeDeal, conserved, open_checkout, reconcile, stripe_deal
from tests.payments.emulator import LocalStripe, signature
from tests.processes import Server, Worker, env

pytestmark = pytest.mark.server


def start_worker(db_url: str, cwd: Path, localstripe: LocalStripe) -> Worker:
    worker = Worker(db_url, cwd, poll=0.2, **localstripe.settings())
    worker.wait_ready()
    return worker


async def cancel(deal: DealDriver) -> None:
    """The seller cancels, in one transaction, as the page does; its provider calls are left
    to the worker."""
    async with deal.sessionmaker() as session, session.begin():
        row = await session.get(Deal, deal.deal_id, with_for_update=True)
        assert row is not None
        await flows.fire(session, row, Trigger.CANCEL, Actor.SELLER, SETTINGS)


async def wait_until(check, timeout: float = 30, what: str = "", worker=None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            said = "" if worker is None else f"; the worker said:\n{worker.output()}"
            raise AssertionError(f"timed out waiting for {what}{said}")
        await asyncio.sleep(0.1)


def stripe_client(settings) -> stripe.StripeClient:  # type: ignore[no-untyped-def]
    return stripe.StripeClient(
        settings.stripe_secret_key.get_secret_value(),
        base_addresses={"api": settings.stripe_api_base},
    )


async def calls(deal: DealDriver) -> list[ProviderCall]:
    async with deal.sessionmaker() as session:
        return list(
            await session.scalars(
                select(ProviderCall)
                .where(ProviderCall.deal_id == deal.deal_id)
                .order_by(ProviderCall.created_at)
            )
        )


async def payment_statuses(deal: DealDriver) -> list[str]:
    return [json.loads(e.payload)["data"]["status"] for e in await deal.events("payment.status")]


def checkout_path(deal: StripeDeal, server: Server) -> tuple[str, str]:
    """The buyer's checkout (path, form token), as the Pay by card button leads there."""
    with httpx.Client(base_url=server.base) as buyer:
        page = buyer.get(deal.buyer_path)
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        version = page.text.split('name="version" value="', 1)[1].split('"', 1)[0]
        paying = buyer.post(
            f"{deal.buyer_path.split('?')[0]}/-/pay",
            data={"csrf": csrf, "version": version, "method": "card"},
            follow_redirects=True,
        )
    assert "/pay/stripe/" in str(paying.url), paying.text
    form_token = paying.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    return paying.url.raw_path.decode(), form_token


async def test_a_cancel_before_payment_cancels_the_intent_at_stripe_and_the_checkout_refuses(
    sessionmaker, db_url, localstripe, stripe_server, stripe_settings, tmp_path
):
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")
    checkout, form_token = checkout_path(deal, stripe_server)
    payment = await deal.wait_for("Created")
    intent_id = payment.stripe_payment_intent_id
    assert intent_id is not None
    client = stripe_client(stripe_settings)
    assert client.v1.payment_intents.retrieve(intent_id).status != "canceled"

    await cancel(deal)

    assert await deal.status() == "Cancelled"
    assert (await deal.payment()).status == "PaymentCancelled"  # type: ignore[union-attr]
    worker = start_worker(db_url, tmp_path, localstripe)
    try:

        async def cancelled_at_stripe() -> bool:
            return client.v1.payment_intents.retrieve(intent_id).status == "canceled"

        await wait_until(
            cancelled_at_stripe, what="the worker to cancel the PaymentIntent", worker=worker
        )
        await wait_until(lambda: _all_finished(deal), what="the cancel call to be recorded as made")
    finally:
        worker.close()
    (call,) = await calls(deal)
    assert (call.kind, call.status) == ("cancel", "succeeded")

    # The checkout refuses the closed payment: the page, and the server's charge.
    with httpx.Client(base_url=stripe_server.base) as buyer:
        page = buyer.get(checkout)
        charge = buyer.post(checkout, data={"csrf": form_token, "setup_intent": "seti_123"})
    assert page.status_code == 409, page.text
    assert "This payment is closed" in page.text
    assert "card-element" not in page.text
    assert charge.status_code == 409, charge.text
    assert "This payment is closed" in charge.text
    assert client.v1.payment_intents.retrieve(intent_id).status == "canceled"
    assert await payment_statuses(deal) == ["Created", "PaymentCancelled"]
    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result


async def _all_finished(deal: DealDriver) -> bool:
    found = await calls(deal)
    return bool(found) and all(c.status in ("succeeded", "failed") for c in found)


async def test_money_that_reaches_stripe_after_the_cancel_is_refunded_in_full(
    sessionmaker, db_url, localstripe, stripe_server, stripe_settings, tmp_path
):
    """The race: the buyer's charge succeeds at Stripe after the deal was cancelled (before
    the worker cancelled the PaymentIntent). Stripe's ``payment_intent.succeeded`` reaches our
    webhook; the refund is queued at once and made by the worker."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Pickup")
    payment = await open_checkout(deal, stripe_server)
    intent_id = payment.stripe_payment_intent_id
    assert intent_id is not None
    async with sessionmaker() as session, session.begin():  # each reads their own language
        await session.execute(
            update(Deal).where(Deal.id == deal.deal_id).values(seller_locale="nb")
        )
        await session.execute(
            update(Offer).where(Offer.deal_id == deal.deal_id).values(locale="sv")
        )
    await cancel(deal)
    client = stripe_client(stripe_settings)
    client.v1.payment_intents.update(intent_id, params={"payment_method": "pm_card_visa"})
    assert client.v1.payment_intents.confirm(intent_id).status == "succeeded"

    async def refund_queued() -> bool:
        async with sessionmaker() as session:
            seen = await session.scalar(
                select(StripeEvent.id).where(StripeEvent.payment_id == payment.id)
            )
        return seen is not None and any(c.kind == "refund" for c in await calls(deal))

    # localstripe's webhook comes a second later; the refund is queued by it, not the worker.
    await wait_until(refund_queued, what="the webhook to queue the refund")
    assert (await deal.payment()).status == "PaymentCancelled"  # type: ignore[union-attr]
    worker = start_worker(db_url, tmp_path, localstripe)
    try:
        refunded = await deal.wait_for("Refunded", timeout=30)
        await wait_until(lambda: _all_finished(deal), what="every provider call to finish")
    finally:
        worker.close()

    assert await deal.status() == "Cancelled"
    conserved(refunded)
    assert refunded.refunded_minor == refunded.amount_minor == 450_000
    by_kind = {c.kind: c for c in await calls(deal)}
    assert by_kind["cancel"].status == "succeeded"  # found the money in: refunded instead
    refund_call = by_kind["refund"]
    assert refund_call.status == "succeeded"
    assert refund_call.provider_ref is not None
    refund = client.v1.refunds.retrieve(refund_call.provider_ref)
    assert (refund.amount, refund.payment_intent, refund.status) == (
        refunded.amount_minor,
        intent_id,
        "succeeded",
    )
    assert len(client.v1.refunds.list().data) == 1  # once, not twice
    assert await payment_statuses(deal) == ["Created", "PaymentCancelled", "Refunded"]
    async with sessionmaker() as session:
        told = list(
            await session.scalars(
                select(OutboxMessage).where(
                    OutboxMessage.deal_id == deal.deal_id,
                    OutboxMessage.kind == "late_payment_refunded",
                )
            )
        )
    subjects = {m.to_email: m.subject for m in told}
    assert subjects == {
        "ola@example.com": "Bike: din betalning betalas tillbaka",
        "kari@example.com": "Bike: en sen betaling går tilbake til kjøperen",
    }, subjects
    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result


async def test_the_simulated_checkout_cannot_pay_a_payment_the_cancel_closed(sessionmaker, client):
    """The sandbox's simulated provider: the cancel closes the open payment, its test page
    offers nothing to press and refuses an outcome posted anyway."""
    deal = await new_deal(sessionmaker)
    await deal.to_signed()
    _, token = await deal.step(lambda s, d: payments.start(s, d, SETTINGS))
    page = f"/pay/{token}"
    open_page = await client.get(page)
    assert open_page.status_code == 200
    assert 'value="succeeded"' in open_page.text
    csrf = open_page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]

    await cancel(deal)

    assert await deal.status() == "Cancelled"
    payment = await deal.payment()
    assert payment is not None
    assert payment.status == "PaymentCancelled"
    closed = await client.get(page)
    assert 'value="succeeded"' not in closed.text
    paid = await client.post(page, data={"csrf": csrf, "outcome": "succeeded"})
    assert paid.status_code == 409, paid.text
    assert (await deal.payment()).status == "PaymentCancelled"  # type: ignore[union-attr]
    assert await payment_statuses(deal) == ["Created", "PaymentCancelled"]
    async with sessionmaker() as session:
        made = await session.scalar(
            select(ProviderCall.id).where(ProviderCall.deal_id == deal.deal_id)
        )
        assert made is None  # nothing to cancel at a provider
        assert (await session.get(Payment, payment.id)).refunded_minor == 0  # type: ignore[union-attr]


async def test_a_failed_attempt_paid_late_is_refunded_and_the_new_payment_stands(
    sessionmaker, db_url, localstripe, stripe_server, stripe_settings, tmp_path
):
    """A declined attempt's PaymentIntent is paid after all (a browser that kept its secret),
    while the buyer pays again with a new payment: the late money is refunded in full, the
    new payment stays the deal's, ``Paid``, and no ``Refunded`` event says otherwise."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")
    first = await open_checkout(deal, stripe_server)
    first_intent = first.stripe_payment_intent_id
    assert first_intent is not None
    client = stripe_client(stripe_settings)
    failed = post_event(
        stripe_server, stripe_settings, localstripe, "payment_intent.payment_failed", first_intent
    )
    assert failed.json()["outcome"] == "applied", failed.text
    assert (await deal.payment()).status == "PaymentFailed"  # type: ignore[union-attr]
    assert [c.kind for c in await calls(deal)] == ["cancel"]  # its intent, for the worker

    client.v1.payment_intents.update(first_intent, params={"payment_method": "pm_card_visa"})
    assert client.v1.payment_intents.confirm(first_intent).status == "succeeded"
    await wait_until(
        lambda: _has_call(deal, "refund"), what="the late success to queue the first's refund"
    )
    second = await open_checkout(deal, stripe_server)  # the buyer pays again
    assert second.id != first.id
    client.v1.payment_intents.update(
        second.stripe_payment_intent_id, params={"payment_method": "pm_card_visa"}
    )
    client.v1.payment_intents.confirm(second.stripe_payment_intent_id)
    await deal.wait_for("Paid")
    worker = start_worker(db_url, tmp_path, localstripe)
    try:
        await wait_until(lambda: _all_finished(deal), what="every provider call", worker=worker)
    finally:
        worker.close()

    async with sessionmaker() as session:
        refunded = await session.get(Payment, first.id, populate_existing=True)
        paid = await session.get(Payment, second.id, populate_existing=True)
        row = await session.get(Deal, deal.deal_id, populate_existing=True)
    assert refunded is not None
    assert paid is not None
    assert row is not None
    assert refunded.status == "Refunded"
    conserved(refunded)
    assert (paid.status, row.status, row.payment_status) == ("Paid", "Shipping_Pending", "Paid")
    assert await payment_statuses(deal) == [
        "Created",
        "Processing",
        "PaymentFailed",
        "Created",
        "Processing",
        "Paid",
    ]
    (refund,) = client.v1.refunds.list().data
    assert (refund.amount, refund.payment_intent) == (first.amount_minor, first_intent)
    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result


async def _has_call(deal: DealDriver, kind: str) -> bool:
    return any(c.kind == kind for c in await calls(deal))


def post_event(server: Server, settings, localstripe: LocalStripe, kind: str, intent_id: str):  # type: ignore[no-untyped-def]
    """Stripe's event about the PaymentIntent as localstripe holds it, signed (localstripe
    sends no ``payment_failed`` for a PaymentIntent that was never confirmed)."""
    intent = httpx.get(
        f"{localstripe.base}/v1/payment_intents/{intent_id}",
        auth=(settings.stripe_secret_key.get_secret_value(), ""),
    ).json()
    body = json.dumps(
        {
            "id": f"evt_{uuid.uuid4().hex[:14]}",
            "object": "event",
            "type": kind,
            "created": int(time.time()),
            "data": {"object": intent},
        }
    ).encode()
    return httpx.post(
        f"{server.base}/payments/v1/stripe/webhook",
        content=body,
        headers={"Stripe-Signature": signature(body)},
    )


async def test_money_for_a_deal_that_no_longer_waits_for_it_is_refunded(
    sessionmaker, db_url, localstripe, stripe_server, stripe_settings, tmp_path
):
    """A deal cancelled with its payment still open, as the code before this fix left them:
    the checkout refuses it, and Stripe's success for it is refunded in full."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Pickup")
    checkout, form_token = checkout_path(deal, stripe_server)
    payment = await deal.wait_for("Created")
    intent_id = payment.stripe_payment_intent_id
    assert intent_id is not None
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Deal).where(Deal.id == deal.deal_id).values(status="Cancelled")
        )
    with httpx.Client(base_url=stripe_server.base) as buyer:
        page = buyer.get(checkout)
        charge = buyer.post(checkout, data={"csrf": form_token, "setup_intent": "seti_123"})
    assert (page.status_code, charge.status_code) == (409, 409), (page.text, charge.text)
    assert "This payment is closed" in page.text

    client = stripe_client(stripe_settings)
    client.v1.payment_intents.update(intent_id, params={"payment_method": "pm_card_visa"})
    assert client.v1.payment_intents.confirm(intent_id).status == "succeeded"
    await wait_until(lambda: _has_call(deal, "refund"), what="the webhook to queue the refund")
    worker = start_worker(db_url, tmp_path, localstripe)
    try:
        refunded = await deal.wait_for("Refunded", timeout=30)
        await wait_until(lambda: _all_finished(deal), what="every provider call", worker=worker)
    finally:
        worker.close()

    conserved(refunded)
    assert await deal.status() == "Cancelled"
    assert await payment_statuses(deal) == ["Created", "PaymentCancelled", "Refunded"]
    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result


def payments_cli(db_url: str, localstripe: LocalStripe, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dealbroker", "payments", *args],
        env=env(db_url, **localstripe.settings()),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_operator_refunds_money_a_deal_took_before_this_fix(
    sessionmaker, db_url, localstripe, stripe_server, stripe_settings
):
    """The deals production was left with: cancelled, the payment ``Processing``, Stripe's
    success handled (and ignored) long ago, so no event will come again. ``dealbroker payments
    refund-late`` refunds it in full, once, and reconcile is clean after."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")
    payment, _ = await deal.step(lambda s, d: payments.start(s, d, stripe_settings))
    client = stripe_client(stripe_settings)
    intent = client.v1.payment_intents.create(
        params={"amount": payment.amount_minor, "currency": "nok", "payment_method": "pm_card_visa"}
    )
    assert client.v1.payment_intents.confirm(intent.id).status == "succeeded"

    # Its webhook is answered before the payment is tied to it, as the old code answered it.
    async def answered() -> bool:
        ids = [
            e.id
            for e in client.v1.events.list().data
            if e.data.object.to_dict().get("id") == intent.id
        ]
        return any(i in stripe_server.output() for i in ids)

    await wait_until(answered, what="the webhook of the old days to be answered")
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Payment)
            .where(Payment.id == payment.id)
            .values(stripe_payment_intent_id=intent.id, status="Processing")
        )
        await session.execute(
            update(Deal).where(Deal.id == deal.deal_id).values(status="Cancelled")
        )
    stale = await reconcile(db_url, localstripe, since)
    assert stale.stdout.splitlines() == [
        f"payment {intent.id}: status Processing here, succeeded at the provider"
    ], stale

    done = await asyncio.to_thread(payments_cli, db_url, localstripe, "refund-late", intent.id)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "paymentId": str(payment.id),
        "dealId": str(deal.deal_id),
        "outcome": "refund queued",
    }
    refunded = await deal.wait_for("Refunded", timeout=1)  # made by the command itself
    conserved(refunded)
    (refund,) = client.v1.refunds.list().data
    assert (refund.amount, refund.payment_intent) == (payment.amount_minor, intent.id)
    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result
    async with sessionmaker() as session:
        told = await session.scalars(
            select(OutboxMessage.to_email).where(
                OutboxMessage.deal_id == deal.deal_id,
                OutboxMessage.kind == "late_payment_refunded",
            )
        )
        assert sorted(told) == ["kari@example.com", "ola@example.com"]

    again = await asyncio.to_thread(payments_cli, db_url, localstripe, "refund-late", intent.id)
    assert again.returncode == 1
    assert again.stderr.startswith("error: Payment "), again.stderr
    assert "is Refunded" in again.stderr
    unknown = await asyncio.to_thread(payments_cli, db_url, localstripe, "refund-late", "pi_nope")
    assert (unknown.returncode, unknown.stderr) == (
        1,
        "error: No payment of ours has PaymentIntent pi_nope.\n",
    )
    assert len(client.v1.refunds.list().data) == 1
    # The one refund made is in the audit trail; the refused attempts left no record.
    async with sessionmaker() as session:
        trail = (await session.scalars(select(AuditRecord))).all()
    assert [(r.action, r.target_id, r.after["paymentIntent"]) for r in trail] == [
        ("payment.refund_late", str(payment.id), intent.id)
    ]
