"""Whole deals paid with Stripe: the buyer's card in Chromium on our checkout page with
localstripe's Stripe.js, localstripe's signed webhook moving the deal on, refunds made through
Stripe Refunds, and ``dealbroker payments reconcile`` finding no difference afterwards.

The deal is walked to ``Signed`` and on after payment through the services (``DealDriver``),
as the other lifecycle tests do; the pages of those steps have browser tests of their own. The
payout goes through the sandbox's simulated payout rail: payouts are bank transfers, not
Stripe's.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import stripe
from playwright.async_api import TimeoutError as PlaywrightTimeout
from sqlalchemy import func, select

from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.events.models import Event
from dealbroker.payments.models import ProviderCall
from tests.lifecycle_helpers import DealDriver
from tests.payments.bank import RAIL, payouts, read_file, status_report
from tests.payments.checkout import StripeDeal, conserved, open_checkout, reconcile, stripe_deal
from tests.payments.emulator import signature

pytestmark = pytest.mark.server

VISA = "4242424242424242"
DECLINED = "4000000000000341"  # localstripe: the card is accepted, the charge declined
THREE_D_SECURE = "4000002500003155"  # localstripe: authentication asked, at set-up and charge


@dataclass
class Paid:
    """Where the buyer's browser ended, and what the page said there."""

    url: str
    said: str
    checkout_policy: str  # the checkout page's Content-Security-Policy


async def pay_by_card(  # type: ignore[no-untyped-def]
    browser, base: str, deal: StripeDeal, number: str, *, authenticate: bool = False
) -> Paid:
    """The buyer presses Pay on their deal's page, types the card into Stripe's fields on the
    checkout, and pays; the page they end on."""
    context = await browser.new_context()
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "console",
        lambda m: errors.append(f"{m.text} at {m.location['url']}") if m.type == "error" else None,
    )
    try:
        await page.goto(base + deal.buyer_path)
        async with page.expect_navigation(url="**/pay/stripe/**") as navigation:
            await page.get_by_role("button", name="Pay by card").click()
        checkout = await navigation.value
        assert checkout is not None
        policy = checkout.headers["content-security-policy"]
        fields = page.locator("#card-element input")
        await fields.first.wait_for()
        for placeholder, value in [
            ("number", number),
            ("exp_month", "12"),
            ("exp_year", "34"),
            ("cvc", "123"),
            ("postal_code", "0150"),
        ]:
            await page.fill(f"#card-element input[placeholder={placeholder}]", value)
        await page.get_by_role("button", name="Pay").click()
        if authenticate:  # 3-D Secure at the card's set-up, then again at the charge
            for _ in range(2):
                await page.get_by_role("button", name="Complete authentication").click()
        # Back on the deal's page (a status), or still on the checkout (an error).
        said = page.locator(".flash.ok, .flash.error")
        try:
            await said.first.wait_for(timeout=15_000)
        except PlaywrightTimeout:
            raise AssertionError(f"{errors}\n{await page.content()}") from None
        if "/pay/stripe/" not in page.url:
            assert errors == [], errors
        return Paid(page.url, await said.first.inner_text(), policy)
    finally:
        await context.close()


# The checkout in the buyer's language, as the party pages are walked (tests/web/test_browser.py):
# a Norwegian desktop and a Swedish phone, saved to docs/screenshots/ with
# DEALBROKER_TEST_SCREENSHOTS=1. The card fields are Stripe.js's (here the emulator's); the page
# hands Stripe the page's language for them and for its error messages.
CHECKOUT_WALKS = [
    ("nb", 1280, "33-buyer-stripe-checkout.png", ["Betaling", "Betal 4 500,00 kr"]),
    ("sv", 390, "phone-33-buyer-stripe-checkout.png", ["Betalning", "Betala 4 500,00 Nkr"]),
]


@pytest.mark.parametrize(("lang", "width", "name", "words"), CHECKOUT_WALKS)
async def test_the_checkout_speaks_the_buyers_language(  # type: ignore[no-untyped-def]
    sessionmaker, browser, stripe_server, stripe_settings, tmp_path, lang, width, name, words
):
    from tests.browser import screenshots
    from tests.web.english import english_in

    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")
    context = await browser.new_context(
        locale={"nb": "nb-NO", "sv": "sv-SE"}[lang], viewport={"width": width, "height": 900}
    )
    page = await context.new_page()
    try:
        await page.goto(stripe_server.base + deal.buyer_path)
        async with page.expect_navigation(url="**/pay/stripe/**"):
            await page.locator("form[action*='/-/pay'] button[value=card]").click()
        await page.locator("#card-element input").first.wait_for()
        form = page.locator("#stripe-checkout")
        assert await form.get_attribute("data-locale") == lang
        assert await page.get_attribute("html", "lang") == lang
        text = (await page.inner_text("body")).replace("\u00a0", " ")
        for word in words:
            assert word in text, (word, text)
        shots = screenshots(tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(shots / name), full_page=True)
        # Our words on the page, and the error the script shows when Stripe gives none; the
        # card fields (Stripe.js's, here the emulator's) are left out.
        await page.evaluate("document.getElementById('card-element').innerHTML = ''")
        failed = await form.get_attribute("data-failed")
        assert english_in(await page.content() + f"<p>{failed}</p>") == []
        fits = await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert fits, "the checkout overflows the window"
    finally:
        await context.close()


async def test_a_carrier_deal_paid_by_card_and_paid_out(
    sessionmaker, db_url, browser, localstripe, stripe_server, stripe_settings
):
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")

    landed = await pay_by_card(browser, stripe_server.base, deal, VISA)

    # Back on the deal's page, which waits: only the webhook makes the payment Paid.
    assert landed.url.endswith("done=payment-waiting"), landed
    assert landed.url.startswith(stripe_server.base + deal.buyer_path.split("?")[0]), landed
    assert "waiting for the confirmation" in landed.said, landed
    # Stripe.js's origin (here the emulator's) may run scripts and frames on the checkout.
    assert f"script-src 'self' {localstripe.base};" in landed.checkout_policy
    assert f"frame-src {localstripe.base};" in landed.checkout_policy
    payment = await deal.wait_for("Paid")
    assert await deal.status() == "Shipping_Pending"
    assert payment.stripe_payment_intent_id is not None
    assert payment.stripe_payment_intent_id.startswith("pi_")
    intent = stripe.StripeClient(
        stripe_settings.stripe_secret_key.get_secret_value(),
        base_addresses={"api": localstripe.base},
    ).v1.payment_intents.retrieve(payment.stripe_payment_intent_id)
    assert (intent.amount, intent.currency, intent.status) == (
        payment.amount_minor,
        payment.currency.lower(),
        "succeeded",
    )
    assert intent.metadata["payment_id"] == str(payment.id)
    assert intent.metadata["deal_id"] == str(deal.deal_id)

    await deal.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await deal.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    await deal.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    await deal.payout_account()
    payment = await deal.wait_for("PaidOut", timeout=1)
    assert await deal.status() == "Completed"
    conserved(payment)
    statuses = [
        json.loads(e.payload)["data"]["status"] for e in await deal.events("payment.status")
    ]
    assert statuses == ["Created", "Processing", "Paid", "PendingPayOut", "PaidOut"]

    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result


async def test_a_pickup_deal_that_expires_is_refunded_through_stripe(
    sessionmaker, db_url, browser, localstripe, stripe_server, stripe_settings
):
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Pickup")
    await pay_by_card(browser, stripe_server.base, deal, VISA)
    await deal.wait_for("Paid")
    assert await deal.status() == "Pickup_Pending"

    await deal.fire(Trigger.PICKUP_EXPIRED, Actor.TIMER)  # 7 days without a handover

    payment = await deal.wait_for("Refunded", timeout=1)
    assert await deal.status() == "Refunded"
    conserved(payment)
    async with sessionmaker() as session:
        call = await session.scalar(
            select(ProviderCall).where(ProviderCall.payment_id == payment.id)
        )
    assert call is not None
    assert call.provider_ref is not None
    assert call.provider_ref.startswith("re_")
    client = stripe.StripeClient(
        stripe_settings.stripe_secret_key.get_secret_value(),
        base_addresses={"api": localstripe.base},
    )
    refund = client.v1.refunds.retrieve(call.provider_ref)
    assert (refund.amount, refund.payment_intent, refund.status) == (
        payment.amount_minor,
        payment.stripe_payment_intent_id,
        "succeeded",
    )
    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result

    # A charge we know nothing of (made outside dealbroker) is a difference, and said.
    stray = client.v1.payment_intents.create(
        params={"amount": 12_300, "currency": "nok", "payment_method": "pm_card_visa"}
    )
    client.v1.payment_intents.confirm(stray.id)
    result = await reconcile(db_url, localstripe, since)
    assert result.returncode == 1, result
    assert result.stdout.splitlines() == [
        f"payment {stray.id}: missing here (NOK 123.00, succeeded)"
    ], result


async def test_a_carrier_deal_in_dispute_refunded_by_the_operator(
    sessionmaker, db_url, browser, localstripe, stripe_server, stripe_settings
):
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")
    await pay_by_card(browser, stripe_server.base, deal, THREE_D_SECURE, authenticate=True)
    await deal.wait_for("Paid")
    await deal.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await deal.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    await deal.fire(Trigger.BUYER_DENIED, Actor.BUYER)
    await deal.fire(Trigger.DISPUTE_REFUNDED, Actor.OPERATOR)

    payment = await deal.wait_for("Refunded", timeout=1)
    conserved(payment)
    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result


async def test_a_carrier_deal_returned_to_the_seller_is_refunded_through_stripe(
    sessionmaker, db_url, browser, localstripe, stripe_server, stripe_settings
):
    since = datetime.now(UTC) - timedelta(seconds=5)
    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")
    await pay_by_card(browser, stripe_server.base, deal, VISA)
    await deal.wait_for("Paid")
    await deal.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await deal.fire(Trigger.CARRIER_RETURNED, Actor.PROVIDER)

    payment = await deal.wait_for("Refunded", timeout=1)
    assert await deal.status() == "Refunded"
    conserved(payment)
    async with sessionmaker() as session:
        refund = await session.scalar(
            select(ProviderCall).where(ProviderCall.payment_id == payment.id)
        )
    assert refund is not None
    assert refund.provider_ref is not None
    assert refund.provider_ref.startswith("re_")
    result = await reconcile(db_url, localstripe, since)
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result


async def test_a_declined_card_fails_the_payment_and_the_buyer_may_pay_again(
    sessionmaker, browser, stripe_server, stripe_settings
):
    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")

    landed = await pay_by_card(browser, stripe_server.base, deal, DECLINED)

    assert "/pay/stripe/" in landed.url, landed  # the checkout says why, and stays
    assert "declined" in landed.said.lower(), landed
    # Failed at once, on Stripe's answer to our server, not later by the webhook: paying
    # again at once is a new payment with a new PaymentIntent, so the declined attempt's late
    # payment_failed event can never fail the one that succeeds.
    failed = await deal.payment()
    assert failed is not None
    assert failed.status == "PaymentFailed"
    assert await deal.status() == "Signed"
    await pay_by_card(browser, stripe_server.base, deal, VISA)
    paid = await deal.wait_for("Paid")
    assert paid.id != failed.id  # a new attempt is a new payment
    assert await deal.status() == "Shipping_Pending"


async def test_a_webhook_delivered_twice_is_applied_once_and_a_bad_signature_is_refused(
    sessionmaker, browser, localstripe, stripe_server, stripe_settings
):
    deal = await stripe_deal(sessionmaker, stripe_settings, "Pickup")
    await pay_by_card(browser, stripe_server.base, deal, VISA)
    payment = await deal.wait_for("Paid")
    events_before = await count_events(sessionmaker, deal)
    client = stripe.StripeClient(
        stripe_settings.stripe_secret_key.get_secret_value(),
        base_addresses={"api": localstripe.base},
    )
    succeeded = [e for e in client.v1.events.list().data if e.type == "payment_intent.succeeded"]
    assert len(succeeded) == 1
    body = httpx.get(
        f"{localstripe.base}/v1/events/{succeeded[0].id}",
        auth=(stripe_settings.stripe_secret_key.get_secret_value(), ""),
    ).content
    webhook = f"{stripe_server.base}/payments/v1/stripe/webhook"

    again = httpx.post(webhook, content=body, headers={"Stripe-Signature": signature(body)})

    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate"), again.text
    assert await count_events(sessionmaker, deal) == events_before
    assert (await deal.payment()).status == "Paid"  # type: ignore[union-attr]

    forged = httpx.post(
        webhook, content=body, headers={"Stripe-Signature": signature(body, secret="whsec_other")}
    )
    assert forged.status_code == 400, forged.text
    assert forged.headers["content-type"] == "application/problem+json"
    stale = httpx.post(
        webhook,
        content=body,
        headers={"Stripe-Signature": signature(body, at=int(time.time()) - 3600)},
    )
    assert stale.status_code == 400, stale.text  # a replay of an old delivery
    unsigned = httpx.post(webhook, content=body)
    assert unsigned.status_code == 400
    assert await count_events(sessionmaker, deal) == events_before
    assert payment.id == (await deal.payment()).id  # type: ignore[union-attr]


async def count_events(sessionmaker, deal: DealDriver) -> int:  # type: ignore[no-untyped-def]
    async with sessionmaker() as session:
        return int(
            await session.scalar(
                select(func.count()).select_from(Event).where(Event.deal_id == deal.deal_id)
            )
            or 0
        )


def test_the_checkout_allows_stripe_js_origin_on_its_page_only(stripe_server, localstripe):
    unknown = httpx.get(f"{stripe_server.base}/pay/stripe/{uuid.uuid4().hex}")
    assert unknown.status_code == 404
    home = httpx.get(f"{stripe_server.base}/")
    assert localstripe.base not in home.headers["content-security-policy"]
    assert "script-src" not in home.headers["content-security-policy"]
    # The simulated provider's test page does not exist beside Stripe, even in the sandbox.
    assert httpx.post(f"{stripe_server.base}/pay/{uuid.uuid4().hex}").status_code == 404


async def test_a_cancelled_payment_intent_cancels_the_payment(
    sessionmaker, localstripe, stripe_server, stripe_settings
):
    """localstripe cancels a PaymentIntent but sends no ``payment_intent.canceled``: the event
    is made here around the intent exactly as localstripe returns it, and signed."""
    deal = await stripe_deal(sessionmaker, stripe_settings, "Carrier")
    payment = await open_checkout(deal, stripe_server)
    client = stripe.StripeClient(
        stripe_settings.stripe_secret_key.get_secret_value(),
        base_addresses={"api": localstripe.base},
    )
    client.v1.payment_intents.cancel(payment.stripe_payment_intent_id)
    intent = httpx.get(
        f"{localstripe.base}/v1/payment_intents/{payment.stripe_payment_intent_id}",
        auth=(stripe_settings.stripe_secret_key.get_secret_value(), ""),
    ).json()
    assert intent["status"] == "canceled"
    body = json.dumps(
        {
            "id": f"evt_{uuid.uuid4().hex[:14]}",
            "object": "event",
            "type": "payment_intent.canceled",
            "created": int(time.time()),
            "data": {"object": intent},
        }
    ).encode()

    answer = httpx.post(
        f"{stripe_server.base}/payments/v1/stripe/webhook",
        content=body,
        headers={"Stripe-Signature": signature(body)},
    )

    assert (answer.status_code, answer.json()["outcome"]) == (200, "applied"), answer.text
    await deal.wait_for("PaymentCancelled", timeout=1)
    assert await deal.status() == "Signed"  # the buyer may pay again


async def test_a_pickup_deal_paid_by_card_and_paid_out_by_bank_file(
    sessionmaker, db_url, browser, localstripe, stripe_server, stripe_settings, tmp_path
):
    """The whole money path of production: the buyer pays with Stripe, the seller is paid by
    a credit transfer in the operator's bank file, the bank's report settles it, and both
    reconciliations find nothing to say."""
    since = datetime.now(UTC) - timedelta(seconds=5)
    rail = {name.removeprefix("DEALBROKER_").lower(): value for name, value in RAIL.items()}
    settings = stripe_settings.model_copy(update=rail)
    deal = await stripe_deal(sessionmaker, settings, "Pickup")
    await pay_by_card(browser, stripe_server.base, deal, VISA)
    await deal.wait_for("Paid")
    await deal.payout_account("86011117947")
    await deal.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    payment = await deal.wait_for("PendingPayOut", timeout=1)  # on its way: in the next file

    exported = await asyncio.to_thread(
        payouts, db_url, tmp_path, "export", "--out", str(tmp_path / "payouts.xml")
    )
    assert exported.returncode == 0, exported.stderr
    sent = read_file(tmp_path / "payouts.xml")
    (transfer,) = sent.transfers
    assert transfer.amount_minor == payment.amount_minor - payment.fee_minor
    assert (transfer.account, transfer.scheme) == ("86011117947", "BBAN")
    report = tmp_path / "report.xml"
    report.write_bytes(
        status_report(
            "BANK-REPORT-1", sent.message_id, [(transfer.end_to_end_id, "ACSC", None, None)]
        )
    )
    imported = await asyncio.to_thread(payouts, db_url, tmp_path, "import", str(report))
    assert imported.returncode == 0, imported.stderr
    payment = await deal.wait_for("PaidOut", timeout=5)
    conserved(payment)
    assert payment.paid_out_minor == transfer.amount_minor

    env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
    env.update({"DEALBROKER_DATABASE_URL": db_url, **localstripe.settings(), **RAIL})
    until = datetime.now(UTC) + timedelta(seconds=5)
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "dealbroker", "payments", "reconcile"]
        + ["--since", since.isoformat(), "--until", until.isoformat()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout.startswith("no differences")) == (0, True), result
