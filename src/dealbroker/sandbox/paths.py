"""Fast-forwarding a deal along the lifecycle, for the sandbox.

A trigger whose effect the deal's status does not allow yet, and every scenario, first drives the
deal to where the effect can happen: along the lifecycle table, one transition at a time, each
through the service the pages, the API, the provider or the timers would call, so every
intermediate event is the real one, in the real order. Where a step needs something the deal
lacks (a seller with an e-mail, a buyer, a payment), the sandbox provides it through the real
service too, as clearly marked sandbox data (names "Sandbox ...", addresses under
``sandbox.example.com``).

``plan`` finds the shortest path in the table; ``reach`` walks it. A status no path reaches (out
of a final status, or back before a step already taken) raises ``Unreachable``.
"""

from collections import deque

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.errors import IllegalTransition
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import flows, lifecycle
from dealbroker.deals import service as deals
from dealbroker.deals.actions import takes_offers
from dealbroker.deals.lifecycle import FINAL_STATUSES, Actor, Effect, Transition, Trigger
from dealbroker.deals.models import Deal
from dealbroker.offers import service as offers
from dealbroker.offers.models import Offer, OfferStatus
from dealbroker.payments import service as payments
from dealbroker.settlement import settle_payment
from dealbroker.signatures import service as signatures
from dealbroker.signatures.service import SignatureStatus, SignatureType

SANDBOX_DOMAIN = "sandbox.example.com"  # example.com is reserved (RFC 2606): mail goes nowhere
SANDBOX_BUYER = ("Sandbox Buyer", f"buyer@{SANDBOX_DOMAIN}")
SANDBOX_SELLER = {"firstname": "Sandbox", "lastname": "Seller", "email": f"seller@{SANDBOX_DOMAIN}"}
SANDBOX_PRICE_MINOR = 100_00  # when neither the deal nor the trigger names a price
SANDBOX_SHIPMENT = {"carrier": "Sandbox Carrier", "tracking": "SANDBOX-0000000001"}
SANDBOX_DISPUTE = "Sandbox: the buyer denied the item (simulated)."
SHIPPING_TYPES = ("Carrier", "Pickup")

S = DealStatus
# Where the buyer's payment is held: paid, not yet paid out or refunded.
PAID = frozenset(
    {
        S.SHIPPING_PENDING,
        S.SHIPPING_IN_PROGRESS,
        S.SHIPPING_ARRIVED,
        S.SHIPPING_REVIEW_DENIED,
        S.PICKUP_PENDING,
        S.PICKUP_DENIED,
    }
)


class Unreachable(IllegalTransition):
    """No path of the lifecycle leads from the deal's status to what was asked (the trigger
    routes map it to a code the interface lists for them)."""


def _landing(transition: Transition) -> DealStatus:
    """Where a transition leaves the deal: an expiry or a return goes on to ``Refunded`` at once
    (its refund effect), so the deal never rests in between."""
    if Effect.REFUND in transition.effects:
        return S.REFUNDED
    return transition.target


def _allowed(transition: Transition, shipping: str | None) -> bool:
    """Whether a path may take ``transition`` for a deal shipped by ``shipping``: the payment
    moves a deal to the pending status of its agreed shipping type."""
    if transition.trigger is Trigger.REFUND:
        return False  # never a step of its own: the expiry's or return's effect fires it
    if transition.trigger in (Trigger.BUYER_NOT_RECEIVED, Trigger.TRANSIT_EXPIRED):
        # A path to a dispute goes through the arrived item's denial, as it always has; the
        # not-received dispute comes from the buyer's page or the transit deadline.
        return False
    if Actor.SANDBOX not in transition.actors:
        return False  # only its timer fires it (an approval that lapses)
    if shipping == "Carrier" and transition.trigger is Trigger.PAID_FOR_PICKUP:
        return False
    return not (shipping == "Pickup" and transition.trigger is Trigger.PAID_FOR_SHIPPING)


def _search(start: DealStatus, goal: DealStatus, shipping: str | None) -> list[Transition] | None:
    """The shortest path from ``start`` whose last transition leads to ``goal`` (at least one
    transition), preferring the table's order among equals; ``None`` if there is none."""
    frontier: deque[tuple[DealStatus, list[Transition]]] = deque([(start, [])])
    seen = {start}
    while frontier:
        status, path = frontier.popleft()
        for transition in lifecycle.TRANSITIONS:
            if status not in transition.sources or not _allowed(transition, shipping):
                continue
            steps = [*path, transition]
            if goal in (transition.target, _landing(transition)):
                return steps
            landing = _landing(transition)
            if landing not in seen:
                seen.add(landing)
                frontier.append((landing, steps))
    return None


def shipping_of(deal: Deal) -> str | None:
    """The deal's agreed shipping type; ``None`` while no offer is approved (the sandbox may
    still choose)."""
    return deal.shipping_type if deal.buyer_user_id is not None else None


def plan(
    deal: Deal, goal: DealStatus, shipping: str | None = None
) -> tuple[list[Transition], str | None]:
    """The path that takes ``deal`` to ``goal``, and the shipping type the buyer's offer must
    have for it (``None`` when the path does not depend on it). The deal's agreed type binds;
    otherwise ``shipping``, else ``Carrier`` where it leads there (the default of ``dealOffer``)
    and ``Pickup`` where only a pickup does."""
    found = _find(deal, goal, shipping)
    if found is None:
        raise unreachable(deal, goal.value)
    return found


def _find(
    deal: Deal, goal: DealStatus, shipping: str | None
) -> tuple[list[Transition], str | None] | None:
    agreed = shipping_of(deal)
    choices = [agreed] if agreed else [shipping] if shipping else list(SHIPPING_TYPES)
    for choice in choices:
        path = _search(DealStatus(deal.status), goal, choice)
        if path is not None:
            return path, _needs(path)
    return None


def _needs(path: list[Transition]) -> str | None:
    """The shipping type a path's payment step needs, if it has one."""
    for transition in path:
        if transition.trigger is Trigger.PAID_FOR_PICKUP:
            return "Pickup"
        if transition.trigger is Trigger.PAID_FOR_SHIPPING:
            return "Carrier"
    return None


def reachable(deal: Deal) -> list[DealStatus]:
    """Every status a path leads to from the deal's, in the order of the lifecycle's statuses."""
    return [status for status in DealStatus if _find(deal, status, None) is not None]


def unreachable(deal: Deal, what: str) -> Unreachable:
    allowed = [s.value for s in reachable(deal)] if deal.status not in FINAL_STATUSES else []
    return Unreachable(
        f"A deal in status {deal.status} cannot reach {what}: no path of the lifecycle leads "
        + (f"there from here (it can reach: {', '.join(allowed)})." if allowed else "out of it."),
        extra={"currentStatus": deal.status, "allowedStatuses": allowed},
    )


async def reach(
    session: AsyncSession,
    deal: Deal,
    goal: DealStatus,
    settings: Settings,
    shipping: str | None = None,
) -> None:
    """Move ``deal`` (row locked by the caller) along the shortest path to ``goal``, through the
    real services, each step with its events. ``Unreachable`` before any step if none leads."""
    path, chosen = plan(deal, goal, shipping)
    for transition in path:
        await take(session, deal, transition.trigger, settings, chosen)


async def take(
    session: AsyncSession, deal: Deal, trigger: Trigger, settings: Settings, shipping: str | None
) -> None:
    """One step of a path, as the party it belongs to would take it."""
    if trigger is Trigger.SELLER_SIGNED:
        await ensure_seller(session, deal)
        await sign(session, deal, SignatureType.SELLER, settings)
    elif trigger is Trigger.BUYER_SIGNED:
        await ensure_buyer(session, deal, shipping, settings)
        await sign(session, deal, SignatureType.BUYER, settings)
    elif trigger in (Trigger.PAID_FOR_SHIPPING, Trigger.PAID_FOR_PICKUP):
        await pay(session, deal, settings)
    elif trigger is Trigger.CARRIER_PICKED_UP:
        # The seller hands the package over and says which carrier has it.
        deal.shipment = deal.shipment or dict(SANDBOX_SHIPMENT)
        await flows.fire(session, deal, trigger, Actor.SANDBOX, settings)
    elif trigger is Trigger.BUYER_DENIED:
        deal.dispute_reason = deal.dispute_reason or SANDBOX_DISPUTE
        await flows.fire(session, deal, trigger, Actor.SANDBOX, settings)
    else:
        await flows.fire(session, deal, trigger, Actor.SANDBOX, settings)


async def ensure_seller(session: AsyncSession, deal: Deal) -> None:
    """A draft without a seller's e-mail gets the sandbox seller's, as a seller completing the
    draft on their page would give theirs (``update_details``): offers and the seller's
    signature need it. Outside a draft nothing can add it any more."""
    if (deal.seller or {}).get("email") and deal.seller_user_id is not None:
        return
    if deal.status != DealStatus.DRAFT:
        raise unreachable(deal, "a seller with an e-mail")
    seller = {**SANDBOX_SELLER, **{k: v for k, v in (deal.seller or {}).items() if v}}
    seller["email"] = (deal.seller or {}).get("email") or SANDBOX_SELLER["email"]
    await deals.update_details(session, deal, {}, seller)


async def sandbox_offer(
    session: AsyncSession, deal: Deal, shipping: str, price_minor: int | None = None
) -> Offer:
    """A pending offer from the sandbox buyer, at ``price_minor`` or the deal's price."""
    await ensure_seller(session, deal)
    if not takes_offers(deal):
        raise unreachable(deal, "a pending offer")
    return await offers.submit(
        session,
        deal,
        price_minor=price_minor or deal.price_minor or SANDBOX_PRICE_MINOR,
        shipping_type=shipping,
        buyer_name=SANDBOX_BUYER[0],
        buyer_email=SANDBOX_BUYER[1],
    )


async def pending_offer(session: AsyncSession, deal: Deal, shipping: str | None) -> Offer:
    """The deal's oldest pending offer (of ``shipping`` when given), or a new sandbox one."""
    for offer in await offers.offers_of(session, deal):
        if offer.status == OfferStatus.PENDING and shipping in (None, offer.shipping_type):
            return offer
    return await sandbox_offer(session, deal, shipping or "Carrier")


async def ensure_buyer(
    session: AsyncSession, deal: Deal, shipping: str | None, settings: Settings
) -> None:
    """A deal without a buyer gets one as the seller would: approving its oldest pending offer
    (of the shipping type the path needs), or, with none, the sandbox buyer's new offer."""
    if deal.buyer_user_id is not None:
        return
    await ensure_seller(session, deal)
    offer = await pending_offer(session, deal, shipping)
    await offers.approve(session, deal, offer, settings)


async def sign(
    session: AsyncSession,
    deal: Deal,
    party: SignatureType,
    settings: Settings,
    *,
    statuses: tuple[SignatureStatus, ...] = (SignatureStatus.INITIATED, SignatureStatus.COMPLETED),
) -> None:
    """The party signs as on their page: the signature is initiated, then completed."""
    for status in statuses:
        await signatures.record(session, deal, party, status, Actor.SANDBOX, settings)


async def pay(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    """The buyer pays as at the checkout: a payment is started and the (simulated) provider
    reports it succeeded, which moves the deal on by its shipping type."""
    await payments.start(session, deal, settings)
    await settle_payment(session, deal, "succeeded", settings)


def could_take_offers(deal: Deal) -> bool:
    """Whether the deal takes offers, or will once the sandbox seller completes its draft."""
    if takes_offers(deal):
        return True
    return deal.status == DealStatus.DRAFT and deal.buyer_user_id is None


async def has_pending_offer(session: AsyncSession, deal: Deal) -> bool:
    return any(o.status == OfferStatus.PENDING for o in await offers.offers_of(session, deal))
