"""The shipping price as money, end to end: quoted for a Carrier offer, carried to the deal,
fixed on the payment, and conserved on every way the money leaves escrow.

Who pays (``shipping_paid_by``): the buyer, on top of the price (amount = price + shipping), or
the seller, from the payout (amount = price). Always: payout = amount - fee - shipping, the fee
on the item price only. A refund is the whole amount, except for a parcel the buyer did not
collect (``Shipping_Returned``): amount - shipping. So amount = refunded + paid out + fee +
shipping kept on every path, checked here from the payment's own records and by the
reconciliation's check on our rows. On SQLite and PostgreSQL (the ``sessionmaker`` fixture).

The carrier is a small one of this file's (``registry.carrier_for`` replaced): the real
adapters have tests of their own."""

import json
import re
import uuid
from collections.abc import Mapping
from decimal import Decimal

import httpx
import pytest
from sqlalchemy import select

from dealbroker import parties, settlement
from dealbroker.app import create_app
from dealbroker.carriers import registry
from dealbroker.carriers.base import (
    Booking,
    BookingRequest,
    CarrierUnavailable,
    Delivery,
    PackageSize,
    ParcelEvent,
    Quote,
)
from dealbroker.core import money
from dealbroker.core.settings import Settings
from dealbroker.deals import flows
from dealbroker.deals import repository as deal_rows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.tasks import fire_due_timers
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers import service as offers
from dealbroker.offers.models import Offer
from dealbroker.parcels import quotes
from dealbroker.payments import reconciliation
from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment
from dealbroker.signatures.service import SignatureStatus, SignatureType, record
from tests.conftest import BASE_URL, SELLER, create_deal, make_caller, make_settings
from tests.lifecycle_helpers import SETTINGS, DealDriver, new_deal, run_provider_calls
from tests.web.pages import offer_link, path, submit

PRICE = 450_000  # minor units
SHIPPING = 14_950
FEE = PRICE * 5 // 100  # 5 % of the item price only
BUYER_PAYS = SETTINGS.model_copy(update={"shipping_paid_by": "buyer"})
SELLER_PAYS = SETTINGS.model_copy(update={"shipping_paid_by": "seller"})
OUTCOME = {True: flows.DisputeOutcome.RELEASE, False: flows.DisputeOutcome.REFUND}


class SmallCarrier:
    """A carrier that quotes two services for every size (the cheaper is the price), or fails
    as a carrier does when ``down``; it counts the quotes it was asked for."""

    name = "small"

    def __init__(self) -> None:
        self.down = False
        self.asked: list[tuple[PackageSize, str, str]] = []

    async def quote(
        self, size: PackageSize, from_postcode: str, to_postcode: str, country: str = "NO"
    ) -> list[Quote]:
        self.asked.append((size, from_postcode, to_postcode))
        if self.down:
            raise CarrierUnavailable("503 from the carrier")
        extra = {PackageSize.SMALL: 0, PackageSize.MEDIUM: 5000}.get(size, 10_000)
        return [
            Quote(self.name, "pickup", size, Delivery.PICKUP_POINT, 22_900 + extra, "NOK"),
            Quote(self.name, "locker", size, Delivery.PARCEL_LOCKER, 9_950 + extra, "NOK"),
        ]

    async def book(self, request: BookingRequest) -> Booking:
        raise NotImplementedError

    async def cancel(self, shipment_id: str) -> None:
        raise NotImplementedError

    async def book_return(self, request: BookingRequest) -> Booking:
        raise NotImplementedError

    async def track(self, tracking_number: str) -> list[ParcelEvent]:
        return []

    def read_push(self, headers: Mapping[str, str], body: bytes) -> list[ParcelEvent]:
        return []


@pytest.fixture
def carrier(monkeypatch: pytest.MonkeyPatch) -> SmallCarrier:
    """The deployment's carrier is ``SmallCarrier`` (with ``carrier`` set to other than none)."""
    small = SmallCarrier()
    quotes.forget()
    monkeypatch.setattr(
        registry, "carrier_for", lambda settings: None if settings.carrier == "none" else small
    )
    yield small
    quotes.forget()


# --- the arithmetic -------------------------------------------------------------------------


def test_the_buyer_pays_the_shipping_on_top_and_the_seller_is_paid_the_price_less_the_fee():
    fixed = money.Escrowed.for_price(PRICE, SHIPPING, "buyer", Decimal(5), Decimal(0))
    assert (fixed.amount, fixed.fee, fixed.shipping) == (PRICE + SHIPPING, FEE, SHIPPING)
    assert fixed.payout == PRICE - FEE
    assert fixed.refund(False) == PRICE + SHIPPING
    assert fixed.refund(True) == PRICE


def test_the_seller_pays_the_shipping_from_the_payout():
    fixed = money.Escrowed.for_price(PRICE, SHIPPING, "seller", Decimal(5), Decimal(0))
    assert (fixed.amount, fixed.fee, fixed.shipping) == (PRICE, FEE, SHIPPING)
    assert fixed.payout == PRICE - FEE - SHIPPING
    assert fixed.refund(False) == PRICE
    assert fixed.refund(True) == PRICE - SHIPPING


def test_without_a_shipping_price_nothing_changes():
    for paid_by in ("buyer", "seller"):
        fixed = money.Escrowed.for_price(PRICE, None, paid_by, Decimal(5), Decimal(0))
        assert (fixed.amount, fixed.fee, fixed.shipping) == (PRICE, FEE, 0)
        assert fixed.payout == PRICE - FEE
        assert fixed.refund(True) == fixed.refund(False) == PRICE


def test_a_payout_is_never_negative():
    """A seller who pays more shipping than their price holds: the fee gives way, then the
    service bears the rest; the money still adds up."""
    fixed = money.Escrowed.for_price(10_000, 14_950, "seller", Decimal(5), Decimal(0))
    assert (fixed.amount, fixed.fee, fixed.shipping, fixed.payout) == (10_000, 0, 10_000, 0)
    fixed = money.Escrowed.for_price(20_000, 14_950, "seller", Decimal(5), Decimal(100))
    assert (fixed.fee, fixed.payout) == (5_050, 0)
    assert fixed.amount == fixed.fee + fixed.shipping + fixed.payout


# --- deals driven through the real services -------------------------------------------------


async def _carrier_deal(sessionmaker, settings: Settings, shipping: int | None = SHIPPING):
    """A deal whose buyer offered Carrier with ``shipping`` quoted, approved, signed and paid
    under ``settings``."""
    d = await new_deal(sessionmaker)

    async def offer(session, deal):
        made = await offers.submit(
            session,
            deal,
            price_minor=PRICE,
            shipping_type="Carrier",
            buyer_name="Ola",
            buyer_email=f"ola-{uuid.uuid4().hex[:6]}@example.com",
            shipping_minor=shipping,
        )
        return made.id

    offer_id = await d.step(offer)
    await d.approve(offer_id)
    for party, actor in ((SignatureType.SELLER, Actor.SELLER), (SignatureType.BUYER, Actor.BUYER)):
        await d.step(
            lambda s, deal, p=party, a=actor: record(
                s, deal, p, SignatureStatus.COMPLETED, a, settings
            )
        )
    await d.step(lambda s, deal: payments.start(s, deal, settings))
    await d.step(lambda s, deal: settlement.settle_payment(s, deal, "succeeded", settings))
    assert await d.status() == "Shipping_Pending"
    return d


async def _payment(d: DealDriver) -> Payment:
    payment = await d.payment()
    assert payment is not None
    return payment


async def _conserved(d: DealDriver) -> Payment:
    """amount = refunded + paid out + fee + shipping kept, by the payment's own records, and
    the reconciliation's check of our rows finds nothing."""
    p = await _payment(d)
    if p.status == "PaidOut":
        kept_fee, kept_shipping = p.fee_minor, p.shipping_minor
        assert p.refunded_minor == 0
    else:
        assert p.status == "Refunded"
        assert p.paid_out_minor == 0
        kept_fee, kept_shipping = 0, p.amount_minor - p.refunded_minor
        assert kept_shipping in (0, p.shipping_minor)
    assert p.amount_minor == p.refunded_minor + p.paid_out_minor + kept_fee + kept_shipping
    assert reconciliation._conservation([p]) == []
    return p


async def _messages(d: DealDriver, kind: str) -> list[str]:
    async with d.sessionmaker() as session:
        return list(
            await session.scalars(
                select(OutboxMessage.body).where(
                    OutboxMessage.deal_id == d.deal_id, OutboxMessage.kind == kind
                )
            )
        )


@pytest.mark.parametrize("settings", [BUYER_PAYS, SELLER_PAYS], ids=["buyer", "seller"])
async def test_the_payment_fixes_amount_fee_and_shipping(sessionmaker, settings):
    d = await _carrier_deal(sessionmaker, settings)
    deal = await d.deal()
    assert (deal.price_minor, deal.shipping_minor) == (PRICE, SHIPPING)
    p = await _payment(d)
    buyer = settings.shipping_paid_by == "buyer"
    assert p.amount_minor == (PRICE + SHIPPING if buyer else PRICE)
    assert (p.fee_minor, p.shipping_minor) == (FEE, SHIPPING)
    assert p.payout_minor == p.amount_minor - FEE - SHIPPING
    # The payment's event names the amount the buyer paid; the receipt names the shipping.
    paid = await _messages(d, "payment_received")  # the seller's, and the buyer's receipt
    assert len(paid) == 2
    assert all("149.50" in body for body in paid)


@pytest.mark.parametrize("settings", [BUYER_PAYS, SELLER_PAYS], ids=["buyer", "seller"])
async def test_a_completed_deal_pays_out_the_amount_less_fee_and_shipping(sessionmaker, settings):
    d = await _carrier_deal(sessionmaker, settings)
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await d.fire(Trigger.CARRIER_DELIVERED, Actor.BUYER)
    await d.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    await d.payout_account()
    p = await _conserved(d)
    assert (await d.status(), p.status) == ("Completed", "PaidOut")
    assert p.paid_out_minor == p.amount_minor - FEE - SHIPPING
    if settings.shipping_paid_by == "seller":
        assert p.paid_out_minor == PRICE - FEE - SHIPPING


@pytest.mark.parametrize("settings", [BUYER_PAYS, SELLER_PAYS], ids=["buyer", "seller"])
async def test_a_returned_parcel_refunds_the_amount_less_the_shipping(sessionmaker, settings):
    d = await _carrier_deal(sessionmaker, settings)
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await d.fire(Trigger.CARRIER_RETURNED, Actor.PROVIDER)
    p = await _conserved(d)
    assert (await d.status(), p.status) == ("Refunded", "Refunded")
    assert p.refund_less_shipping
    assert p.refunded_minor == p.amount_minor - SHIPPING
    told = await _messages(d, "deal_refunded")  # both parties: the shipping is not refunded
    assert len(told) == 2
    assert all("not refunded" in body for body in told)


async def test_an_expired_deal_refunds_the_whole_amount_shipping_included(sessionmaker):
    d = await _carrier_deal(sessionmaker, BUYER_PAYS)
    async with sessionmaker() as session, session.begin():
        await flows.advance_clock(session, d.integration_id, 8 * 86400)
    await fire_due_timers(sessionmaker, SETTINGS)
    await run_provider_calls(sessionmaker)
    p = await _conserved(d)
    assert (await d.status(), p.status) == ("Refunded", "Refunded")
    assert not p.refund_less_shipping
    assert p.refunded_minor == PRICE + SHIPPING
    told = await _messages(d, "deal_refunded")
    assert any("the whole amount with the shipping" in body for body in told)


@pytest.mark.parametrize("release", [False, True], ids=["refund", "release"])
async def test_a_dispute_decided_either_way_conserves_the_money(sessionmaker, release):
    d = await _carrier_deal(sessionmaker, BUYER_PAYS)
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await d.fire(Trigger.BUYER_NOT_RECEIVED, Actor.BUYER)
    assert await d.status() == "Shipping_Review_Denied"
    await d.step(lambda s, deal: flows.resolve_dispute(s, deal.id, OUTCOME[release], SETTINGS))
    await run_provider_calls(sessionmaker)
    if release:
        await d.payout_account()
    p = await _conserved(d)
    if release:
        assert p.paid_out_minor == PRICE - FEE
    else:
        # Decided for the buyer (lost, damaged): the whole amount, shipping included.
        assert p.refunded_minor == PRICE + SHIPPING


async def test_a_lapsed_approval_clears_the_shipping_price(sessionmaker):
    d = await new_deal(sessionmaker)

    async def offer(session, deal):
        made = await offers.submit(
            session,
            deal,
            price_minor=PRICE,
            shipping_type="Carrier",
            buyer_name="Ola",
            buyer_email="ola@example.com",
            shipping_minor=SHIPPING,
        )
        return made.id

    await d.approve(await d.step(offer))
    assert (await d.deal()).shipping_minor == SHIPPING
    async with sessionmaker() as session, session.begin():
        await flows.advance_clock(
            session, d.integration_id, SETTINGS.approval_deadline_hours * 3600 + 1
        )
    await fire_due_timers(sessionmaker, SETTINGS)
    deal = await d.deal()
    assert deal.status in ("Draft", "Ad")  # it takes offers again
    assert (deal.shipping_minor, deal.price_minor) == (None, 450_000)


async def test_a_pickup_offer_carries_no_shipping_price(sessionmaker):
    d = await new_deal(sessionmaker)

    async def offer(session, deal):
        made = await offers.submit(
            session,
            deal,
            price_minor=PRICE,
            shipping_type="Pickup",
            buyer_name="Ola",
            buyer_email="ola@example.com",
            shipping_minor=SHIPPING,
        )
        return made.id

    await d.approve(await d.step(offer))
    assert (await d.deal()).shipping_minor is None


# --- the quote ------------------------------------------------------------------------------


async def test_the_quote_is_the_cheapest_for_the_size_and_is_kept_ten_minutes(carrier):
    settings = SETTINGS.model_copy(update={"carrier": "simulated"})
    quote = await quotes.shipping_quote(settings, "Large", "0155")
    assert quote is not None
    assert (quote.price_minor, quote.service) == (19_950, "locker")
    again = await quotes.shipping_quote(settings, "Large", "0155")
    assert again == quote
    assert len(carrier.asked) == 1
    medium = await quotes.shipping_quote(settings, None, "0155")  # no packageType: Medium
    assert medium is not None
    assert medium.size is PackageSize.MEDIUM
    assert carrier.asked[-1] == (PackageSize.MEDIUM, "0155", "0155")


async def test_without_a_carrier_there_is_no_quote(carrier):
    assert await quotes.shipping_quote(SETTINGS, "Large", "0155") is None
    assert carrier.asked == []


async def test_a_carrier_that_cannot_quote_leaves_only_pickup(sessionmaker, carrier):
    settings = SETTINGS.model_copy(update={"carrier": "simulated"})
    carrier.down = True
    d = await new_deal(sessionmaker)
    deal = await d.deal()
    deal.seller = {**SELLER, "postcode": "0155"}
    shipping = await parties.carrier_shipping(settings, deal)
    assert shipping is not None
    assert shipping.price_minor is None
    with pytest.raises(Exception, match="not available"):
        await parties.offer_shipping(settings, deal, "Carrier")
    assert await parties.offer_shipping(settings, deal, "Pickup") is None
    # Without a carrier, as before: no price, and no refusal.
    assert await parties.carrier_shipping(SETTINGS, deal) is None


# --- the buyer's page, the offer and the deal resource ---------------------------------------


@pytest.fixture
async def carrier_client(db_url, engine, carrier):
    application = create_app(make_settings(db_url, carrier="simulated"), engine)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
            yield c


async def test_the_offer_carries_the_quote_to_the_deal_and_its_resource(
    carrier_client, sessionmaker
):
    client = carrier_client
    caller = await make_caller(client, sessionmaker)
    deal = await create_deal(client, caller, price=4500, packageType="Small")
    buyer = await offer_link(client, caller, deal)
    page = (await client.get(buyer)).text
    # Before offering: the Carrier option's price, and who pays it.
    assert "data-shipping-price=" in page
    assert "99.50" in page.replace("\xa0", " ")
    response = await submit(
        client, buyer, "offer", price="4500", shippingType="Carrier", email="b@example.com"
    )
    assert response.status_code in (200, 303), response.text
    async with sessionmaker() as session:
        offer = await session.scalar(select(Offer).where(Offer.deal_id == uuid.UUID(deal["id"])))
    assert offer is not None
    assert offer.shipping_minor == 9_950
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    assert (got["shippingPrice"], got["shippingPaidBy"]) == (None, None)  # not approved yet
    # The seller sees the offer's shipping price before approving it.
    offered = (await client.get(path(deal["url"]))).text.replace("\xa0", " ")
    assert re.search(r"data-offer-shipping>\(shipping [^)]*99\.50\)", offered), offered
    async with sessionmaker() as session, session.begin():
        row = await deal_rows.by_id_for_update(session, uuid.UUID(deal["id"]))
        pending = await offers.pending_offer(session, row, offer.id)
        await offers.approve(session, row, pending, SETTINGS)
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    assert (got["shippingPrice"], got["shippingPaidBy"]) == (99.5, "buyer")
    listed = (await client.get("/deals/v1/deals", headers=caller.headers)).json()
    assert [d["shippingPrice"] for d in listed["items"]] == [99.5]
    # Both pages: price, shipping, who pays, fee and payout (5 % of 4500 is 225).
    seller_page = (await client.get(path(deal["url"]))).text.replace("\xa0", " ")
    assert 'data-shipping="buyer"' in seller_page
    assert "paid by the buyer on top of the price" in seller_page
    assert re.search(r"data-payout>[^<]*4,275\.00", seller_page), seller_page
    buyer_page = (await client.get(buyer)).text.replace("\xa0", " ")
    assert 'data-shipping="buyer"' in buyer_page
    assert re.search(r"data-total>[^<]*4,599\.50", buyer_page), buyer_page
    assert re.search(r"data-payout>[^<]*4,275\.00", buyer_page), buyer_page


async def test_without_a_carrier_the_offer_and_the_resource_are_as_before(client, caller):
    deal = await create_deal(client, caller, price=4500)
    buyer = await offer_link(client, caller, deal)
    page = (await client.get(buyer)).text
    assert "data-shipping-price" not in page
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    assert (got["shippingPrice"], got["shippingPaidBy"]) == (None, None)
    assert json.dumps(got).count("shipping") == 2  # the two fields, and nothing else
