"""The sandbox triggers' effects. With a ``dealId`` each goes through the same service functions
as the real flows (signatures, offers, payments, the lifecycle), so the deal changes and the
events it emits are the real ones; without one it emits its event with dummy data.

A trigger always simulates: where the deal's status does not allow its effect yet, the deal is
first fast-forwarded along the lifecycle to where it does (``sandbox.paths``), every step with
its real events. Only an effect no path reaches is refused (``paths.Unreachable``)."""

import uuid
from datetime import UTC, datetime, timedelta
from math import ceil
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.carriers.base import ParcelEventKind
from dealbroker.core import clock, money
from dealbroker.core.errors import (
    Conflict,
    FieldError,
    Forbidden,
    InvalidInput,
    NotFound,
    NotTakingOffers,
    Unauthorized,
    UnknownReference,
)
from dealbroker.core.security import hash_token
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus, PaymentStatus
from dealbroker.deals import flows, lifecycle
from dealbroker.deals import repository as deal_repository
from dealbroker.deals import service as deal_service
from dealbroker.deals.actions import takes_offers
from dealbroker.deals.lifecycle import FINAL_STATUSES, Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.deals.tasks import fire_due_timers
from dealbroker.events import envelope
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind
from dealbroker.events.service import By
from dealbroker.integrations import repository as integrations
from dealbroker.integrations.models import Integration
from dealbroker.notifications.tasks import send_due_reminders
from dealbroker.offers import service as offers
from dealbroker.parcels import service as parcels
from dealbroker.payments import service as payments
from dealbroker.payments.tasks import make_pending_calls
from dealbroker.sandbox import paths, schemas
from dealbroker.sandbox.paths import SANDBOX_BUYER
from dealbroker.signatures import service as signatures
from dealbroker.signatures.service import SignatureStatus, SignatureType

# Every trigger changes deals or emits events in the integration's name: a read-only
# integration's secret is a valid credential without that permission (403, as for a token).
TRIGGER_SCOPE = "deals:write"


async def integration_for(session: AsyncSession, secret: str | None) -> Integration:
    """The integration whose webhook secret is ``secret``: 401 when missing or unknown, 403
    when the integration may not change its deals (no ``deals:write`` scope)."""
    if not secret:
        raise Unauthorized("The webhook-secret header is required.")
    # During a rotation's overlap window the replaced secret is still valid.
    integration = await integrations.by_webhook_secret_hash(
        session, hash_token(secret), clock.now()
    )
    if integration is None or not integration.active:
        raise Unauthorized("The webhook-secret is not valid.")
    if TRIGGER_SCOPE not in integration.scope_list:
        raise Forbidden(f"This integration lacks the scope {TRIGGER_SCOPE}.")
    return integration


async def _deal(session: AsyncSession, integration: Integration, deal_id: uuid.UUID) -> Deal:
    """The integration's deal, locked. A ``dealId`` that names none of the integration's deals
    is invalid input (``UnknownReference``: the interface lists 400, not 404, for the
    triggers). Another integration's deal is looked up, and refused, exactly as an unknown one
    (the same query and answer), so a trigger never tells whether a deal id exists elsewhere."""
    try:
        return await deal_service.get_for(session, integration.id, deal_id, for_update=True)
    except NotFound as exc:
        raise UnknownReference(
            exc.detail, errors=[{"field": "dealId", "message": "names no deal of yours"}]
        ) from None


def _time(millis: int | None) -> datetime:
    return clock.now() if millis is None else datetime.fromtimestamp(millis / 1000, UTC)


async def signature_status(
    session: AsyncSession,
    integration: Integration,
    body: schemas.SignatureStatusTrigger,
    settings: Settings,
) -> Deal | None:
    """A party's signature. The interface: the deal becomes ``Signed``, always, whatever the
    type and the status. A signature of the buyer (or of no named party) fast-forwards the deal
    to where the buyer signs (the seller's signature, an approved offer) and is recorded there;
    the seller's is recorded on a draft, or reported again on a deal already ``Ad``, and the
    buyer then signs as above. The event asked for is sent as asked (``Initiated``, ``Failed``
    or ``Completed``, at ``signatureDate``); a signature left short of ``Completed`` is then
    completed, as the party would on their page (a failed one is started again first), so the
    deal still ends ``Signed``. A signature the deal is already past is reported again, the
    deal staying where it is; a closed deal takes none."""
    status = SignatureStatus(body.status or SignatureStatus.COMPLETED)
    if body.dealId is None:
        data = envelope.signature_status(
            uuid.uuid4(),
            body.userId or uuid.uuid4(),
            status.value,
            body.signatureType or SignatureType.SELLER.value,
            _time(body.signatureDate),
        )
        await events.emit(session, integration.id, EventKind.SIGNATURE_STATUS, data)
        return None
    deal = await _deal(session, integration, body.dealId)
    if deal.status in FINAL_STATUSES:
        raise paths.unreachable(deal, "a signature")
    if body.signatureType is not None:
        party = SignatureType(body.signatureType)
    elif status is SignatureStatus.COMPLETED or deal.status != DealStatus.DRAFT:
        party = SignatureType.BUYER  # the signature that makes a deal Signed
    else:
        party = SignatureType.SELLER
    at = _time(body.signatureDate)
    if party is SignatureType.SELLER:
        signs_now = deal.status == DealStatus.DRAFT
        if signs_now:
            await paths.ensure_seller(session, deal)
    else:
        if deal.status == DealStatus.DRAFT:
            await paths.reach(session, deal, DealStatus.AD, settings)  # the seller signs first
        if deal.status == DealStatus.AD:
            await paths.ensure_buyer(session, deal, None, settings)
        signs_now = deal.status == DealStatus.AD
    if status is SignatureStatus.COMPLETED and not signs_now:
        await _report_signature(session, deal, party, at)
    else:
        await signatures.record(session, deal, party, status, Actor.SANDBOX, settings, at=at)
    if signs_now and status is not SignatureStatus.COMPLETED:
        # "Always Signed": the signature asked for stopped short; the party completes it, a
        # failed one by starting again, as on their page.
        retry = (SignatureStatus.INITIATED,) if status is SignatureStatus.FAILED else ()
        await paths.sign(
            session, deal, party, settings, statuses=(*retry, SignatureStatus.COMPLETED)
        )
    if deal.status == DealStatus.AD:
        # The seller's signature: the deal still becomes Signed, as the buyer's would make it,
        # through the real steps (an approved offer, the sandbox buyer's by default; its sign).
        await paths.ensure_buyer(session, deal, None, settings)
        await signatures.record(
            session,
            deal,
            SignatureType.BUYER,
            SignatureStatus.COMPLETED,
            Actor.SANDBOX,
            settings,
            at=clock.now(),
        )
    return deal


async def _report_signature(
    session: AsyncSession, deal: Deal, party: SignatureType, at: datetime
) -> None:
    """Send the completed signature's event again for a deal already past it (the lifecycle
    never goes back, so nothing else changes)."""
    user = deal.seller_user_id if party is SignatureType.SELLER else deal.buyer_user_id
    if user is None:
        raise paths.unreachable(deal, f"a {party.value.lower()} signature")
    data = envelope.signature_status(
        deal.id, user, SignatureStatus.COMPLETED.value, party.value, at
    )
    await events.emit(
        session, deal.integration_id, EventKind.SIGNATURE_STATUS, data, deal_id=deal.id
    )


async def deal_offer(
    session: AsyncSession, integration: Integration, body: schemas.DealOfferTrigger
) -> Deal | None:
    buyer_name = body.buyer.name if body.buyer and body.buyer.name else SANDBOX_BUYER[0]
    buyer_email = body.buyer.email if body.buyer and body.buyer.email else SANDBOX_BUYER[1]
    shipping = body.shippingType or "Carrier"
    if body.dealId is None:
        data = envelope.deal_offer(
            offer_id=uuid.uuid4(),
            deal_id=uuid.uuid4(),
            shipping_type=shipping,
            package_type="Medium",
            buyer_name=buyer_name,
            buyer_email=buyer_email,
            price_minor=money.to_minor(body.price) if body.price is not None else 100_00,
            buyer_redirect_url=body.buyerRedirectUrl,
            seller_redirect_url=body.sellerRedirectUrl,
            at=clock.now(),
        )
        await events.emit(session, integration.id, EventKind.DEAL_OFFER, data)
        return None
    deal = await _deal(session, integration, body.dealId)
    if paths.could_take_offers(deal):
        await paths.ensure_seller(session, deal)  # a draft without one gets the sandbox seller
    if not takes_offers(deal):
        # The interface lists 400 (not 409) for dealOffer, as for the offer link.
        raise NotTakingOffers(
            f"This deal does not take offers now (status {deal.status}, needs a seller "
            "with an email and no approved offer).",
            extra={"currentStatus": deal.status},
        )
    price = money.to_minor(body.price) if body.price is not None else deal.price_minor
    if price is None:
        # A schema-valid body the deal cannot take (its price is missing): 400, the interface's
        # code for what the deal refuses; 405 is for a body that breaks the schema.
        raise FieldError(
            "price",
            "The deal has no price: give one in the offer.",
            "required when the deal has no price",
        )
    await offers.submit(
        session,
        deal,
        price_minor=price,
        shipping_type=shipping,
        buyer_name=buyer_name,
        buyer_email=buyer_email,
        buyer_redirect_url=body.buyerRedirectUrl,
        seller_redirect_url=body.sellerRedirectUrl,
    )
    return deal


async def offer_decision(
    session: AsyncSession,
    integration: Integration,
    body: schemas.OfferDecisionTrigger,
    approve: bool,
    settings: Settings,
) -> Deal | None:
    kind = EventKind.DEAL_OFFER_APPROVED if approve else EventKind.DEAL_OFFER_DENIED
    if body.dealId is None:
        data = envelope.offer_decision(body.id or uuid.uuid4(), uuid.uuid4(), _time(body.date))
        await events.emit(session, integration.id, kind, data)
        return None
    deal = await _deal(session, integration, body.dealId)
    if body.id is None and not await paths.has_pending_offer(session, deal):
        if not paths.could_take_offers(deal):
            # Past its approved offer (or closed): no path leads to a pending offer any more.
            raise Conflict(
                f"Deal {deal.id} has no pending offer.", extra={"currentStatus": deal.status}
            )
        await paths.sandbox_offer(session, deal, "Carrier")  # the offer to decide on
    try:
        offer = await offers.pending_offer(session, deal, body.id)
    except NotFound as exc:
        raise UnknownReference(
            exc.detail, errors=[{"field": "id", "message": "names no offer of this deal"}]
        ) from None
    if approve:
        await offers.approve(session, deal, offer, settings)
    else:
        await offers.deny(session, deal, offer)
    return deal


async def payment_status(
    session: AsyncSession,
    integration: Integration,
    body: schemas.PaymentStatusTrigger,
    settings: Settings,
) -> Deal | None:
    status = body.status or PaymentStatus.PAID
    if body.dealId is None:
        amount = money.from_string(body.amount) if body.amount else 100_00
        fee = (
            money.from_string(body.fee)
            if body.fee
            else money.fee_for(amount, settings.fee_percent, settings.fee_fixed)
        )
        data = envelope.payment_status(
            deal_id=uuid.uuid4(),
            seller_user_id=body.sellerUserId or uuid.uuid4(),
            buyer_user_id=body.buyerUserId or uuid.uuid4(),
            status=status.value,
            amount_minor=amount,
            fee_minor=fee,
            currency=body.currency or settings.currency,
        )
        await events.emit(session, integration.id, EventKind.PAYMENT_STATUS, data)
        return None
    deal = await _deal(session, integration, body.dealId)
    await _fast_forward_for_payment(session, deal, status, settings)
    await payments.sandbox_set(session, deal, status, settings)
    if status is PaymentStatus.PAID and deal.status == DealStatus.SIGNED:
        # As with a real payment: paid money moves a signed deal on, by its shipping type.
        trigger = (
            Trigger.PAID_FOR_PICKUP if deal.shipping_type == "Pickup" else Trigger.PAID_FOR_SHIPPING
        )
        await flows.fire(session, deal, trigger, Actor.PROVIDER, settings)
    return deal


async def _fast_forward_for_payment(
    session: AsyncSession, deal: Deal, status: PaymentStatus, settings: Settings
) -> None:
    """Take the deal to where its payment can have ``status``: a payout status needs a
    ``Completed`` deal, ``Refunded`` a refunded one, any other a ``Signed`` deal (or, for
    ``Paid``, one already paid). ``Unreachable`` when no path leads there."""
    if status in payments.PAYOUT:
        goal, there = DealStatus.COMPLETED, {DealStatus.COMPLETED}
    elif status is PaymentStatus.REFUNDED:
        goal, there = DealStatus.REFUNDED, set(lifecycle.REFUNDING)
    elif status is PaymentStatus.PAID:
        goal, there = DealStatus.SIGNED, {DealStatus.SIGNED, *paths.PAID}
    else:
        goal, there = DealStatus.SIGNED, {DealStatus.SIGNED}
    if deal.status not in there:
        await paths.reach(session, deal, goal, settings)


async def deal_status(
    session: AsyncSession,
    integration: Integration,
    body: schemas.DealStatusTrigger,
    settings: Settings,
) -> Deal | None:
    if body.dealId is None:
        data = envelope.deal_status(
            uuid.uuid4(), (body.status or DealStatus.DRAFT).value, _time(body.statusDate)
        )
        await events.emit(session, integration.id, EventKind.DEAL_STATUS, data)
        return None
    if body.status is None:
        raise InvalidInput(
            "A status is required with a dealId.",
            errors=[{"field": "status", "message": "field required"}],
        )
    deal = await _deal(session, integration, body.dealId)
    await paths.reach(session, deal, body.status, settings)
    return deal


async def parcel_event(
    session: AsyncSession,
    integration: Integration,
    body: schemas.ParcelEventTrigger,
    settings: Settings,
) -> Deal | None:
    """The sandbox's carrier reports ``body.type`` about the deal's parcel, which is booked
    first (the deal fast-forwarded to ``Shipping_Pending`` as a Carrier deal where needed)."""
    if settings.carrier != "simulated":
        raise Conflict("The sandbox's carrier is off here (DEALBROKER_CARRIER=simulated).")
    if body.dealId is None:
        raise InvalidInput(
            "A dealId is required: the sandbox's carrier moves a deal's parcel.",
            errors=[{"field": "dealId", "message": "field required"}],
        )
    deal = await _deal(session, integration, body.dealId)
    if DealStatus(deal.status) in FINAL_STATUSES:
        raise Conflict(
            f"A deal in status {deal.status} has no parcel on its way.",
            extra={"currentStatus": deal.status},
        )
    if DealStatus(deal.status) in PARCEL_FIRST:
        if deal.shipping_type == "Pickup":
            raise Conflict("A Pickup deal has no parcel.", extra={"currentStatus": deal.status})
        await paths.reach(session, deal, DealStatus.SHIPPING_PENDING, settings)
    if deal.status == DealStatus.SHIPPING_PENDING:
        await parcels.simulate_booked(session, deal, settings)
    await parcels.simulate(session, deal, ParcelEventKind(body.type), settings)
    return deal


# The statuses from which a parcel event first walks the deal to its booking.
PARCEL_FIRST = frozenset({DealStatus.DRAFT, DealStatus.AD, DealStatus.SIGNED})


async def advance_clock(
    session: AsyncSession, integration: Integration, seconds: int, by: By | None = None
) -> tuple[int, int]:
    """Move the integration's sandbox clock ahead: its pending deal timers come that much closer.
    Returns ``(total offset, timers moved)``; once committed, ``let_time_pass`` fires what
    became due. A member's move (``by``, the developer portal) is audited in its transaction."""
    before = integration.clock_offset_seconds
    moved = await flows.advance_clock(session, integration.id, seconds)
    await integrations.add_clock_offset(session, integration, seconds)
    if by is not None:
        after = {"clockOffsetSeconds": integration.clock_offset_seconds, "timersMoved": moved}
        await audit_sandbox(
            session,
            by,
            integration.id,
            "sandbox.clock.advance",
            "integration",
            integration.id,
            after,
            before,
        )
    return integration.clock_offset_seconds, moved


async def advance_deal_clock(
    session: AsyncSession,
    integration: Integration,
    deal_id: uuid.UUID,
    seconds: int,
    by: By | None = None,
) -> dict[str, Any]:
    """Move one deal's own test clock ahead (``deals.flows.advance_deal_clock``); the answer's
    fields but ``timersFired``. Once committed, ``let_time_pass`` fires what became due. A
    member's move (``by``) is audited in its transaction."""
    deal, moved = await flows.advance_deal_clock(session, integration.id, deal_id, seconds)
    offsets = {**_offsets(integration, deal), "timersMoved": moved}
    if by is not None:
        after = {"seconds": seconds, **offsets}
        await audit_sandbox(
            session, by, integration.id, "sandbox.deal_clock.advance", "deal", deal.id, after
        )
    return offsets


async def audit_sandbox(
    session: AsyncSession,
    by: By,
    integration_id: uuid.UUID,
    action: str,
    target_type: str,
    target: object,
    after: dict[str, Any],
    before: object = None,
) -> None:
    """Record a member's sandbox action in the audit trail, in the action's transaction."""
    offset = None if before is None else {"clockOffsetSeconds": before}
    await by.record(
        session, integration_id, action, target_type, target, before=offset, after=after
    )


async def deal_clock(
    session: AsyncSession, integration: Integration, deal_id: uuid.UUID
) -> dict[str, Any]:
    """The deal's test clock: its offsets, the time it reads, its pending deadlines."""
    deal = await deal_service.get_for(session, integration.id, deal_id)
    offsets = _offsets(integration, deal)
    now = clock.now()
    pending = sorted(
        (t for t in await deal_repository.timers_of(session, deal.id) if t.fired_at is None),
        key=lambda t: t.due_at,
    )
    in_dispute = DealStatus(deal.status) in lifecycle.DISPUTES
    return {
        **offsets,
        "now": now,
        "clockTime": now + timedelta(seconds=offsets["totalOffsetSeconds"]),
        "decideBy": deal.decide_by if in_dispute else None,
        "timers": [
            {
                "trigger": t.trigger,
                "dueAt": t.due_at,
                "dueInSeconds": max(0, ceil((t.due_at - now).total_seconds())),
                "remindAt": t.remind_at if t.reminded_at is None else None,
            }
            for t in pending
        ],
    }


def _offsets(integration: Integration, deal: Deal) -> dict[str, Any]:
    return {
        "dealId": deal.id,
        "clockOffsetSeconds": deal.clock_offset_seconds,
        "integrationClockOffsetSeconds": integration.clock_offset_seconds,
        "totalOffsetSeconds": integration.clock_offset_seconds + deal.clock_offset_seconds,
    }


async def let_deal_time_pass(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings, deal_id: uuid.UUID
) -> int:
    """``let_time_pass`` after a move of one deal's clock; returns how many of that deal's
    pending timers it handled (fired, or closed as moot), not the other deals' due meanwhile."""
    async with sessionmaker() as session:
        pending = {
            t.id for t in await deal_repository.timers_of(session, deal_id) if t.fired_at is None
        }
    await let_time_pass(sessionmaker, settings)
    async with sessionmaker() as session:
        return sum(
            1
            for t in await deal_repository.timers_of(session, deal_id)
            if t.id in pending and t.fired_at is not None
        )


async def let_time_pass(sessionmaker: async_sessionmaker[AsyncSession], settings: Settings) -> int:
    """Do at once what the worker does as time passes, so an integrator sees the outcome in the
    answer: fire the deadlines now due, then make the refunds and payouts they decided, then send
    the reminders now due (of deadlines still to come: those that just fired get none). Each in
    transactions of its own, after the clock's move has committed. Returns the timers fired."""
    fired = await fire_due_timers(sessionmaker, settings)
    await make_pending_calls(sessionmaker, settings)
    await send_due_reminders(sessionmaker)
    return fired
