"""Deals paid through Stripe's checkout (localstripe, the emulator): the deal driver, the checkout
opened and paid as the buyer's browser would, and the money's checks."""

import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx

from dealbroker.auth.service import Principal
from dealbroker.core.settings import Settings
from dealbroker.deals import repository as deal_rows
from dealbroker.deals.lifecycle import Actor
from dealbroker.integrations.service import deployment_links
from dealbroker.offers import service as offers
from dealbroker.offers.schemas import OfferLinkCreate
from dealbroker.payments.models import Payment
from dealbroker.payments.tasks import make_pending_calls
from dealbroker.signatures.service import SignatureType
from tests.lifecycle_helpers import DealDriver, new_deal
from tests.payments.emulator import LocalStripe
from tests.processes import Server


@dataclass
class StripeDeal(DealDriver):
    """A deal whose refunds and payouts are made with the Stripe provider's settings, and
    whose buyer came through an offer link (so their page can be opened)."""

    settings: Settings = field(default=None)  # type: ignore[assignment]
    buyer_path: str = ""

    async def step(self, action, *args):  # type: ignore[no-untyped-def]
        try:
            async with self.sessionmaker() as session, session.begin():
                deal = await deal_rows.by_id_for_update(session, self.deal_id)
                return await action(session, deal, *args)
        finally:
            await make_pending_calls(self.sessionmaker, self.settings)

    async def to_signed_through_link(self, shipping: str) -> None:
        async with self.sessionmaker() as session, session.begin():
            links = await deployment_links(session, self.settings)  # the server's, from the db
            principal = Principal(self.integration_id, frozenset({"deals:write"}))
            created = await offers.create_link(
                session, principal, self.deal_id, OfferLinkCreate(), links.offer_token
            )
        link_id = created.link.id
        self.buyer_path = f"/o/{created.token}?offer={link_id}"

        async def offer(session, deal):  # type: ignore[no-untyped-def]
            return await offers.submit(
                session,
                deal,
                price_minor=450_000,
                shipping_type=shipping,
                buyer_name="Ola",
                buyer_email="ola@example.com",
                offer_link_id=link_id,
            )

        await self.approve((await self.step(offer)).id)
        await self.sign(SignatureType.SELLER, Actor.SELLER)
        await self.sign(SignatureType.BUYER, Actor.BUYER)

    async def wait_for(self, payment_status: str, timeout: float = 20) -> Payment:
        deadline = time.monotonic() + timeout
        while True:
            payment = await self.payment()
            if payment is not None and payment.status == payment_status:
                return payment
            if time.monotonic() > deadline:
                got = payment.status if payment else None
                raise AssertionError(f"payment is {got}, not {payment_status}")
            await asyncio.sleep(0.1)


async def stripe_deal(sessionmaker, settings: Settings, shipping: str) -> StripeDeal:  # type: ignore[no-untyped-def]
    plain = await new_deal(sessionmaker)
    deal = StripeDeal(plain.sessionmaker, plain.deal_id, plain.integration_id, settings)
    await deal.to_signed_through_link(shipping)
    return deal


async def reconcile(
    db_url: str, localstripe: LocalStripe, since: datetime
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
    env.update({"DEALBROKER_DATABASE_URL": db_url, **localstripe.settings()})
    until = datetime.now(UTC) + timedelta(seconds=5)
    args = ["payments", "reconcile", "--since", since.isoformat(), "--until", until.isoformat()]
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "dealbroker", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def conserved(payment: Payment) -> None:
    """Money in equals money out (amount = refunded + paid out + fee + shipping kept): a payout
    is the amount less fee and shipping, a refund the amount (less the shipping for a parcel
    the buyer did not collect)."""
    if payment.status == "PaidOut":
        kept = payment.fee_minor + payment.shipping_minor
        assert payment.paid_out_minor + kept == payment.amount_minor
        assert payment.refunded_minor == 0
    elif payment.status == "Refunded":
        kept = payment.shipping_minor if payment.refund_less_shipping else 0
        assert payment.refunded_minor + kept == payment.amount_minor
        assert payment.paid_out_minor == 0
    else:
        raise AssertionError(f"payment {payment.status} is neither paid out nor refunded")


async def open_checkout(deal: StripeDeal, server: Server) -> Payment:
    """The buyer presses Pay by card and the checkout page opens (without a browser: the page's
    form posted as it is): the payment and its PaymentIntent exist, no card yet."""
    with httpx.Client(base_url=server.base) as buyer:
        page = buyer.get(deal.buyer_path)
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        version = page.text.split('name="version" value="', 1)[1].split('"', 1)[0]
        path = deal.buyer_path.split("?")[0]
        paying = buyer.post(
            f"{path}/-/pay",
            data={"csrf": csrf, "version": version, "method": "card"},
            follow_redirects=True,
        )
    assert "/pay/stripe/" in str(paying.url), paying.text
    payment = await deal.wait_for("Created")
    assert payment.stripe_payment_intent_id is not None
    return payment
