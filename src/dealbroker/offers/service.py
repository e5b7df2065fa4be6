"""Offer links: an integration prepares an offer for a buyer, who completes it on our page."""

import uuid
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.auth.service import Principal
from dealbroker.core import clock, money
from dealbroker.core.errors import BadRequest
from dealbroker.core.security import hash_token, new_token
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import OFFER_STATUSES, DealStatus
from dealbroker.deals.models import Deal
from dealbroker.offers import repository
from dealbroker.offers.models import OfferLink
from dealbroker.offers.schemas import OfferLinkCreate


@dataclass(frozen=True)
class NewOfferLink:
    link: OfferLink
    token: str  # only ever in the URL handed back; stored as a hash


async def create_link(
    session: AsyncSession, principal: Principal, deal_id: uuid.UUID, data: OfferLinkCreate
) -> NewOfferLink:
    # The row lock keeps a concurrent cancel from slipping in between the check and the insert.
    deal = await deals.get(session, principal, deal_id, for_update=True)
    if not deal.seller or not deal.seller.get("email"):
        raise BadRequest(
            "This deal has no seller with an email address; offer links need the seller's "
            "details (create the deal with a seller)."
        )
    if DealStatus(deal.status) not in OFFER_STATUSES:
        raise BadRequest(f"This deal no longer takes offers (status {deal.status}).")
    token = new_token()
    buyer = data.buyer
    link = OfferLink(
        id=uuid.uuid4(),
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


async def resolve(
    session: AsyncSession, token: str, reference: str | None
) -> tuple[OfferLink, Deal] | None:
    """The link and deal behind an offer URL, or ``None`` if the token or reference is wrong."""
    found = await repository.by_token_hash(session, hash_token(token))
    if found is None or (reference is not None and reference != str(found[0].id)):
        return None
    return found
