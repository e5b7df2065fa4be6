"""Who is told what, at the service level, on both databases: every lifecycle change writes its
messages to the right addresses, each with the reader's own link and, where one applies, the
deadline as an absolute date in the deployment's time zone."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from pydantic import ValidationError
from sqlalchemy import select

from dealbroker.auth.service import Principal
from dealbroker.core import clock
from dealbroker.core.links import Links
from dealbroker.core.security import hash_token, new_token
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import PaymentStatus
from dealbroker.deals import flows
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import DealTimer
from dealbroker.deals.tasks import fire_due_timers
from dealbroker.integrations.service import deployment_links
from dealbroker.notifications import messages
from dealbroker.notifications import service as notifications
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers import service as offers
from dealbroker.offers.models import OfferLink
from dealbroker.offers.schemas import OfferLinkCreate
from dealbroker.payments import service as payments
from dealbroker.signatures.service import SignatureType
from tests.conftest import make_settings
from tests.lifecycle_helpers import SELLER, SETTINGS, DealDriver, new_deal, run_provider_calls

START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)  # 13:00 in Oslo (winter time, UTC+1)
SELLER_EMAIL = SELLER["email"]
OLA, PER = "ola@example.com", "per@example.com"


@pytest.fixture
def ticking_clock() -> Iterator[list[datetime]]:
    """A clock that starts at ``START`` and ticks a microsecond per reading (so messages keep
    their order); ``ticking_clock[0] += ...`` moves it on."""
    now = [START]

    def read() -> datetime:
        now[0] += timedelta(microseconds=1)
        return now[0]

    clock.set_clock(read)
    yield now
    clock.reset_clock()


@pytest.fixture
async def links(sessionmaker, db_url) -> Links:
    async with sessionmaker() as session, session.begin():
        return await deployment_links(session, make_settings(db_url))


async def outbox(sessionmaker, deal_id: uuid.UUID) -> list[OutboxMessage]:
    async with sessionmaker() as session:
        return await notifications.of_deal(session, deal_id)


async def kinds_to(sessionmaker, deal_id: uuid.UUID) -> list[tuple[str, str]]:
    return [(m.kind, m.to_email) for m in await outbox(sessionmaker, deal_id)]


def one(messages: list[OutboxMessage], kind: str, to: str) -> OutboxMessage:
    found = [m for m in messages if m.kind == kind and m.to_email == to]
    assert len(found) == 1, [(m.kind, m.to_email) for m in messages]
    return found[0]


async def offer_on_link(
    d: DealDriver, links: Links, email: str, shipping: str = "Carrier", price: int = 450_000
) -> tuple[uuid.UUID, str]:
    """An offer link made through the service (as the API does), and an offer sent on it:
    ``(offer id, the buyer's link)``."""

    async def run(session, deal):  # type: ignore[no-untyped-def]
        principal = Principal(d.integration_id, frozenset({"deals:read", "deals:write"}))
        created = await offers.create_link(
            session, principal, deal.id, OfferLinkCreate(), links.offer_token
        )
        offer = await offers.submit(
            session,
            deal,
            price_minor=price,
            shipping_type=shipping,
            buyer_name="Ola",
            buyer_email=email,
            offer_link_id=created.link.id,
        )
        return offer.id, links.offer_url(created.token, created.link.id)

    return await d.step(run)


async def signed(sessionmaker, links: Links, shipping: str = "Carrier") -> tuple[DealDriver, str]:
    """A deal signed by both, the buyer ``OLA`` having offered on a link: ``(driver, buyer's
    link)``."""
    d = await new_deal(sessionmaker)
    offer_id, buyer_url = await offer_on_link(d, links, OLA, shipping)
    await d.approve(offer_id)
    await d.sign(SignatureType.SELLER, Actor.SELLER)
    await d.sign(SignatureType.BUYER, Actor.BUYER)
    return d, buyer_url


async def fire_timers(sessionmaker, now: list[datetime], seconds: int) -> None:
    """Let ``seconds`` pass, then fire what fell due, as the worker would."""
    now[0] += timedelta(seconds=seconds)
    await fire_due_timers(sessionmaker, SETTINGS)
    await run_provider_calls(sessionmaker)


async def test_offer_link_tokens_are_rebuilt_from_the_link_and_still_found_by_their_hash(
    sessionmaker, links
):
    d = await new_deal(sessionmaker)
    _, url = await offer_on_link(d, links, OLA)
    parts = urlsplit(url)
    token, reference = parts.path.rsplit("/", 1)[1], parse_qs(parts.query)["offer"][0]
    assert token == links.offer_token(uuid.UUID(reference))
    async with sessionmaker() as session:
        found = await offers.resolve(session, token, reference)
        assert found is not None
        assert found[0].token_hash == hash_token(token)  # only the hash is stored


async def test_offers_received_approved_and_declined(sessionmaker, links, ticking_clock):
    d = await new_deal(sessionmaker)
    ola_offer, ola_url = await offer_on_link(d, links, OLA, price=440_000)
    _, per_url = await offer_on_link(d, links, PER, price=430_000)
    kim_offer, _ = await offer_on_link(d, links, "kim@example.com", price=100_00)

    async def decline(session, deal):  # type: ignore[no-untyped-def]
        await offers.deny(session, deal, await offers.pending_offer(session, deal, kim_offer))

    await d.step(decline)
    await d.approve(ola_offer)

    messages = await outbox(sessionmaker, d.deal_id)
    assert [(m.kind, m.to_email) for m in messages] == [
        ("offer_received", SELLER_EMAIL),
        ("offer_received", SELLER_EMAIL),
        ("offer_received", SELLER_EMAIL),
        ("offer_declined", "kim@example.com"),
        ("offer_declined", PER),  # approving Ola's offer declines Per's
        ("offer_approved", OLA),
    ]
    received = messages[0]
    assert received.subject == "New offer on Bike"
    assert "Ola offers NOK\u00a04,400.00" in received.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in received.body
    declined = one(messages, "offer_declined", PER)
    assert declined.subject == "Your offer on Bike was declined"
    assert "NOK\u00a04,300.00" in declined.body
    assert f"Your offer page: {per_url}" in declined.body
    approved = one(messages, "offer_approved", OLA)
    assert approved.subject == "Your offer on Bike was approved"
    assert f"Your offer page: {ola_url}" in approved.body


@pytest.mark.parametrize(
    ("still_open", "says"),
    [(True, "Your deal still takes offers."), (False, "Your deal takes no more offers.")],
)
def test_a_withdrawn_offer_says_whether_the_deal_still_takes_offers(still_open, says):
    text = messages.offer_withdrawn("Bike", "Ola", "4400.00 NOK", still_open, "https://x/d/1")
    assert text.subject == "An offer on Bike was withdrawn"
    assert text.body.split("\n\n") == [
        "Ola withdrew their offer of 4400.00 NOK; it can no longer be approved.",
        says,
        "Your deal page: https://x/d/1",
    ]


@pytest.mark.parametrize(
    ("shipping", "seller_subject", "seller_says", "buyer_says"),
    [
        (
            "Carrier",
            "Bike is paid: send it by November 29, 2026, 1:00\u202fPM (Central European Time)",
            "Hand the item to the carrier by November 29, 2026, 1:00\u202fPM (Central European Time)",
            "The seller must hand the item to the carrier by "
            "November 29, 2026, 1:00\u202fPM (Central European Time)",
        ),
        (
            "Pickup",
            "Bike is paid: hand it over by November 29, 2026, 1:00\u202fPM (Central European Time)",
            "Meet the buyer and hand the item over by November 29, 2026, 1:00\u202fPM (Central European Time)",
            "Meet the seller and check the item by November 29, 2026, 1:00\u202fPM (Central European Time)",
        ),
    ],
)
async def test_payment_tells_the_seller_to_hand_over_by_the_deadline(
    sessionmaker, links, ticking_clock, shipping, seller_subject, seller_says, buyer_says
):
    d, buyer_url = await signed(sessionmaker, links, shipping)
    please_pay = one(await outbox(sessionmaker, d.deal_id), "please_pay", OLA)
    assert please_pay.subject == "Please pay for Bike"
    assert "Pay NOK\u00a04,500.00" in please_pay.body
    assert f"Your offer page: {buyer_url}" in please_pay.body

    await d.pay()
    messages = await outbox(sessionmaker, d.deal_id)
    to_seller = one(messages, "payment_received", SELLER_EMAIL)
    assert to_seller.subject == seller_subject
    assert seller_says in to_seller.body
    assert "The buyer has paid NOK\u00a04,500.00" in to_seller.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in to_seller.body
    to_buyer = one(messages, "payment_received", OLA)
    assert to_buyer.subject == "Payment received for Bike"
    assert buyer_says in to_buyer.body
    assert f"Your offer page: {buyer_url}" in to_buyer.body
    # The date in the messages is the moment the deadline fires.
    async with sessionmaker() as session:
        timer = await session.scalar(
            select(DealTimer).where(
                DealTimer.deal_id == d.deal_id, DealTimer.trigger.like("%_expired")
            )
        )
    assert timer.due_at.replace(second=0, microsecond=0) == datetime(
        2026, 11, 29, 12, 0, tzinfo=UTC
    )


async def test_shipping_arrival_and_completion(sessionmaker, links, ticking_clock):
    d, buyer_url = await signed(sessionmaker, links, "Carrier")
    await d.pay()
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    ticking_clock[0] += timedelta(days=2, hours=3, minutes=5)  # 24 November, 15:05 UTC
    await d.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    await fire_timers(sessionmaker, ticking_clock, 24 * 3600)  # the review period ends

    messages = await outbox(sessionmaker, d.deal_id)
    assert [(m.kind, m.to_email) for m in messages][-6:] == [
        ("item_shipped", OLA),
        ("item_shipped", SELLER_EMAIL),
        ("item_arrived", OLA),
        ("item_arrived", SELLER_EMAIL),
        ("deal_completed", OLA),
        ("deal_completed", SELLER_EMAIL),
    ]
    shipped = one(messages, "item_shipped", OLA)
    assert shipped.subject == "Bike is on its way"
    assert f"Your offer page: {buyer_url}" in shipped.body
    # Both learn the transit deadline: 14 days after the hand-over (22 November, 12:00 UTC).
    transit_due = "December 6, 2026, 1:00\u202fPM (Central European Time)"
    assert f"If it has not arrived by {transit_due}" in shipped.body
    seller_shipped = one(messages, "item_shipped", SELLER_EMAIL)
    assert seller_shipped.subject == "Bike is with the carrier"
    assert f"If the parcel has not arrived by {transit_due}" in seller_shipped.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in seller_shipped.body
    arrived = one(messages, "item_arrived", OLA)
    assert arrived.subject == "Bike has arrived"
    assert (
        "approve it on your offer page by November 25, 2026, 4:05\u202fPM (Central European Time)"
        in arrived.body
    )
    assert f"Your offer page: {buyer_url}" in arrived.body
    seller_arrived = one(messages, "item_arrived", SELLER_EMAIL)
    assert "until November 25, 2026, 4:05\u202fPM (Central European Time)" in seller_arrived.body
    completed = one(messages, "deal_completed", OLA)
    assert "review the item ended without a complaint" in completed.body
    assert f"Your offer page: {buyer_url}" in completed.body
    # No payout account yet: the seller must add one, on their page.
    to_seller = one(messages, "deal_completed", SELLER_EMAIL)
    assert "Add your payout account on your deal page" in to_seller.body
    assert "NOK\u00a04,275.00" in to_seller.body  # 4500 minus the 5 % fee
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in to_seller.body
    assert not [m for m in messages if m.kind == "payout_sent"]

    await d.payout_account()
    paid = one(await outbox(sessionmaker, d.deal_id), "payout_sent", SELLER_EMAIL)
    assert paid.subject == "You have been paid for Bike"
    assert "NOK\u00a04,275.00 is on its way" in paid.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in paid.body


async def test_completion_with_an_account_names_it(sessionmaker, links):
    d, _ = await signed(sessionmaker, links, "Pickup")
    await d.payout_account()
    await d.pay()
    await d.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    messages = await outbox(sessionmaker, d.deal_id)
    to_seller = one(messages, "deal_completed", SELLER_EMAIL)
    assert "The buyer approved the item." in to_seller.body
    assert "We pay NOK\u00a04,275.00 to your payout account ending 7947" in to_seller.body
    assert [m.kind for m in messages][-1] == "payout_sent"


async def test_cancel_tells_the_seller_and_every_buyer_with_a_pending_offer(sessionmaker, links):
    d = await new_deal(sessionmaker)
    _, ola_url = await offer_on_link(d, links, OLA)
    _, per_url = await offer_on_link(d, links, PER)
    await d.fire(Trigger.CANCEL, Actor.SELLER)
    messages = await outbox(sessionmaker, d.deal_id)
    cancelled = {m.to_email: m for m in messages if m.kind == "deal_cancelled"}
    assert set(cancelled) == {SELLER_EMAIL, OLA, PER}
    assert {m.subject for m in cancelled.values()} == {"Bike was cancelled"}
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in cancelled[SELLER_EMAIL].body
    assert f"Your offer page: {ola_url}" in cancelled[OLA].body
    assert f"Your offer page: {per_url}" in cancelled[PER].body
    assert "No money was taken" in cancelled[OLA].body
    assert not [m for m in messages if m.kind == "offer_declined"]  # one message, not two


async def test_cancel_tells_the_approved_buyer(sessionmaker, links):
    d, buyer_url = await signed(sessionmaker, links)
    await d.fire(Trigger.CANCEL, Actor.INTEGRATION)
    cancelled = [
        (m.to_email, m.body)
        for m in await outbox(sessionmaker, d.deal_id)
        if m.kind == "deal_cancelled"
    ]
    assert [to for to, _ in cancelled] == [SELLER_EMAIL, OLA]
    assert f"Your offer page: {buyer_url}" in cancelled[1][1]


@pytest.mark.parametrize(
    ("shipping", "to_buyer_why", "to_seller_why"),
    [
        (
            "Carrier",
            "The seller did not hand the item to the carrier in time.",
            "You did not hand the item to the carrier in time.",
        ),
        (
            "Pickup",
            "The item was not handed over and approved in time.",
            "The item was not handed over and approved in time.",
        ),
    ],
)
async def test_expiry_refunds_and_says_why(
    sessionmaker, links, ticking_clock, shipping, to_buyer_why, to_seller_why
):
    """Each party reads why in their own person: the seller is "you" in the seller's."""
    d, buyer_url = await signed(sessionmaker, links, shipping)
    await d.pay()
    await fire_timers(sessionmaker, ticking_clock, 7 * 24 * 3600)
    assert await d.status() == "Refunded"
    messages = await outbox(sessionmaker, d.deal_id)
    to_buyer = one(messages, "deal_refunded", OLA)
    assert to_buyer.subject == "Bike: your money is being returned"
    assert to_buyer_why in to_buyer.body
    assert "We are returning NOK\u00a04,500.00 to you" in to_buyer.body
    assert f"Your offer page: {buyer_url}" in to_buyer.body
    to_seller = one(messages, "deal_refunded", SELLER_EMAIL)
    assert to_seller.subject == "Bike: the buyer has been refunded"
    assert to_seller_why in to_seller.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in to_seller.body


async def test_returned_item_refunds_and_says_why(sessionmaker, links):
    d, _ = await signed(sessionmaker, links)
    await d.pay()
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await d.fire(Trigger.CARRIER_RETURNED, Actor.PROVIDER)
    messages = await outbox(sessionmaker, d.deal_id)
    assert "sent back to the seller" in one(messages, "deal_refunded", OLA).body
    assert "sent back to you" in one(messages, "deal_refunded", SELLER_EMAIL).body


@pytest.mark.parametrize("release", [True, False])
async def test_dispute_tells_both_what_happens_next_and_how_it_ended(sessionmaker, links, release):
    d, buyer_url = await signed(sessionmaker, links, "Pickup")
    await d.pay()
    await d.fire(Trigger.BUYER_DENIED, Actor.BUYER)
    messages = await outbox(sessionmaker, d.deal_id)
    to_buyer = one(messages, "deal_disputed", OLA)
    assert to_buyer.subject == "Bike: we are looking into the problem you reported"
    assert "We hold the money while we look into it" in to_buyer.body
    assert f"Your offer page: {buyer_url}" in to_buyer.body
    to_seller = one(messages, "deal_disputed", SELLER_EMAIL)
    assert to_seller.subject == "Bike: the buyer reported a problem"
    assert "released to the seller or with a full refund to the buyer" in to_seller.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in to_seller.body

    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session,
            d.deal_id,
            flows.DisputeOutcome.RELEASE if release else flows.DisputeOutcome.REFUND,
            SETTINGS,
        )
    messages = await outbox(sessionmaker, d.deal_id)
    if release:
        to_buyer, to_seller = (
            one(messages, "deal_completed", OLA).body,
            one(messages, "deal_completed", SELLER_EMAIL).body,
        )
        assert "the problem you reported and released the money to the seller" in to_buyer
        assert "the problem the buyer reported and released the money to you" in to_seller
    else:
        to_buyer, to_seller = (
            one(messages, "deal_refunded", OLA).body,
            one(messages, "deal_refunded", SELLER_EMAIL).body,
        )
        assert "the problem you reported and decided to refund you" in to_buyer
        assert "the problem the buyer reported and decided to refund the buyer" in to_seller


async def test_failed_payout_asks_the_seller_to_check_the_account(sessionmaker, links):
    d, _ = await signed(sessionmaker, links, "Pickup")
    await d.pay()
    await d.fire(Trigger.BUYER_APPROVED, Actor.BUYER)  # PendingPayOut: no account yet

    async def refuse(session, deal):  # type: ignore[no-untyped-def]
        payment = await payments.current(session, deal)
        await payments.move(session, deal, payment, PaymentStatus.PAYOUT_FAILED)

    await d.step(refuse)
    failed = one(await outbox(sessionmaker, d.deal_id), "payout_failed", SELLER_EMAIL)
    assert failed.subject == "We could not pay you for Bike"
    assert "NOK\u00a04,275.00" in failed.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in failed.body


async def test_payout_account_change_is_confirmed_by_a_date(sessionmaker, links, ticking_clock):
    d = await new_deal(sessionmaker)
    await d.payout_account("NO9386011117947")
    await d.payout_account("NO8330001234567")
    messages = await outbox(sessionmaker, d.deal_id)
    confirm = one(messages, "confirm_payout_account", SELLER_EMAIL)
    assert "confirm it by November 23, 2026, 1:00\u202fPM (Central European Time)" in confirm.body
    assert f": {links.deal_url(d.deal_id)}/payout-account/" in confirm.body
    changed = one(messages, "payout_account_changed", SELLER_EMAIL)
    assert "ending 4567" in changed.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in changed.body


async def test_a_link_issued_before_tokens_were_derived_is_not_invented(sessionmaker):
    """A link with a random token (issued before) still works, but its token was never stored:
    the buyer's messages then point to the link they were given instead of a wrong one."""
    d = await new_deal(sessionmaker)
    old_token = new_token()

    async def old_link_offer(session, deal):  # type: ignore[no-untyped-def]
        link = OfferLink(
            id=uuid.uuid4(),
            deal_id=deal.id,
            integration_id=deal.integration_id,
            token_hash=hash_token(old_token),
            price_minor=None,
            buyer_name=None,
            buyer_email=None,
            buyer_redirect_url=None,
            seller_redirect_url=None,
            created_at=clock.now(),
        )
        session.add(link)
        await session.flush()
        offer = await offers.submit(
            session,
            deal,
            price_minor=100_00,
            shipping_type="Pickup",
            buyer_name=None,
            buyer_email=OLA,
            offer_link_id=link.id,
        )
        return offer.id

    offer_id = await d.step(old_link_offer)
    await d.approve(offer_id)
    approved = one(await outbox(sessionmaker, d.deal_id), "offer_approved", OLA)
    assert "/o/" not in approved.body
    assert "Open the offer link you were given" in approved.body
    async with sessionmaker() as session:
        assert await offers.resolve(session, old_token, None) is not None


async def test_a_message_before_the_process_started_fails_loudly(sessionmaker, monkeypatch):
    d = await new_deal(sessionmaker)
    monkeypatch.setattr(notifications, "_process", None)
    with pytest.raises(RuntimeError, match="notifications.start"):
        await d.offer()


def test_time_zone_and_mail_settings_are_checked():
    assert Settings(database_url="sqlite://").time_zone == "Europe/Oslo"
    with pytest.raises(ValidationError, match="unknown time zone"):
        Settings(database_url="sqlite://", time_zone="Europe/Nowhere")
    with pytest.raises(ValidationError, match="MAIL_FROM"):
        Settings(database_url="sqlite://", smtp_host="127.0.0.1")
    on = Settings(database_url="sqlite://", smtp_host="mail", mail_from="deals@example.com")
    assert (on.sends_mail, on.smtp_port_in_use) == (True, 587)
    assert Settings(database_url="sqlite://").sends_mail is False
    secret = Settings(
        database_url="sqlite://",
        smtp_host="mail",
        mail_from="deals@example.com",
        smtp_password="hunter2-secret",
    )
    assert "hunter2-secret" not in repr(secret)


async def test_every_message_ends_with_the_person_to_ask(sessionmaker, links, ticking_clock):
    """Whoever reads a message can reach the operator's support: its contact closes each one,
    in the reader's language."""
    d, _ = await signed(sessionmaker, links)
    messages = await outbox(sessionmaker, d.deal_id)
    assert messages
    support_email, _phone = notifications._started().support
    for message in messages:
        last = message.body.rsplit("\n\n", 1)[-1]
        assert last == f"Questions about the deal or your money? Ask us: {support_email}.", (
            message.kind
        )
