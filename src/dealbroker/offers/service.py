"""Offer links: an integration prepares an offer for a buyer, who completes it on our page."""

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.auth.service import Principal
from dealbroker.core import clock, money
from dealbroker.core.errors import (
    BadRequest,
    Conflict,
    DomainError,
    NotTakingOffers,
    found,
)
from dealbroker.core.security import hash_token
from dealbroker.core.settings import Settings
from dealbroker.deals import service as deals
from dealbroker.deals.actions import takes_offers
from dealbroker.deals.lifecycle import Trigger
from dealbroker.deals.models import Deal, DealFields
from dealbroker.events import envelope
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind
from dealbroker.offers import repository
from dealbroker.offers.models import Offer, OfferLink, OfferStatus
from dealbroker.offers.schemas import OfferLinkCreate
from dealbroker.users import repository as users


class OfferMessages(Protocol):
    """What the parties are told about offers, in the offer's transaction. The messages read
    the offers, so the offers reach them through this, which ``dealbroker.settlement.install``
    registers at startup in every process."""

    async def offer_received(
        self, session: AsyncSession, deal: Deal, price_minor: int, buyer: str
    ) -> None: ...

    async def offer_approved(
        self, session: AsyncSession, deal: Deal, offer: Offer, due: datetime
    ) -> None: ...

    async def offer_declined(self, session: AsyncSession, deal: Deal, offer: Offer) -> None: ...

    async def offer_withdrawn(
        self, session: AsyncSession, deal: Deal, offer: Offer, still_open: bool
    ) -> None: ...

    async def approval_lapsed(
        self, session: AsyncSession, deal: Deal, lapsed: Offer | None, others: list[Offer]
    ) -> None: ...


_messages: OfferMessages | None = None


def register(messages: OfferMessages) -> None:
    """Connect the offers to the parties' messages (``dealbroker.settlement``)."""
    global _messages
    _messages = messages


def _tell() -> OfferMessages:
    if _messages is None:
        raise RuntimeError(
            "the offers are not connected to the messages: the process must call "
            "dealbroker.settlement.install() at startup"
        )
    return _messages


@dataclass(frozen=True)
class NewOfferLink:
    link: OfferLink
    token: str  # in the URL handed back and in messages to the buyer; stored as a hash


async def create_link(
    session: AsyncSession,
    principal: Principal,
    deal_id: uuid.UUID,
    data: OfferLinkCreate,
    token_for: Callable[[uuid.UUID], str],
) -> NewOfferLink:
    """A new offer link on the deal. ``token_for(link id)`` makes its token, which the
    deployment can make again for later messages to the buyer (``Links.offer_token``)."""
    # The row lock keeps a concurrent cancel from slipping in between the check and the insert.
    deal = await deals.get(session, principal, deal_id, for_update=True)
    refusal = link_refusal(deal)
    if refusal is not None:
        raise refusal
    link_id = uuid.uuid4()
    token = token_for(link_id)
    buyer = data.buyer
    link = OfferLink(
        id=link_id,
        deal_id=deal.id,
        integration_id=deal.integration_id,
        token_hash=hash_token(token),
        price_minor=deal.price_minor if data.price is None else money.to_minor(data.price),
        buyer_name=buyer.name if buyer else None,
        buyer_email=buyer.email if buyer else None,
        buyer_redirect_url=data.buyerRedirectUrl,
        seller_redirect_url=data.sellerRedirectUrl,
        created_at=clock.now(),
    )
    repository.add(session, link)
    await session.flush()
    return NewOfferLink(link, token)


def link_refusal(deal: DealFields) -> DomainError | None:
    """Why no offer link can be made on ``deal`` now, or ``None`` if one can (the rule of
    ``create_link``, which a deal's ``allowedActions`` reports)."""
    if not deal.seller or not deal.seller.get("email"):
        return BadRequest(
            "This deal has no seller with an email address; offer links need the seller's "
            "details (create the deal with a seller)."
        )
    if not takes_offers(deal):
        return NotTakingOffers(f"This deal no longer takes offers (status {deal.status}).")
    return None


async def resolve(
    session: AsyncSession, token: str, reference: str | None
) -> tuple[OfferLink, Deal] | None:
    """The link and deal behind an offer URL, or ``None`` if the token or reference is wrong."""
    found = await repository.by_token_hash(session, hash_token(token))
    if found is None or (reference is not None and reference != str(found[0].id)):
        return None
    return found


# --- offers: a buyer's proposal, which the seller approves or denies --------------------------


async def submit(
    session: AsyncSession,
    deal: Deal,
    *,
    price_minor: int,
    shipping_type: str,
    buyer_name: str | None,
    buyer_email: str,
    shipping_minor: int | None = None,
    buyer_redirect_url: str | None = None,
    seller_redirect_url: str | None = None,
    offer_link_id: uuid.UUID | None = None,
    verified: bool = True,
    locale: str | None = None,
) -> Offer:
    """A buyer's offer on ``deal`` (row locked by the caller); emits ``deal.offer``.

    ``verified``: the integration vouches for ``buyer_email`` (it sent it), so the offer is
    linked to that buyer's user; an address typed on the page is not proof of who one is, and
    gets a buyer id of its own. ``shipping_minor``: the shipping price quoted for a Carrier
    offer (``parties.offer_shipping``), None without a carrier."""
    if not takes_offers(deal):
        raise NotTakingOffers(f"This deal does not take offers now (status {deal.status}).")
    now = clock.now()
    offer = Offer(
        id=uuid.uuid4(),
        deal_id=deal.id,
        integration_id=deal.integration_id,
        offer_link_id=offer_link_id,
        price_minor=price_minor,
        shipping_type=shipping_type,
        shipping_minor=shipping_minor if shipping_type == "Carrier" else None,
        buyer_user_id=await users.user_id_for(session, deal.integration_id, buyer_email, buyer_name)
        if verified
        else uuid.uuid4(),
        buyer_name=buyer_name,
        buyer_email=buyer_email,
        buyer_redirect_url=buyer_redirect_url,
        seller_redirect_url=seller_redirect_url,
        status=OfferStatus.PENDING,
        created_at=now,
        decided_at=None,
        locale=locale,
    )
    repository.add_offer(session, offer)
    data = envelope.deal_offer(
        offer_id=offer.id,
        deal_id=deal.id,
        shipping_type=shipping_type,
        package_type=deal.package_type,
        buyer_name=buyer_name,
        buyer_email=buyer_email,
        price_minor=price_minor,
        buyer_redirect_url=buyer_redirect_url,
        seller_redirect_url=seller_redirect_url,
        at=now,
        offer_link_id=offer_link_id,
    )
    await events.emit(session, deal.integration_id, EventKind.DEAL_OFFER, data, deal_id=deal.id)
    await _tell().offer_received(session, deal, price_minor, buyer_name or buyer_email)
    return offer


async def pending_offer(session: AsyncSession, deal: Deal, offer_id: uuid.UUID | None) -> Offer:
    """The given pending offer of ``deal``, or its oldest pending offer."""
    if offer_id is not None:
        offer = found(
            await repository.offer(session, deal.id, offer_id),
            f"No offer {offer_id} on deal {deal.id}.",
        )
        if offer.status != OfferStatus.PENDING:
            raise Conflict(f"Offer {offer_id} is {offer.status}, not Pending.")
        return offer
    pending = await repository.pending_offers(session, deal.id)
    if not pending:
        raise Conflict(f"Deal {deal.id} has no pending offer.")
    return pending[0]


async def _decide(
    session: AsyncSession, deal: Deal, offer: Offer, status: OfferStatus, kind: EventKind
) -> None:
    now = clock.now()
    offer.status = status
    offer.decided_at = now
    data = envelope.offer_decision(offer.id, deal.id, now)
    await events.emit(session, deal.integration_id, kind, data, deal_id=deal.id)


async def approve(session: AsyncSession, deal: Deal, offer: Offer, settings: Settings) -> None:
    """The seller accepts ``offer``: its buyer, price, shipping type and shipping price become
    the deal's, and every other pending offer is denied (each with its ``deal.offerDenied``
    event). Its buyer has ``approval_deadline_hours`` to sign and pay, or the approval lapses
    (``lapse``)."""
    if not takes_offers(deal):
        raise Conflict(f"This deal cannot approve an offer now (status {deal.status}).")
    await _decide(session, deal, offer, OfferStatus.APPROVED, EventKind.DEAL_OFFER_APPROVED)
    for other in await repository.pending_offers(session, deal.id):
        if other.id != offer.id:
            await _decide(session, deal, other, OfferStatus.DENIED, EventKind.DEAL_OFFER_DENIED)
            await _tell().offer_declined(session, deal, other)
    deal.buyer_user_id = offer.buyer_user_id
    deal.asking_price_minor = deal.price_minor  # given back if the approval lapses
    deal.price_minor = offer.price_minor
    deal.shipping_minor = offer.shipping_minor
    deal.shipping_type = offer.shipping_type
    deal.updated_at = clock.now()
    due = clock.now() + timedelta(hours=settings.approval_deadline_hours)
    deals.set_deadline(session, deal, Trigger.APPROVAL_LAPSED, due, settings)
    await _tell().offer_approved(session, deal, offer, due)
    await session.flush()


async def lapse(session: AsyncSession, deal: Deal) -> None:
    """Every deal ends: the approved buyer did not sign and pay in time (the lifecycle's
    ``approval_lapsed``, whose transition already set the status). Their offer is ``Lapsed``
    (a ``deal.offerDenied`` event: the approval is taken back), they are no longer the deal's
    buyer, the price is the seller's asking price again, and the lapsed buyer and every buyer
    who had offered are told the deal takes offers again."""
    lapsed = await repository.approved_offer(session, deal.id)
    if lapsed is not None:
        await _decide(session, deal, lapsed, OfferStatus.LAPSED, EventKind.DEAL_OFFER_DENIED)
    deal.buyer_user_id = None
    deal.buyer_contact = None
    deal.shipping_type = None
    deal.shipping_minor = None
    if deal.asking_price_minor is not None:
        deal.price_minor = deal.asking_price_minor
    deal.asking_price_minor = None
    deal.updated_at = clock.now()
    others = [
        o
        for o in await repository.offers_of(session, deal.id)
        if o.status in (OfferStatus.DENIED, OfferStatus.WITHDRAWN)
    ]
    await _tell().approval_lapsed(session, deal, lapsed, others)
    await session.flush()


async def deny(session: AsyncSession, deal: Deal, offer: Offer) -> None:
    """The seller declines ``offer``; its buyer is told."""
    await _decide(session, deal, offer, OfferStatus.DENIED, EventKind.DEAL_OFFER_DENIED)
    await _tell().offer_declined(session, deal, offer)
    await session.flush()


async def withdraw(session: AsyncSession, deal: Deal, offer: Offer) -> Offer:
    """The buyer withdraws their pending ``offer`` (locked with its deal by the caller); the
    seller is told. No event: the interface has no kind for it, and ``deal.offerDenied`` would
    say the seller declined; the integration learns it when approving the offer is refused."""
    if offer.status != OfferStatus.PENDING:
        raise Conflict(f"Offer {offer.id} is {offer.status}, not Pending.")
    offer.status = OfferStatus.WITHDRAWN
    offer.decided_at = clock.now()
    await _tell().offer_withdrawn(session, deal, offer, takes_offers(deal))
    await session.flush()
    return offer


async def deny_pending(session: AsyncSession, deal: Deal) -> None:
    """Deny every pending offer of ``deal`` (it was cancelled), each with its event; their
    buyers get the cancellation's message instead of a declined offer's."""
    for offer in await repository.pending_offers(session, deal.id):
        await _decide(session, deal, offer, OfferStatus.DENIED, EventKind.DEAL_OFFER_DENIED)
    await session.flush()


@dataclass(frozen=True)
class OfferPage:
    offers: list[Offer]
    total_count: int


async def list_page(
    session: AsyncSession,
    principal: Principal,
    deal_id: uuid.UUID,
    page_number: int,
    page_size: int,
) -> OfferPage:
    """A page of the caller's deal's offers, newest first; another integration's deal is 404."""
    deal = await deals.get(session, principal, deal_id)
    total = await repository.count_of(session, deal.id)
    offset = (page_number - 1) * page_size
    found = [] if offset >= total else await repository.page_of(session, deal.id, offset, page_size)
    return OfferPage(found, total)


async def offers_of(session: AsyncSession, deal: Deal) -> list[Offer]:
    return await repository.offers_of(session, deal.id)


async def offers_from_link(session: AsyncSession, link: OfferLink) -> list[Offer]:
    return await repository.offers_from_link(session, link.id)


async def buyer_names(
    session: AsyncSession, link_ids: list[uuid.UUID]
) -> dict[uuid.UUID, str | None]:
    """Each offer link's buyer name, where known (``repository.buyer_names``)."""
    return await repository.buyer_names(session, link_ids)


async def resolve_for_update(session: AsyncSession, token: str) -> tuple[OfferLink, Deal] | None:
    """The link and its deal (row locked) for a buyer's action."""
    found = await repository.by_token_hash(session, hash_token(token))
    if found is None:
        return None
    link, _ = found
    deal = await deals.get_for(session, link.integration_id, link.deal_id, for_update=True)
    return link, deal


async def links_of(
    session: AsyncSession, deal_id: uuid.UUID, link_ids: list[uuid.UUID]
) -> dict[uuid.UUID, OfferLink]:
    """The offer links of ``deal_id`` among ``link_ids``, by id: a link of another deal is not
    among them, whoever names it."""
    return {link.id: link for link in await repository.links_of(session, deal_id, link_ids)}
