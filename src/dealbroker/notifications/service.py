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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock, i18n, money, wakeup
from dealbroker.core.links import Links
from dealbroker.core.security import hash_token
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle
from dealbroker.deals import repository as deal_rows
from dealbroker.deals.lifecycle import DISPUTES, LOST_REASON, Trigger
from dealbroker.deals.models import Deal
from dealbroker.notifications import messages, repository
from dealbroker.notifications.messages import Text
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers import repository as offer_rows
from dealbroker.offers.models import Offer, OfferLink
from dealbroker.payments import repository as payment_rows


@dataclass(frozen=True)
class _Process:
    links: Links
    zone: ZoneInfo
    default_locale: str
    support: tuple[str, str]
    shipping_paid_by: str


_process: _Process | None = None


def start(
    links: Links,
    time_zone: str,
    default_locale: str,
    support: tuple[str, str],
    shipping_paid_by: str = "buyer",
) -> None:
    """Give this process's messages the deployment's links, time zone, default locale (for a
    reader whose language we have not learnt), support contact (e-mail, phone), which
    closes every message, and who pays the shipping (``Settings.shipping_paid_by``)."""
    global _process
    _process = _Process(links, ZoneInfo(time_zone), default_locale, support, shipping_paid_by)


def _started() -> _Process:
    if _process is None:
        raise RuntimeError("notifications.start() was not called in this process")
    return _process


@dataclass(frozen=True)
class Reader:
    """Whom a message is for: their address, their own page (None when we cannot link it) and
    the language they read."""

    to: str
    url: str | None
    locale: str


async def _tell(
    session: AsyncSession, deal: Deal, kind: str, reader: Reader, words: Callable[[], Text]
) -> None:
    """Write the message that ``words`` makes, worded in the reader's language."""
    with i18n.using(reader.locale):
        text = messages.with_support(words(), *_started().support)
    await _write(session, deal, kind, reader.to, text)


async def _write(session: AsyncSession, deal: Deal, kind: str, to: str, text: Text) -> None:
    await _write_message(session, deal.integration_id, deal.id, kind, to, text)


async def _write_message(
    session: AsyncSession,
    integration_id: uuid.UUID,
    deal_id: uuid.UUID | None,
    kind: str,
    to: str,
    text: Text,
) -> None:
    now = clock.now()
    repository.add(
        session,
        OutboxMessage(
            id=uuid.uuid4(),
            integration_id=integration_id,
            deal_id=deal_id,
            kind=kind,
            to_email=to,
            subject=text.subject[:200],
            body=text.body,
            created_at=now,
            attempts=0,
            next_attempt_at=now,
        ),
    )
    await wakeup.mark(session, wakeup.MAIL)  # the outbox job starts on it as soon as this commits


async def _tell_both(
    session: AsyncSession,
    deal: Deal,
    kind: str,
    to_buyer: Callable[[Reader], Text],
    to_seller: Callable[[Reader], Text],
) -> None:
    """Tell the deal's buyer, then its seller, of one change (``kind``), each in the words
    ``to_buyer`` or ``to_seller`` makes for them; a party we cannot write to is left out."""
    if buyer := await _buyer(session, deal):
        await _tell(session, deal, kind, buyer, lambda: to_buyer(buyer))
    await _tell_seller(session, deal, kind, to_seller)


async def _tell_seller(
    session: AsyncSession, deal: Deal, kind: str, to_seller: Callable[[Reader], Text]
) -> None:
    """Tell the deal's seller of one change (``kind``) in the words ``to_seller`` makes for
    them, if the deal has a seller to write to."""
    if seller := _seller(deal):
        await _tell(session, deal, kind, seller, lambda: to_seller(seller))


# --- who the parties are, and where their pages are -------------------------------------------


async def _tell_seller_of_money(
    session: AsyncSession,
    deal: Deal,
    kind: str,
    words: Callable[[str, str, str], Text],
    amount_minor: int,
) -> None:
    """Tell the seller of an amount of the deal (``amount_minor``) in the words ``words`` makes
    of the deal's title, the amount and the seller's link."""
    await _tell_seller(
        session,
        deal,
        kind,
        lambda seller: words(_title(deal), _price(deal, amount_minor), seller.url or ""),
    )


def _title(deal: Deal) -> str:
    return messages.title(deal.name)


def _price(deal: Deal, minor: int | None = None) -> str:
    """``minor`` in the deal's currency; by default the deal's agreed price."""
    if minor is None:
        minor = deal.price_minor or 0
    return messages.amount(minor, deal.currency)


def _shipping(deal: Deal, seller: bool) -> str:
    """What the deal's parcel costs and who pays it, for the party told; "" without a shipping
    price."""
    if not deal.shipping_minor:
        return ""
    shipping = _price(deal, deal.shipping_minor)
    return messages.shipping_note(shipping, _started().shipping_paid_by, seller)


def _to_pay(deal: Deal) -> int:
    """What the buyer pays for the deal: the price, with the shipping when the buyer pays it."""
    paid_by = _started().shipping_paid_by
    return money.Escrowed.charged(deal.price_minor or 0, deal.shipping_minor, paid_by)


def _deadline(moment: datetime) -> str:
    return messages.when(moment, _started().zone)


def _locale(learnt: str | None) -> str:
    return learnt or _started().default_locale


def _seller(deal: Deal) -> Reader | None:
    """The seller, if the deal has a seller to write to."""
    email = (deal.seller or {}).get("email")
    if not email:
        return None
    return Reader(email, _started().links.deal_url(deal.id), _locale(deal.seller_locale))


async def _offer_page(session: AsyncSession, offer: Offer) -> str | None:
    """The buyer's offer page: the link the offer was made on, rebuilt from its id. None when
    the offer came without a link of ours, or on a link issued before tokens were derived (its
    random token was never stored, so it cannot be given again)."""
    if offer.offer_link_id is None:
        return None
    link = await offer_rows.link(session, offer.offer_link_id)
    return None if link is None else _link_page(link)


def _link_page(link: OfferLink) -> str | None:
    """The page of an offer link, rebuilt from its id (None for a link issued before tokens
    were derived)."""
    links = _started().links
    token = links.offer_token(link.id)
    return links.offer_url(token, link.id) if hash_token(token) == link.token_hash else None


async def _offerer(session: AsyncSession, offer: Offer) -> Reader:
    """The buyer who made ``offer``."""
    return Reader(offer.buyer_email, await _offer_page(session, offer), _locale(offer.locale))


async def _link_holder(
    session: AsyncSession, link_id: uuid.UUID, locale: str | None = None
) -> Reader | None:
    """Whoever holds an offer link: the buyer of its latest offer, or, before an offer, the
    address the integration gave with the link (None without one: we cannot write to them), in
    ``locale`` where we learnt it (the page they wrote on)."""
    made = await offer_rows.offers_from_link(session, link_id)
    if made:
        return await _offerer(session, made[0])
    link = await offer_rows.link(session, link_id)
    if link is None or not link.buyer_email:
        return None
    return Reader(link.buyer_email, _link_page(link), _locale(locale))


async def _buyer(session: AsyncSession, deal: Deal) -> Reader | None:
    """The approved buyer."""
    offer = await offer_rows.approved_offer(session, deal.id)
    return None if offer is None else await _offerer(session, offer)


async def _lapsed_buyer(session: AsyncSession, deal: Deal) -> Reader | None:
    """Every deal ends: the buyer whose approval lapsed last, if any."""
    lapsed = [o for o in await offer_rows.offers_of(session, deal.id) if o.status == "Lapsed"]
    if not lapsed:
        return None
    latest = max(lapsed, key=lambda o: o.decided_at or o.created_at)
    return await _offerer(session, latest)


# --- offers ---------------------------------------------------------------------------------


async def offer_received(session: AsyncSession, deal: Deal, price_minor: int, buyer: str) -> None:
    """The seller has an offer to decide, and maybe buyers' questions to answer first."""
    waiting = await _waiting(session, deal, Party.SELLER)
    await _tell_seller(
        session,
        deal,
        "offer_received",
        lambda seller: messages.with_waiting(
            messages.offer_received(
                _title(deal), buyer, _price(deal, price_minor), seller.url or ""
            ),
            waiting,
            True,
        ),
    )


async def offer_approved(session: AsyncSession, deal: Deal, offer: Offer, due: datetime) -> None:
    """``offer``'s buyer may sign and pay, by ``due`` (then the approval lapses)."""
    buyer = await _offerer(session, offer)
    await _tell(
        session,
        deal,
        "offer_approved",
        buyer,
        lambda: messages.offer_approved(
            _title(deal), _price(deal, offer.price_minor), _deadline(due), buyer.url
        ),
    )


async def offer_declined(session: AsyncSession, deal: Deal, offer: Offer) -> None:
    buyer = await _offerer(session, offer)
    await _tell(
        session,
        deal,
        "offer_declined",
        buyer,
        lambda: messages.offer_declined(_title(deal), _price(deal, offer.price_minor), buyer.url),
    )


async def offer_withdrawn(
    session: AsyncSession, deal: Deal, offer: Offer, still_open: bool
) -> None:
    """The buyer took back their pending ``offer``; ``still_open`` says whether the deal still
    takes offers."""
    if seller := _seller(deal):
        buyer = offer.buyer_name or offer.buyer_email
        await _tell(
            session,
            deal,
            "offer_withdrawn",
            seller,
            lambda: messages.offer_withdrawn(
                _title(deal), buyer, _price(deal, offer.price_minor), still_open, seller.url or ""
            ),
        )


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
    if trigger is Trigger.RETURN_REQUESTED:
        assert deadline is not None, "a return has a deadline to send the item back"
        await _return_requested(session, deal, deadline)
    elif trigger is Trigger.RETURN_SENT:
        assert deadline is not None, "an item sent back has a deadline to confirm its receipt"
        await _return_sent(session, deal, deadline)
    elif status is DealStatus.SIGNED:
        await _please_pay(session, deal)
    elif status in (DealStatus.SHIPPING_PENDING, DealStatus.PICKUP_PENDING):
        assert deadline is not None, "a paid deal has a deadline to hand the item over"
        await _paid(session, deal, status is DealStatus.PICKUP_PENDING, deadline)
    elif status is DealStatus.SHIPPING_IN_PROGRESS:
        await _shipped(session, deal, deadline)
    elif status is DealStatus.SHIPPING_ARRIVED:
        assert deadline is not None, "an arrived item has a deadline to review it"
        await _arrived(session, deal, deadline)
    elif status is DealStatus.COMPLETED:
        await _completed(session, deal, trigger)
    elif status in DISPUTES and deal.dispute_reason == LOST_REASON:
        await _lost(session, deal)
    elif status in DISPUTES and trigger in NOT_RECEIVED:
        await _not_received(session, deal, trigger is Trigger.TRANSIT_EXPIRED)
    elif status in DISPUTES:
        await _disputed(session, deal, trigger)
    elif status is DealStatus.REFUNDED:
        await _refunded(session, deal, source, trigger)
    elif status is DealStatus.CANCELLED:
        await _cancelled(session, deal)
    # Ad: the seller published it themselves. Expired and returned deals go on to Refunded in
    # the same transaction, whose message says why.


async def _please_pay(session: AsyncSession, deal: Deal) -> None:
    if buyer := await _buyer(session, deal):
        await _tell(
            session,
            deal,
            "please_pay",
            buyer,
            lambda: messages.please_pay(
                _title(deal), _price(deal, _to_pay(deal)), buyer.url, _shipping(deal, False)
            ),
        )


async def _paid(session: AsyncSession, deal: Deal, pickup: bool, deadline: datetime) -> None:
    await _tell_seller(
        session,
        deal,
        "payment_received",
        lambda seller: messages.paid_seller(
            _title(deal),
            _price(deal, _to_pay(deal)),
            pickup,
            _deadline(deadline),
            seller.url or "",
            _shipping(deal, True),
        ),
    )
    if buyer := await _buyer(session, deal):
        await _tell(
            session,
            deal,
            "payment_received",
            buyer,
            lambda: messages.paid_buyer(
                _title(deal),
                _price(deal, _to_pay(deal)),
                pickup,
                _deadline(deadline),
                buyer.url,
                _shipping(deal, False),
            ),
        )


async def _shipped(session: AsyncSession, deal: Deal, deadline: datetime | None) -> None:
    due = None if deadline is None else _deadline(deadline)
    await _tell_both(
        session,
        deal,
        "item_shipped",
        lambda buyer: messages.item_shipped(_title(deal), buyer.url, due),
        lambda seller: messages.item_shipped_seller(_title(deal), due, seller.url or ""),
    )


# --- a parcel in transit always resolves ---
NOT_RECEIVED = frozenset({Trigger.BUYER_NOT_RECEIVED, Trigger.TRANSIT_EXPIRED})


async def _not_received(session: AsyncSession, deal: Deal, expired: bool) -> None:
    await _tell_both(
        session,
        deal,
        "deal_disputed",
        lambda buyer: _decided_by(
            deal, messages.not_received_buyer(_title(deal), expired, buyer.url)
        ),
        lambda seller: _decided_by(
            deal, messages.not_received_seller(_title(deal), expired, seller.url or "")
        ),
    )


async def _lost(session: AsyncSession, deal: Deal) -> None:
    carrier = _carrier(deal)
    await _tell_both(
        session,
        deal,
        "deal_disputed",
        lambda buyer: _decided_by(deal, messages.lost_buyer(_title(deal), carrier, buyer.url)),
        lambda seller: _decided_by(
            deal, messages.lost_seller(_title(deal), carrier, seller.url or "")
        ),
    )


def _carrier(deal: Deal) -> str:
    return str((deal.shipment or {}).get("carrier") or "")


# --- a parcel dealbroker books at the carrier (``parcels``) ---


async def parcel_booked(
    session: AsyncSession, deal: Deal, tracking_url: str, qr: bool, deadline: datetime | None
) -> None:
    """The outbound parcel is booked: the seller has a label to hand in, the buyer a link to
    follow it."""
    carrier, due = _carrier(deal), None if deadline is None else _deadline(deadline)
    await _tell_both(
        session,
        deal,
        "parcel_booked",
        lambda buyer: messages.parcel_booked_buyer(_title(deal), carrier, tracking_url, buyer.url),
        lambda seller: messages.parcel_booked_seller(
            _title(deal), carrier, qr, due, seller.url or ""
        ),
    )


async def parcel_delayed(session: AsyncSession, deal: Deal, deadline: datetime | None) -> None:
    """The carrier did not answer the booking: the seller is told once that we keep trying."""
    due = None if deadline is None else _deadline(deadline)
    await _tell_seller(
        session,
        deal,
        "parcel_delayed",
        lambda seller: messages.parcel_delayed(_title(deal), _carrier(deal), due, seller.url or ""),
    )


async def parcel_refused(session: AsyncSession, deal: Deal, reason: str) -> None:
    """The carrier refused the booking for good (``reason`` in the seller's words already)."""
    await _tell_seller(
        session,
        deal,
        "parcel_refused",
        lambda seller: messages.parcel_refused(
            _title(deal), _carrier(deal), reason, seller.url or ""
        ),
    )


async def drop_off_reminder(session: AsyncSession, deal: Deal, deadline: datetime | None) -> None:
    due = None if deadline is None else _deadline(deadline)
    await _tell_seller(
        session,
        deal,
        "drop_off_reminder",
        lambda seller: messages.drop_off_reminder(
            _title(deal), _carrier(deal), due, seller.url or ""
        ),
    )


async def parcel_ready(session: AsyncSession, deal: Deal, point: str) -> None:
    """The parcel waits for the buyer at a pickup point: where, and that it must be collected."""
    if buyer := await _buyer(session, deal):
        await _tell(
            session,
            deal,
            "parcel_ready",
            buyer,
            lambda: messages.parcel_ready_buyer(_title(deal), _carrier(deal), point, buyer.url),
        )


async def parcel_damaged(session: AsyncSession, deal: Deal) -> None:
    await _tell_both(
        session,
        deal,
        "parcel_damaged",
        lambda buyer: messages.parcel_damaged_buyer(_title(deal), buyer.url),
        lambda seller: messages.parcel_damaged_seller(_title(deal), seller.url or ""),
    )


async def return_label_ready(
    session: AsyncSession, deal: Deal, carrier: str, deadline: datetime | None
) -> None:
    """The return of a return then refund is booked: the buyer has a label, paid by us."""
    if buyer := await _buyer(session, deal):
        due = None if deadline is None else _deadline(deadline)
        await _tell(
            session,
            deal,
            "return_label",
            buyer,
            lambda: messages.return_label_buyer(_title(deal), carrier, due, buyer.url),
        )


async def _arrived(session: AsyncSession, deal: Deal, deadline: datetime) -> None:
    await _tell_both(
        session,
        deal,
        "item_arrived",
        lambda buyer: messages.item_arrived_buyer(_title(deal), _deadline(deadline), buyer.url),
        lambda seller: messages.item_arrived_seller(
            _title(deal), _deadline(deadline), seller.url or ""
        ),
    )


async def _seller_opened(session: AsyncSession, deal: Deal) -> bool:
    """Every deal ends: whether the deal's dispute was opened by the seller (a pickup problem),
    so a decision's message names who reported it."""
    changes = await deal_rows.history(session, deal.id)
    return any(c.trigger == Trigger.SELLER_REPORTED_PROBLEM.value for c in changes)


async def _completed(session: AsyncSession, deal: Deal, trigger: Trigger) -> None:
    reason = trigger.value
    if trigger is Trigger.DISPUTE_RELEASED and await _seller_opened(session, deal):
        reason = messages.SELLER_DISPUTE_RELEASED
    if buyer := await _buyer(session, deal):
        await _tell(
            session,
            deal,
            "deal_completed",
            buyer,
            lambda: _reasoned(
                deal, trigger, messages.completed_buyer(_title(deal), reason, buyer.url)
            ),
        )
    if seller := _seller(deal):
        payment = await payment_rows.current(session, deal.id)
        payout = None if payment is None else payment.payout_minor
        account = await payment_rows.payout_account(session, deal.id)
        last4 = None if account is None else account.number[-4:]
        await _tell(
            session,
            deal,
            "deal_completed",
            seller,
            lambda: _reasoned(
                deal,
                trigger,
                messages.completed_seller(
                    _title(deal),
                    reason,
                    None if payout is None else _price(deal, payout),
                    last4,
                    seller.url or "",
                    _shipping(deal, True),
                ),
            ),
        )


async def _disputed(session: AsyncSession, deal: Deal, trigger: Trigger) -> None:
    if trigger is Trigger.SELLER_REPORTED_PROBLEM:
        await _seller_reported(session, deal)
        return
    await _tell_both(
        session,
        deal,
        "deal_disputed",
        lambda buyer: _decided_by(deal, messages.disputed_buyer(_title(deal), buyer.url)),
        lambda seller: _decided_by(deal, messages.disputed_seller(_title(deal), seller.url or "")),
    )


async def _seller_reported(session: AsyncSession, deal: Deal) -> None:
    """Every deal ends: the seller of a pickup reported a problem with the handover."""
    reason = deal.dispute_reason or ""
    await _tell_both(
        session,
        deal,
        "deal_disputed",
        lambda buyer: _decided_by(
            deal, messages.seller_reported_buyer(_title(deal), reason, buyer.url)
        ),
        lambda seller: _decided_by(
            deal, messages.seller_reported_seller(_title(deal), reason, seller.url or "")
        ),
    )


async def evidence_added(session: AsyncSession, deal: Deal, by: str) -> None:
    """A party (``by``: "seller" or "buyer") added a statement to the dispute: the other party
    is told, so they can answer before the operator decides."""
    if by == "seller":
        if buyer := await _buyer(session, deal):
            await _tell(
                session,
                deal,
                "evidence_added",
                buyer,
                lambda: messages.evidence_added_buyer(_title(deal), buyer.url),
            )
    elif seller := _seller(deal):
        await _tell(
            session,
            deal,
            "evidence_added",
            seller,
            lambda: messages.evidence_added_seller(_title(deal), seller.url or ""),
        )


async def _refunded(
    session: AsyncSession, deal: Deal, source: DealStatus, trigger: Trigger
) -> None:
    reason = source.value
    if trigger in (Trigger.RETURN_RECEIVED, Trigger.RETURN_CONFIRM_EXPIRED):
        reason = trigger.value
    elif source is DealStatus.PICKUP_DENIED and await _seller_opened(session, deal):
        reason = messages.SELLER_DISPUTE_REFUNDED
    # The refund is queued after this message is written: what it returns is read from the
    # payment and the status the deal is refunded from.
    payment = await payment_rows.current(session, deal.id)
    kept = lifecycle.refund_keeps_shipping(source)
    refund = None if payment is None else payment.escrowed.refund(kept)
    shipping = (
        _price(deal, payment.shipping_minor)
        if payment is not None and payment.shipping_minor
        else None
    )
    if buyer := await _buyer(session, deal):
        await _tell(
            session,
            deal,
            "deal_refunded",
            buyer,
            lambda: _reasoned(
                deal,
                trigger,
                messages.refunded_buyer(
                    _title(deal),
                    reason,
                    None if refund is None else _price(deal, refund),
                    buyer.url,
                    shipping,
                    not kept,
                ),
            ),
        )
    await _tell_seller(
        session,
        deal,
        "deal_refunded",
        lambda seller: _reasoned(
            deal,
            trigger,
            messages.refunded_seller(_title(deal), reason, seller.url or "", shipping, not kept),
        ),
    )


# --- disputes decided on evidence ---
# The operator's decisions, whose messages carry the operator's reason when one was given.
DECISIONS = frozenset(
    {Trigger.DISPUTE_RELEASED, Trigger.DISPUTE_REFUNDED, Trigger.RETURN_REQUESTED}
)


def _decided_by(deal: Deal, text: Text) -> Text:
    """A dispute's opening message names the date by which we decide it."""
    if deal.decide_by is None:
        return text
    return messages.with_decision_date(text, _deadline(deal.decide_by))


def _reasoned(deal: Deal, trigger: Trigger, text: Text) -> Text:
    if trigger not in DECISIONS or not deal.decision_reason:
        return text
    return messages.with_decision_reason(text, deal.decision_reason)


async def _return_requested(session: AsyncSession, deal: Deal, deadline: datetime) -> None:
    """The operator decided a return then refund: the buyer learns where to send the item and
    by when, the seller that it comes back to them."""
    address = str((deal.dispute_return or {}).get("address") or "")
    await _tell_both(
        session,
        deal,
        "dispute_return",
        lambda buyer: _reasoned(
            deal,
            Trigger.RETURN_REQUESTED,
            messages.return_requested_buyer(_title(deal), address, _deadline(deadline), buyer.url),
        ),
        lambda seller: _reasoned(
            deal,
            Trigger.RETURN_REQUESTED,
            messages.return_requested_seller(
                _title(deal), address, _deadline(deadline), seller.url or ""
            ),
        ),
    )


async def _return_sent(session: AsyncSession, deal: Deal, deadline: datetime) -> None:
    """The buyer sent the item back: both learn its tracking number, and by when the buyer is
    refunded at the latest."""
    returning = deal.dispute_return or {}
    carrier, tracking = str(returning.get("carrier") or ""), str(returning.get("tracking") or "")
    await _tell_both(
        session,
        deal,
        "dispute_return",
        lambda buyer: messages.return_sent_buyer(
            _title(deal), carrier, tracking, _deadline(deadline), buyer.url
        ),
        lambda seller: messages.return_sent_seller(
            _title(deal), carrier, tracking, _deadline(deadline), seller.url or ""
        ),
    )


async def _cancelled(session: AsyncSession, deal: Deal) -> None:
    """Everyone known on the deal: the seller, the approved buyer, and each buyer whose offer
    was still pending (their offers are declined by the cancel; this message says why)."""
    readers: dict[tuple[str, str | None], tuple[Reader, bool]] = {}
    if seller := _seller(deal):
        readers[(seller.to, seller.url)] = (seller, True)
    buyers = [await _buyer(session, deal)]
    buyers += [
        await _offerer(session, o) for o in await offer_rows.pending_offers(session, deal.id)
    ]
    for buyer in buyers:
        if buyer is not None:
            readers.setdefault((buyer.to, buyer.url), (buyer, False))
    for reader, is_seller in readers.values():
        await _tell(
            session,
            deal,
            "deal_cancelled",
            reader,
            # Called at once, inside this iteration.
            lambda: messages.cancelled(_title(deal), reader.url, is_seller),  # noqa: B023
        )


async def approval_lapsed(
    session: AsyncSession, deal: Deal, lapsed: Offer | None, others: list[Offer]
) -> None:
    """Every deal ends: the approved buyer (of ``lapsed``) did not sign and pay in time. They
    are told the approval lapsed, the seller that the deal takes offers again, and each buyer
    of ``others`` (offers declined or withdrawn before) that they may offer again."""
    waiting = await _waiting(session, deal, Party.SELLER)  # the buyers may write again
    await _tell_seller(
        session,
        deal,
        "approval_lapsed",
        lambda seller: messages.with_waiting(
            messages.approval_lapsed_seller(_title(deal), seller.url or ""), waiting, True
        ),
    )
    told: set[str] = set()
    if lapsed is not None:
        buyer = await _offerer(session, lapsed)
        told.add(buyer.to.lower())
        await _tell(
            session,
            deal,
            "approval_lapsed",
            buyer,
            lambda: messages.approval_lapsed_buyer(_title(deal), buyer.url),
        )
    for offer in others:
        if offer.buyer_email.lower() in told:
            continue
        told.add(offer.buyer_email.lower())
        reader = await _offerer(session, offer)
        await _tell(
            session,
            deal,
            "offers_again",
            reader,
            # Called at once, inside this iteration.
            lambda: messages.offers_again(  # noqa: B023
                _title(deal),
                _price(deal),
                reader.url,  # noqa: B023
            ),
        )


async def late_payment_refunded(session: AsyncSession, deal: Deal, amount_minor: int) -> None:
    """Money the buyer paid after the deal could no longer take it is on its way back: both
    parties are told, each in their language. The buyer is the approved one, or, when the
    approval lapsed, the buyer whose approval lapsed last (whose payment it was)."""
    if buyer := await _buyer(session, deal) or await _lapsed_buyer(session, deal):
        await _tell(
            session,
            deal,
            "late_payment_refunded",
            buyer,
            lambda: messages.late_payment_refunded_buyer(
                _title(deal), _price(deal, amount_minor), buyer.url
            ),
        )
    await _tell_seller_of_money(
        session, deal, "late_payment_refunded", messages.late_payment_refunded_seller, amount_minor
    )


async def reservation_lapsed(session: AsyncSession, deal: Deal, amount_minor: int) -> None:
    """The buyer's reservation lapsed before it was captured: nothing was charged and nothing
    is paid out; both parties are told that support settles it (the operator sees the refused
    capture and may try it again)."""
    if buyer := await _buyer(session, deal):
        await _tell(
            session,
            deal,
            "reservation_lapsed",
            buyer,
            lambda: messages.reservation_lapsed_buyer(
                _title(deal), _price(deal, amount_minor), buyer.url
            ),
        )
    await _tell_seller_of_money(
        session, deal, "reservation_lapsed", messages.reservation_lapsed_seller, amount_minor
    )


# --- payouts ----------------------------------------------------------------------------------


async def payout_sent(session: AsyncSession, deal: Deal, payout_minor: int) -> None:
    await _tell_seller_of_money(session, deal, "payout_sent", messages.payout_sent, payout_minor)


async def payout_failed(session: AsyncSession, deal: Deal, payout_minor: int) -> None:
    await _tell_seller_of_money(
        session, deal, "payout_failed", messages.payout_failed, payout_minor
    )


async def confirm_payout_account(
    session: AsyncSession, deal: Deal, last4: str, token: str, valid_for: timedelta
) -> None:
    """The link that confirms a change of the payout account (one use, ``valid_for``), to the
    seller's address only: holding the deal page's link is not enough to redirect money."""
    if seller := _seller(deal):
        due = clock.now() + valid_for
        confirm_url = _started().links.payout_confirm_url(deal.id, token)
        await _tell(
            session,
            deal,
            "confirm_payout_account",
            seller,
            lambda: messages.confirm_payout_account(
                _title(deal), last4, _deadline(due), confirm_url
            ),
        )


async def payout_account_changed(session: AsyncSession, deal: Deal, last4: str) -> None:
    await _tell_seller(
        session,
        deal,
        "payout_account_changed",
        lambda seller: messages.payout_account_changed(_title(deal), last4, seller.url or ""),
    )


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
        "late_payment_refunded",
        "item_shipped",  # a parcel in transit always resolves: the seller learns its deadline
        # Reminders before a deadline (REMINDERS below).
        "deadline_reminder",
        "approval_lapsed",  # every deal ends
        "dispute_return",  # disputes decided on evidence: return then refund
        "conversation_message",  # what the other party wrote in the deal's conversation
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
    Party.BUYER: BOTH
    | {"offer_approved", "offer_declined", "please_pay", "item_shipped"}
    | {"offers_again"},  # every deal ends
}


# --- reminders before a deadline ----------------------------------------------------------------


@dataclass(frozen=True)
class Reminder:
    """Whom to remind before a deadline, and in which words (deal title, deadline, their page)."""

    party: Party
    words: Callable[[str, str, str | None], Text]


# Every deadline (a timer's trigger, ``deals.lifecycle.DEADLINES``) and who must act before it:
# the reminder job sends each of them their text. A deadline missing here is a test failure
# (tests/notifications/test_reminders.py), never a reminder silently left out.
REMINDERS: dict[Trigger, tuple[Reminder, ...]] = {
    Trigger.SHIPPING_EXPIRED: (Reminder(Party.SELLER, messages.remind_ship),),
    # At a pickup either party confirms the handover (the buyer approves, the seller enters the
    # buyer's code), and both must come to the meeting: both are reminded.
    Trigger.PICKUP_EXPIRED: (
        Reminder(Party.BUYER, messages.remind_pickup_buyer),
        Reminder(Party.SELLER, messages.remind_pickup_seller),
    ),
    Trigger.REVIEW_PERIOD_ENDED: (Reminder(Party.BUYER, messages.remind_review),),
    # In transit the buyer confirms the arrival; the deadline opens a dispute as not received.
    Trigger.TRANSIT_EXPIRED: (Reminder(Party.BUYER, messages.remind_transit),),
    # The approved buyer signs and pays, or the approval lapses (set by ``offers.approve``).
    Trigger.APPROVAL_LAPSED: (Reminder(Party.BUYER, messages.remind_sign_and_pay),),
    # Return then refund: the buyer sends the item back, then the seller confirms its receipt.
    Trigger.RETURN_NOT_SENT: (Reminder(Party.BUYER, messages.remind_return_send),),
    Trigger.RETURN_CONFIRM_EXPIRED: (Reminder(Party.SELLER, messages.remind_return_confirm),),
}


async def remind(session: AsyncSession, deal: Deal, trigger: Trigger, due: datetime) -> int:
    """Remind the parties who must act before the deadline ``trigger`` fires at ``due``, each
    in their language with a link to their page; returns how many messages were written.
    Called by the reminder job (``notifications.tasks``) once per deadline, while it is still open."""
    written = 0
    for reminder in REMINDERS[trigger]:
        reader = _seller(deal) if reminder.party is Party.SELLER else await _buyer(session, deal)
        if reader is None:
            continue
        # Questions the party has left unanswered are named first: answering may be what the
        # other party waits for before the handover.
        waiting = await _waiting(session, deal, reminder.party)
        seller = reminder.party is Party.SELLER
        await _tell(
            session,
            deal,
            "deadline_reminder",
            reader,
            # Called at once, inside this iteration.
            lambda: messages.with_waiting(
                reminder.words(_title(deal), _deadline(due), reader.url),  # noqa: B023
                waiting,  # noqa: B023
                seller,  # noqa: B023
            ),
        )
        written += 1
    return written


# --- a deal's conversation ---------------------------------------------------------------------


@dataclass(frozen=True)
class Said:
    """One message a conversation's e-mail carries, as plain values (the conversations sit
    above the notifications, which know nothing of them): when, its words, and whether the
    reader is warned about it."""

    at: datetime
    body: str
    warned: bool


async def conversation_news(
    session: AsyncSession,
    deal: Deal,
    reader: Party,
    offer_link_id: uuid.UUID,
    said: list[Said],
    buyer_locale: str | None = None,
) -> bool:
    """Tell ``reader`` (the seller, or the holder of the offer link ``offer_link_id``) what the
    other party wrote in their conversation (``said``, oldest first), in one message in the
    reader's language with the link to their page. Returns whether it was written: not when
    there is nothing to tell or no address to write to (a buyer who has not offered, on a link
    given without an address). ``buyer_locale``: the language of the page the buyer wrote on,
    for a buyer who has not offered yet."""
    if not said:
        return False
    to = (
        _seller(deal)
        if reader is Party.SELLER
        else await _link_holder(session, offer_link_id, buyer_locale)
    )
    if to is None:
        return False
    zone = _started().zone
    await _tell(
        session,
        deal,
        "conversation_message",
        to,
        lambda: messages.conversation_news(
            _title(deal),
            [messages.Quoted(messages.when(s.at, zone), s.body, s.warned) for s in said],
            reader is Party.SELLER,
            to.url,
        ),
    )
    return True


class Questions(Protocol):
    """The conversations' count of questions waiting for an answer, for the messages that
    mention them (reminders, a new offer, offers again): the conversations read the deals and
    the offers, above this module, so they reach it through this, which
    ``dealbroker.settlement.install`` registers at startup in every process."""

    async def waiting(self, session: AsyncSession, deal: Deal, party: Party) -> int:
        """How many of ``deal``'s conversations that ``party`` can write in end on a message
        of the other party."""
        ...


_questions: Questions | None = None


def register(questions: Questions) -> None:
    """Connect the messages to the conversations' count (``dealbroker.settlement``)."""
    global _questions
    _questions = questions


async def _waiting(session: AsyncSession, deal: Deal, party: Party) -> int:
    if _questions is None:
        raise RuntimeError(
            "the messages are not connected to the conversations: the process must call "
            "dealbroker.settlement.install() at startup"
        )
    return await _questions.waiting(session, deal, party)


async def portal_login_link(
    session: AsyncSession,
    integration_id: uuid.UUID,
    to: str,
    locale: str,
    url: str,
    expires: datetime,
) -> None:
    """A developer portal login link, in ``locale``, to a member's address (about no deal;
    ``integration_id`` is one integration the address is a member of)."""
    with i18n.using(locale):
        text = messages.portal_login_link(url, _deadline(expires))
    await _write_message(session, integration_id, None, "portal_login_link", to, text)


async def mailbox(
    session: AsyncSession, deal_id: uuid.UUID, party: Party, email: str
) -> list[OutboxMessage]:
    """What ``party`` of the deal was sent at ``email`` (compared case-insensitively), oldest
    first."""
    return await repository.sent_to(session, deal_id, sorted(KINDS_FOR[party]), email)


async def newest(session: AsyncSession, limit: int) -> list[OutboxMessage]:
    """The ``limit`` newest messages of the whole outbox, to every recipient, newest first
    (the local sandbox's outbox page, ``Settings.local_outbox``)."""
    return await repository.newest(session, limit)


async def of_deal(session: AsyncSession, deal_id: uuid.UUID) -> list[OutboxMessage]:
    """Every message about one deal, oldest first, sent or not (for the operator and tests)."""
    return await repository.of_deal(session, deal_id)
