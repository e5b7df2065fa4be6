"""Signatures: each party's goes ``Initiated`` then ``Completed`` (or ``Failed``), with a
``signature.status`` event each time. A completed signature moves the deal along the lifecycle:
the seller's from ``Draft`` to ``Ad``, the buyer's from ``Ad`` to ``Signed``."""

from datetime import datetime
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.errors import Conflict
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import flows, lifecycle
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.events import envelope
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind


class SignatureType(StrEnum):
    SELLER = "Seller"
    BUYER = "Buyer"


class SignatureStatus(StrEnum):
    INITIATED = "Initiated"
    FAILED = "Failed"
    COMPLETED = "Completed"


TRIGGERS = {SignatureType.SELLER: Trigger.SELLER_SIGNED, SignatureType.BUYER: Trigger.BUYER_SIGNED}


async def record(
    session: AsyncSession,
    deal: Deal,
    signature_type: SignatureType,
    status: SignatureStatus,
    actor: Actor,
    settings: Settings,
    *,
    at: datetime | None = None,
) -> None:
    """Record a party's signature status on ``deal`` (whose row the caller has locked). The party
    must be known: the seller (a deal with a seller email) or the buyer (an approved offer)."""
    party = deal.seller_user_id if signature_type is SignatureType.SELLER else deal.buyer_user_id
    if party is None:
        missing = (
            "a seller with an email"
            if signature_type is SignatureType.SELLER
            else "an approved offer"
        )
        raise Conflict(
            f"A {signature_type.value.lower()} signature needs {missing} on the deal.",
            extra={"currentStatus": deal.status},
        )
    transition = None
    if status is SignatureStatus.COMPLETED:
        transition = lifecycle.transition_for(
            DealStatus(deal.status), TRIGGERS[signature_type], actor
        )
        if transition is None:
            raise Conflict(
                f"A {signature_type.value.lower()} signature cannot complete on a deal in status "
                f"{deal.status}.",
                extra={"currentStatus": deal.status},
            )
    when = at or deals.now()
    data = envelope.signature_status(deal.id, party, status.value, signature_type.value, when)
    await events.emit(
        session, deal.integration_id, EventKind.SIGNATURE_STATUS, data, deal_id=deal.id
    )
    if transition is not None:
        await flows.fire(session, deal, transition.trigger, actor, settings)
