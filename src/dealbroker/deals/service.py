"""Deal rules: creating, reading and listing deals, and every status change.

``apply`` is the only function that writes a deal's ``status``: it asks the lifecycle table
whether the transition is legal and records it in the status history.
"""

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from dealbroker.auth.service import Principal
from dealbroker.core import clock, money
from dealbroker.core.errors import Conflict, FieldError, IllegalTransition, StaleDeal, found
from dealbroker.core.fastpath.statements import DriverStatements
from dealbroker.core.i18n import _
from dealbroker.core.idempotency import Claim
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle, repository
from dealbroker.deals.lifecycle import Actor, Transition, Trigger
from dealbroker.deals.models import Deal, DealStatusChange, DealTimer, NewDeal
from dealbroker.deals.schemas import DealCreate
from dealbroker.events import envelope
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind
from dealbroker.users import repository as users


@dataclass(frozen=True)
class DealPage:
    deals: list[Any]  # rows with ``Deal``'s attribute names (``deals.repository``)
    total_count: int


def now() -> datetime:
    """The service's time (the injectable clock), for callers that stamp deal events."""
    return clock.now()


def _change(deal: Deal, source: str | None, trigger: str, actor: Actor) -> DealStatusChange:
    return DealStatusChange(
        **_change_values(
            deal.id,
            deal.integration_id,
            source,
            deal.status,
            trigger,
            actor,
            (deal.version or 0) + 1,  # what the flush that stores it will make it
            deal.updated_at,
        )
    )


def _change_values(
    deal_id: uuid.UUID,
    integration_id: uuid.UUID,
    source: str | None,
    target: str,
    trigger: str,
    actor: Actor,
    deal_version: int,
    at: datetime,
) -> dict[str, Any]:
    """A status-history row's columns: the deal moved from ``source`` to ``target``."""
    return {
        "id": uuid.uuid4(),
        "deal_id": deal_id,
        "integration_id": integration_id,
        "from_status": source,
        "to_status": target,
        "trigger": trigger,
        "actor": actor.value,
        "deal_version": deal_version,
        "created_at": at,
    }


async def create(
    session: AsyncSession,
    principal: Principal,
    data: DealCreate,
    currency: str,
    *,
    alone: DriverStatements | None = None,
) -> NewDeal:
    """A new ``Draft`` deal, stored with its history, its seller's user and its first event
    (see ``repository.add``: on PostgreSQL one statement)."""
    deal = await create_claiming(session, principal, data, currency, None, alone=alone)
    assert deal is not None
    return deal


async def create_claiming(
    session: AsyncSession,
    principal: Principal,
    data: DealCreate,
    currency: str,
    claim: Callable[[NewDeal], Claim] | None,
    *,
    alone: DriverStatements | None = None,
) -> NewDeal | None:
    """``create``, storing the request's idempotency key with its answer for the deal, which
    ``claim`` gives, in the same statement. If the key is taken already, nothing is written and
    the answer is None. ``alone``: see ``repository.add``.

    The deal, its history row, its seller's user and its event are built as the values the
    statement inserts, not as ORM objects (which cost more to build than the rest of the
    request's own work): nothing but that statement stores them."""
    now = clock.now()
    seller = data.seller
    deal = NewDeal(
        id=uuid.uuid4(),
        integration_id=principal.integration_id,
        name=data.name,
        description=data.description,
        price_minor=None if data.price is None else money.to_minor(data.price),
        currency=currency,
        images=list(data.images or []),
        package_type=data.packageType,
        status=DealStatus.DRAFT,
        seller=None if seller is None else seller.model_dump(),
        created_at=now,
        updated_at=now,
    )
    seller_user = None
    if seller is not None and seller.email:
        name = " ".join(p for p in (seller.firstname, seller.lastname) if p) or None
        seller_user = users.new_user(principal.integration_id, seller.email, name, now)
    event = events.first_of_deal(
        deal.integration_id,
        EventKind.DEAL_STATUS,
        envelope.deal_status(deal.id, deal.status, now),
        deal.id,
        now,
    )
    first_change = _change_values(
        deal.id, deal.integration_id, None, deal.status, "created", Actor.INTEGRATION, 1, now
    )
    key = None if claim is None else claim(deal)
    if not await repository.add(session, deal, first_change, event, seller_user, key, alone=alone):
        return None
    events.emitted_now(session, event)
    return deal


async def _emit_status(session: AsyncSession, deal: Deal) -> None:
    data = envelope.deal_status(deal.id, deal.status, deal.updated_at)
    await events.emit(session, deal.integration_id, EventKind.DEAL_STATUS, data, deal_id=deal.id)


async def get(
    session: AsyncSession, principal: Principal, deal_id: uuid.UUID, *, for_update: bool = False
) -> Deal:
    """The caller's deal; another integration's deal is 404, as if it did not exist."""
    return await get_for(session, principal.integration_id, deal_id, for_update=for_update)


async def get_for(
    session: AsyncSession,
    integration_id: uuid.UUID,
    deal_id: uuid.UUID,
    *,
    for_update: bool = False,
) -> Deal:
    return found(
        await repository.get(session, integration_id, deal_id, for_update=for_update),
        f"No deal {deal_id}.",
    )


async def by_id_for_update(session: AsyncSession, deal_id: uuid.UUID) -> Deal | None:
    """Any integration's deal, row-locked for the change at hand, or None: for the settlement
    of a payment, which knows its deal by id alone."""
    return await repository.by_id_for_update(session, deal_id)


async def read(reads: DriverStatements, principal: Principal, deal_id: uuid.UUID) -> Any:
    """The caller's deal as a row to render (no ORM object): one query (``reads.fetch``: on the
    driver directly with the fast paths on). Another integration's deal is 404, as if it did
    not exist."""
    return found(
        await repository.read_one(reads, principal.integration_id, deal_id), f"No deal {deal_id}."
    )


async def list_page(
    reads: DriverStatements,
    principal: Principal,
    page_number: int,
    page_size: int,
    conn: AsyncConnection | None = None,
) -> DealPage:
    """A page of the caller's deals, newest first, as rows, and their total: one query (on
    ``conn`` if given)."""
    offset = (page_number - 1) * page_size
    total, rows = await repository.read_page(
        reads, principal.integration_id, offset, page_size, conn
    )
    return DealPage(rows, total)


async def apply(session: AsyncSession, deal: Deal, transition: Transition, actor: Actor) -> Deal:
    """Move ``deal`` along ``transition`` and record it. The caller holds the deal's row lock;
    the version column guards the rest (a stale write raises ``Conflict``)."""
    current = DealStatus(deal.status)
    if current not in transition.sources or actor not in transition.actors:
        raise illegal(deal, transition.target.value, actor)
    deal.status = transition.target
    deal.updated_at = clock.now()
    repository.add_change(session, _change(deal, current.value, transition.trigger.value, actor))
    await _flush(session)
    await _emit_status(session, deal)
    return deal


def set_deadline(
    session: AsyncSession, deal: Deal, trigger: Trigger, due: datetime, settings: Settings
) -> None:
    """A deadline on ``deal``: the worker fires ``trigger`` as the timer at ``due``, if the
    lifecycle still allows it then, and reminds the party who must act
    ``reminder_lead_hours`` before (``notifications.tasks.ReminderJob``)."""
    now = clock.now()
    lead = timedelta(hours=settings.reminder_lead_hours)
    # No reminder for a deadline no longer than the lead time: the message of this very change
    # names it (a reminder then would repeat it at once).
    remind_at = due - lead if lead and due - now > lead else None
    repository.add_timer(
        session,
        DealTimer(
            id=uuid.uuid4(),
            deal_id=deal.id,
            integration_id=deal.integration_id,
            trigger=trigger.value,
            due_at=due,
            fired_at=None,
            outcome=None,
            created_at=now,
            remind_at=remind_at,
            reminded_at=None,
        ),
    )


async def close_deadlines(session: AsyncSession, deal: Deal, trigger: Trigger) -> None:
    """Close ``deal``'s pending ``trigger`` deadlines as skipped: what they waited for happened
    (the approved buyer paid), so no page counts down to them any more."""
    now = clock.now()
    for timer in await repository.unclaimed_timers(session, deal.id, trigger.value):
        timer.fired_at, timer.outcome = now, "skipped"
        if timer.remind_at is not None and timer.reminded_at is None:
            timer.reminded_at = now  # met: its reminder is handled too, and never sent


def illegal(deal: Deal, target: str, actor: Actor) -> IllegalTransition:
    """The refusal of a change the lifecycle does not allow, listing the statuses it does."""
    allowed = [s.value for s in lifecycle.allowed_targets(DealStatus(deal.status), actor)]
    return IllegalTransition(
        f"A deal in status {deal.status} cannot move to {target}"
        + (f"; allowed: {', '.join(allowed)}." if allowed else "; no change is allowed from here."),
        extra={"currentStatus": deal.status, "allowedStatuses": allowed},
    )


async def update_details(
    session: AsyncSession,
    deal: Deal,
    fields: dict[str, object],
    seller: dict[str, str | None] | None,
) -> Deal:
    """The seller completes a ``Draft`` deal: name, description, price (minor units), package
    type, and their own details. Only a draft can change; its version guards the write.

    The seller's e-mail is their identity across deals (``seller_user_id``), so only the
    integration, which knows its user, may give it (``create``). Typed on the page, where
    holding the deal's link proves nothing about who one is, it can be set once on a deal that
    has none, and then links the deal to a seller of its own, never to an existing user with
    that address; it cannot be changed afterwards (docs/decisions/0013-payout-account.md)."""
    if deal.status != DealStatus.DRAFT:
        raise Conflict(
            f"Only a draft can be edited; this deal is {deal.status}.",
            page_detail=_("Only a draft can be changed, and this deal is no longer one."),
        )
    if deal.buyer_user_id is not None:
        # What the buyer signs and pays must be exactly the offer the seller approved.
        raise Conflict(
            _(
                "You approved an offer: the price and terms are agreed with the buyer and can "
                "no longer be changed."
            )
        )
    for name, value in fields.items():
        setattr(deal, name, value)
    if seller is not None:
        before = (deal.seller or {}).get("email")
        email = seller.get("email")
        if before and email and email.strip().lower() != before.strip().lower():
            raise FieldError(
                "email",
                _(
                    "Your e-mail address comes with the deal and cannot be changed here; ask the "
                    "marketplace to change it."
                ),
                "cannot be changed",
            )
        deal.seller = {**seller, "email": before or email}
        if email and deal.seller_user_id is None:
            deal.seller_user_id = uuid.uuid4()  # this deal's seller, linked to no other deal
    deal.updated_at = clock.now()
    await _flush(session)
    return deal


async def touch(session: AsyncSession, deal: Deal) -> None:
    """Write a change to ``deal`` that moves no status (a carrier event recorded); its version
    guards the write as any other."""
    deal.updated_at = clock.now()
    await _flush(session)


async def _flush(session: AsyncSession) -> None:
    """Write the deal; its version column refuses a write based on a stale read."""
    try:
        await session.flush()
    except StaleDataError as exc:
        raise StaleDeal(
            _("The deal was changed by another request; reload it and try again.")
        ) from exc
