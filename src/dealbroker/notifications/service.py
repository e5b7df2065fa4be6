"""Telling sellers and buyers what happened and what they must do, and by when.

Each function here decides who is told about one change, with the link to the reader's own page
(the seller's deal page, the buyer's offer page) and the deadline where one applies, and writes
the message to the outbox in the transaction of the change: a message is never sent for a
change that rolled back, and never lost for one that committed. The worker's outbox job
(``notifications.tasks``) sends them by e-mail after the commit; the sandbox mailbox shows them.
The words are in ``notifications.messages``.

Links need the deployment's base URL and signing key, which a process learns at its start:
``start`` is called once by every process kind (the app's lifespan, each CLI command and the
worker), and a message written before it fails loudly rather than without its link.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock, wakeup
from dealbroker.core.security import hash_token
from dealbroker.deals.lifecycle import DISPUTES, DealStatus, Trigger
from dealbroker.deals.models import Deal
from dealbroker.notifications import messages, repository
from dealbroker.notifications.messages import Text
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers import repository as offer_rows
from dealbroker.offers.models import Offer
from dealbroker.payments import repository as payment_rows
from dealbroker.web.links import Links


@dataclass(frozen=True)
class _Process:
    links: Links
    zone: ZoneInfo


_process: _Process | None = None


def start(links: Links, time_zone: str) -> None:
    """Give this process's messages the deployment's links and time zone."""
    global _process
    _process = _Process(links, ZoneInfo(time_zone))


def _started() -> _Process:
    if _process is None:
        raise RuntimeError("notifications.start() was not called in this process")
    return _process


async def _write(session: AsyncSession, deal: Deal, kind: str, to: str, text: Text) -> None:
    now = clock.now()
    repository.add(
        session,
        OutboxMessage(
            id=uuid.uuid4(),
            integration_id=deal.integration_id,
            deal_id=deal.id,
            kind=kind,
            to_email=to,
            subject=text.subject[:200],
            body=text.body,
            created_at=now,
            attempts=0,
            next_attempt_at=now,
        ),
    )
    await wakeup.mark(session)  # the outbox job starts on it as soon as this commits


# --- who the parties are, and where their pages are -------------------------------------------


def _title(deal: Deal) -> str:
    return messages.title(deal.name)


def _price(deal: Deal, minor: int | None = None) -> str:
    """``minor`` in the deal's currency; by default the deal's agreed price."""
    if minor is None:
        minor = deal.price_minor or 0
    return messages.amount(minor, deal.currency)


def _deadline(moment: datetime) -> str:
    return messages.when(moment, _started().zone)


def _seller(deal: Deal) -> tuple[str, str] | None:
    """The seller's address and deal page, if the deal has a seller to write to."""
    email = (deal.seller or {}).get("email")
    return None if not email else (email, _started().links.deal_url(deal.id))


async def _offer_page(session: AsyncSession, offer: Offer) -> str | None:
    """The buyer's offer page: the link the offer was made on, rebuilt from its id. None when
    the offer came without a link of ours, or on a link issued before tokens were derived (its
    random token was never stored, so it cannot be given again)."""
    if offer.offer_link_id is None:
        return None
    link = await offer_rows.link(session, offer.offer_link_id)
    if link is None:
        return None
    links = _started().links
    token = links.offer_token(link.id)
    return links.offer_url(token, link.id) if hash_token(token) == link.token_hash else None


async def _buyer(session: AsyncSession, deal: Deal) -> tuple[str, str | None] | None:
    """The approved buyer's address and offer page."""
    offer = await offer_rows.approved_offer(session, deal.id)
    return None if offer is None else (offer.buyer_email, await _offer_page(session, offer))


# --- offers -----------------------------------------------------------------------------------


async def offer_received(session: AsyncSession, deal: Deal, price_minor: int, buyer: str) -> None:
    if seller := _seller(deal):
        to, url = seller
        text = messages.offer_received(_title(deal), buyer, _price(deal, price_minor), url)
        await _write(session, deal, "offer_received", to, text)


async def offer_approved(session: AsyncSession, deal: Deal, offer: Offer) -> None:
    url = await _offer_page(session, offer)
    text = messages.offer_approved(_title(deal), _price(deal, offer.price_minor), url)
    await _write(session, deal, "offer_approved", offer.buyer_email, text)


async def offer_declined(session: AsyncSession, deal: Deal, offer: Offer) -> None:
    url = await _offer_page(session, offer)
    text = messages.offer_declined(_title(deal), _price(deal, offer.price_minor), url)
    await _write(session, deal, "offer_declined", offer.buyer_email, text)


async def offer_withdrawn(
    session: AsyncSession, deal: Deal, offer: Offer, still_open: bool
) -> None:
    """The buyer took back their pending ``offer``; ``still_open`` says whether the deal still
    takes offers."""
    if seller := _seller(deal):
        to, url = seller
        buyer = offer.buyer_name or offer.buyer_email
        price = _price(deal, offer.price_minor)
        text = messages.offer_withdrawn(_title(deal), buyer, price, still_open, url)
        await _write(session, deal, "offer_withdrawn", to, text)


# --- lifecycle changes ------------------------------------------------------------------------


async def deal_moved(
    session: AsyncSession,
    deal: Deal,
    source: DealStatus,
    trigger: Trigger,
    deadline: datetime | None,
) -> None:
    """Tell the parties about the transition ``deal`` just made from ``source`` by ``trigger``;
    ``deadline`` is when the deadline it set falls due, if it set one. Called by
    ``deals.flows`` for every transition, before its effects (pending offers are still
    pending then)."""
    status = DealStatus(deal.status)
    if status is DealStatus.SIGNED:
        await _please_pay(session, deal)
    elif status in (DealStatus.SHIPPING_PENDING, DealStatus.PICKUP_PENDING):
        assert deadline is not None, "a paid deal has a deadline to hand the item over"
        await _paid(session, deal, status is DealStatus.PICKUP_PENDING, deadline)
    elif status is DealStatus.SHIPPING_IN_PROGRESS:
        await _shipped(session, deal)
    elif status is DealStatus.SHIPPING_ARRIVED:
        assert deadline is not None, "an arrived item has a deadline to review it"
        await _arrived(session, deal, deadline)
    elif status is DealStatus.COMPLETED:
        await _completed(session, deal, trigger)
    elif status in DISPUTES:
        await _disputed(session, deal)
    elif status is DealStatus.REFUNDED:
        await _refunded(session, deal, source)
    elif status is DealStatus.CANCELLED:
        await _cancelled(session, deal)
    # Ad: the seller published it themselves. Expired and returned deals go on to Refunded in
    # the same transaction, whose message says why.


async def _please_pay(session: AsyncSession, deal: Deal) -> None:
    if buyer := await _buyer(session, deal):
        to, url = buyer
        await _write(
            session, deal, "please_pay", to, messages.please_pay(_title(deal), _price(deal), url)
        )


async def _paid(session: AsyncSession, deal: Deal, pickup: bool, deadline: datetime) -> None:
    by = _deadline(deadline)
    if seller := _seller(deal):
        to, url = seller
        text = messages.paid_seller(_title(deal), _price(deal), pickup, by, url)
        await _write(session, deal, "payment_received", to, text)
    if buyer := await _buyer(session, deal):
        to, buyer_url = buyer
        text = messages.paid_buyer(_title(deal), _price(deal), pickup, by, buyer_url)
        await _write(session, deal, "payment_received", to, text)


async def _shipped(session: AsyncSession, deal: Deal) -> None:
    if buyer := await _buyer(session, deal):
        to, url = buyer
        await _write(session, deal, "item_shipped", to, messages.item_shipped(_title(deal), url))


async def _arrived(session: AsyncSession, deal: Deal, deadline: datetime) -> None:
    by = _deadline(deadline)
    if buyer := await _buyer(session, deal):
        to, buyer_url = buyer
        text = messages.item_arrived_buyer(_title(deal), by, buyer_url)
        await _write(session, deal, "item_arrived", to, text)
    if seller := _seller(deal):
        to, url = seller
        await _write(
            session, deal, "item_arrived", to, messages.item_arrived_seller(_title(deal), by, url)
        )


async def _completed(session: AsyncSession, deal: Deal, trigger: Trigger) -> None:
    if buyer := await _buyer(session, deal):
        to, buyer_url = buyer
        text = messages.completed_buyer(_title(deal), trigger.value, buyer_url)
        await _write(session, deal, "deal_completed", to, text)
    if seller := _seller(deal):
        to, url = seller
        payment = await payment_rows.current(session, deal.id)
        payout = None if payment is None else _price(deal, payment.amount_minor - payment.fee_minor)
        account = await payment_rows.payout_account(session, deal.id)
        last4 = None if account is None else account.number[-4:]
        text = messages.completed_seller(_title(deal), trigger.value, payout, last4, url)
        await _write(session, deal, "deal_completed", to, text)


async def _disputed(session: AsyncSession, deal: Deal) -> None:
    if buyer := await _buyer(session, deal):
        to, buyer_url = buyer
        await _write(
            session, deal, "deal_disputed", to, messages.disputed_buyer(_title(deal), buyer_url)
        )
    if seller := _seller(deal):
        to, url = seller
        await _write(
            session, deal, "deal_disputed", to, messages.disputed_seller(_title(deal), url)
        )


async def _refunded(session: AsyncSession, deal: Deal, source: DealStatus) -> None:
    if buyer := await _buyer(session, deal):
        to, buyer_url = buyer
        payment = await payment_rows.current(session, deal.id)
        price = None if payment is None else _price(deal, payment.amount_minor)
        text = messages.refunded_buyer(_title(deal), source.value, price, buyer_url)
        await _write(session, deal, "deal_refunded", to, text)
    if seller := _seller(deal):
        to, url = seller
        text = messages.refunded_seller(_title(deal), source.value, url)
        await _write(session, deal, "deal_refunded", to, text)


async def _cancelled(session: AsyncSession, deal: Deal) -> None:
    """Everyone known on the deal: the seller, the approved buyer, and each buyer whose offer
    was still pending (their offers are declined by the cancel; this message says why)."""
    readers: dict[tuple[str, str | None], bool] = {}
    if seller := _seller(deal):
        readers[seller] = True
    if buyer := await _buyer(session, deal):
        readers.setdefault(buyer, False)
    for offer in await offer_rows.pending_offers(session, deal.id):
        readers.setdefault((offer.buyer_email, await _offer_page(session, offer)), False)
    for (to, url), is_seller in readers.items():
        await _write(
            session, deal, "deal_cancelled", to, messages.cancelled(_title(deal), url, is_seller)
        )


# --- payouts ----------------------------------------------------------------------------------


async def payout_sent(session: AsyncSession, deal: Deal, payout_minor: int) -> None:
    if seller := _seller(deal):
        to, url = seller
        text = messages.payout_sent(_title(deal), _price(deal, payout_minor), url)
        await _write(session, deal, "payout_sent", to, text)


async def payout_failed(session: AsyncSession, deal: Deal, payout_minor: int) -> None:
    if seller := _seller(deal):
        to, url = seller
        text = messages.payout_failed(_title(deal), _price(deal, payout_minor), url)
        await _write(session, deal, "payout_failed", to, text)


async def confirm_payout_account(
    session: AsyncSession, deal: Deal, last4: str, token: str, valid_for: timedelta
) -> None:
    """The link that confirms a change of the payout account (one use, ``valid_for``), to the
    seller's address only: holding the deal page's link is not enough to redirect money."""
    if seller := _seller(deal):
        to, _ = seller
        by = _deadline(clock.now() + valid_for)
        confirm_url = _started().links.payout_confirm_url(deal.id, token)
        text = messages.confirm_payout_account(_title(deal), last4, by, confirm_url)
        await _write(session, deal, "confirm_payout_account", to, text)


async def payout_account_changed(session: AsyncSession, deal: Deal, last4: str) -> None:
    if seller := _seller(deal):
        to, url = seller
        text = messages.payout_account_changed(_title(deal), last4, url)
        await _write(session, deal, "payout_account_changed", to, text)


class Party(StrEnum):
    SELLER = "seller"
    BUYER = "buyer"


# Whom each kind of message above is written for. A mailbox shows one party's kinds only: an
# offer's email is whatever the buyer typed, and a buyer who typed the seller's address must
# still not read the seller's messages, which name every buyer and offer. A kind missing here is
# shown to no one.
# Kinds written to both parties (each its own text) are in both sets; the recipient's address
# then tells them apart.
BOTH = frozenset(
    {
        "payment_received",
        "item_arrived",
        "deal_completed",
        "deal_cancelled",
        "deal_disputed",
        "deal_refunded",
    }
)
KINDS_FOR: dict[Party, frozenset[str]] = {
    Party.SELLER: BOTH
    | {
        "offer_received",
        "offer_withdrawn",
        "payout_sent",
        "payout_failed",
        "confirm_payout_account",
        "payout_account_changed",
    },
    Party.BUYER: BOTH | {"offer_approved", "offer_declined", "please_pay", "item_shipped"},
}


async def mailbox(
    session: AsyncSession, deal_id: uuid.UUID, party: Party, email: str
) -> list[OutboxMessage]:
    """What ``party`` of the deal was sent at ``email`` (compared case-insensitively), oldest
    first."""
    return await repository.sent_to(session, deal_id, sorted(KINDS_FOR[party]), email)


async def of_deal(session: AsyncSession, deal_id: uuid.UUID) -> list[OutboxMessage]:
    """Every message about one deal, oldest first, sent or not (for the operator and tests)."""
    return await repository.of_deal(session, deal_id)
