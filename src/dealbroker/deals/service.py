"""Deal rules: creating, reading and listing deals, and every status change.

``apply`` is the only function that writes a deal's ``status``: it asks the lifecycle table
whether the transition is legal and records it in the status history.
"""

import math
import uuid
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from dealbroker.auth.service import Principal
from dealbroker.core import clock, money
from dealbroker.core.errors import Conflict, NotFound
from dealbroker.deals import lifecycle, repository
from dealbroker.deals.lifecycle import Actor, DealStatus, Transition
from dealbroker.deals.models import Deal, DealStatusChange
from dealbroker.deals.schemas import DealCreate


@dataclass(frozen=True)
class DealPage:
    deals: list[Deal]
    page_number: int
    page_size: int
    total_count: int

    @property
    def total_pages(self) -> int:
        return math.ceil(self.total_count / self.page_size)


def _change(deal: Deal, source: str | None, trigger: str, actor: Actor) -> DealStatusChange:
    return DealStatusChange(
        id=uuid.uuid4(),
        deal_id=deal.id,
        integration_id=deal.integration_id,
        from_status=source,
        to_status=deal.status,
        trigger=trigger,
        actor=actor.value,
        created_at=deal.updated_at,
    )


async def create(
    session: AsyncSession, principal: Principal, data: DealCreate, currency: str
) -> Deal:
    now = clock.now()
    deal = Deal(
        id=uuid.uuid4(),
        integration_id=principal.integration_id,
        name=data.name,
        description=data.description,
        price_minor=None if data.price is None else money.to_minor(data.price),
        currency=currency,
        images=list(data.images or []),
        package_type=data.packageType,
        status=DealStatus.DRAFT.value,
        seller=None if data.seller is None else data.seller.model_dump(),
        payment_status=None,
        created_at=now,
        updated_at=now,
    )
    await repository.add(session, deal, _change(deal, None, "created", Actor.INTEGRATION))
    return deal


async def get(
    session: AsyncSession, principal: Principal, deal_id: uuid.UUID, *, for_update: bool = False
) -> Deal:
    """The caller's deal; another integration's deal is 404, as if it did not exist."""
    deal = await repository.get(session, principal.integration_id, deal_id, for_update=for_update)
    if deal is None:
        raise NotFound(f"No deal {deal_id}.")
    return deal


async def list_page(
    session: AsyncSession, principal: Principal, page_number: int, page_size: int
) -> DealPage:
    total = await repository.count(session, principal.integration_id)
    offset = (page_number - 1) * page_size
    deals = (
        []
        if offset >= total
        else await repository.page(session, principal.integration_id, offset, page_size)
    )
    return DealPage(deals, page_number, page_size, total)


async def apply(session: AsyncSession, deal: Deal, transition: Transition, actor: Actor) -> Deal:
    """Move ``deal`` along ``transition`` and record it. The caller holds the deal's row lock;
    the version column guards the rest (a stale write raises ``Conflict``)."""
    current = DealStatus(deal.status)
    if current not in transition.sources or actor not in transition.actors:
        raise _illegal(deal, transition.target, actor)
    deal.status = transition.target.value
    deal.updated_at = clock.now()
    repository.add_change(session, _change(deal, current.value, transition.trigger.value, actor))
    try:
        await session.flush()
    except StaleDataError as exc:
        raise Conflict("The deal was changed by another request; reload it and try again.") from exc
    return deal


def _illegal(deal: Deal, target: DealStatus, actor: Actor) -> Conflict:
    allowed = [s.value for s in lifecycle.allowed_targets(DealStatus(deal.status), actor)]
    return Conflict(
        f"A deal in status {deal.status} cannot move to {target.value}"
        + (f"; allowed: {', '.join(allowed)}." if allowed else "; no change is allowed from here."),
        extra={"currentStatus": deal.status, "allowedStatuses": allowed},
    )


async def change_status(
    session: AsyncSession,
    principal: Principal,
    deal_id: uuid.UUID,
    target: DealStatus,
    actor: Actor,
) -> Deal:
    """The integration asks for a status; legal only if a transition leads straight there."""
    deal = await get(session, principal, deal_id, for_update=True)
    transition = lifecycle.transition_to(DealStatus(deal.status), target, actor)
    if transition is None:
        raise _illegal(deal, target, actor)
    return await apply(session, deal, transition, actor)
