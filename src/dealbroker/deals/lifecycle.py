"""The deal lifecycle: every legal status transition, in one table.

Nothing else decides whether a deal's ``status`` may change. Each row says from which statuses a
trigger moves a deal to which status, and which actors may fire it. The API, the web pages, the
sandbox and the timers all go through ``transition_for`` (via the deal service), so a status can
only move along this table. The table follows DESIGN.md's lifecycle diagram.
"""

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from dealbroker.core.statuses import DealStatus
from dealbroker.payments.escrow import Escrow


class Trigger(StrEnum):
    SELLER_SIGNED = "seller_signed"
    BUYER_SIGNED = "buyer_signed"
    PAID_FOR_SHIPPING = "paid_for_shipping"
    PAID_FOR_PICKUP = "paid_for_pickup"
    CANCEL = "cancel"
    CARRIER_PICKED_UP = "carrier_picked_up"
    CARRIER_DELIVERED = "carrier_delivered"
    CARRIER_RETURNED = "carrier_returned"
    SHIPPING_EXPIRED = "shipping_expired"
    PICKUP_EXPIRED = "pickup_expired"
    BUYER_APPROVED = "buyer_approved"
    HANDOVER_CONFIRMED = "handover_confirmed"  # the seller enters the buyer's handover code
    BUYER_DENIED = "buyer_denied"
    REVIEW_PERIOD_ENDED = "review_period_ended"
    REFUND = "refund"
    DISPUTE_RELEASED = "dispute_released"
    DISPUTE_REFUNDED = "dispute_refunded"
    # A parcel in transit always resolves: the buyer reports it missing, or its deadline passes.
    BUYER_NOT_RECEIVED = "buyer_not_received"
    TRANSIT_EXPIRED = "transit_expired"
    # The carrier says the parcel is lost (a carrier dealbroker booked: ``parcels``).
    CARRIER_LOST = "carrier_lost"
    # Every deal ends: the seller's recourse at a pickup, and the approval that lapses.
    SELLER_REPORTED_PROBLEM = "seller_reported_problem"
    APPROVAL_LAPSED = "approval_lapsed"
    # Disputes decided on evidence: return then refund. The deal stays in its dispute status
    # while the item goes back (``deals.returns``), then ends Refunded, or Completed when the
    # buyer does not send it.
    RETURN_REQUESTED = "return_requested"  # the operator's decision
    RETURN_SENT = "return_sent"  # the buyer gives the carrier and tracking number
    RETURN_RECEIVED = "return_received"  # the seller confirms they have the item back
    RETURN_CONFIRM_EXPIRED = "return_confirm_expired"  # the seller's deadline to confirm passed
    RETURN_NOT_SENT = "return_not_sent"  # the buyer's deadline to send it back passed


class Actor(StrEnum):
    INTEGRATION = "integration"
    SELLER = "seller"
    BUYER = "buyer"
    PROVIDER = "provider"  # payment provider or carrier
    TIMER = "timer"
    OPERATOR = "operator"
    SANDBOX = "sandbox"  # the sandbox may fire every transition to let integrators test


class Effect(StrEnum):
    """What else happens, in the same transaction, when a transition is made."""

    SHIPPING_DEADLINE = "shipping_deadline"
    PICKUP_DEADLINE = "pickup_deadline"
    HANDOVER_CODE = "handover_code"
    REVIEW_DEADLINE = "review_deadline"
    REFUND = "refund"
    REFUND_PAYMENT = "refund_payment"
    PAY_OUT = "pay_out"
    DENY_PENDING_OFFERS = "deny_pending_offers"
    CLOSE_PAYMENT = "close_payment"
    # A parcel in transit always resolves.
    TRANSIT_DEADLINE = "transit_deadline"
    NOT_RECEIVED = "not_received"
    PARCEL_LOST = "parcel_lost"
    # Every deal ends: what the passing of the approved buyer's deadline to sign and pay does.
    LAPSE_APPROVAL = "lapse_approval"
    # Disputes decided on evidence.
    DECISION_DATE = "decision_date"
    RETURN_SEND_DEADLINE = "return_send_deadline"
    RETURN_CONFIRM_DEADLINE = "return_confirm_deadline"


# What each actor and effect means, in words: published with the table (GET /deals/v1/lifecycle).
ACTOR_NOTES = {
    Actor.INTEGRATION: "The marketplace, through POST /deals/v1/deals/{dealId}/status.",
    Actor.SELLER: "The seller, on the deal's page.",
    Actor.BUYER: "The buyer, on the offer link's page.",
    Actor.PROVIDER: "The payment provider or the carrier.",
    Actor.TIMER: "A deadline falling due.",
    Actor.OPERATOR: "The service's operator, deciding a dispute: release to the seller, refund "
    "to the buyer, or return then refund.",
    Actor.SANDBOX: "In the sandbox only: the integration (status endpoint and triggers) may "
    "fire every transition but approval_lapsed (reached by moving the sandbox clock), to test "
    "its flows.",
}
EFFECT_NOTES = {
    Effect.SHIPPING_DEADLINE: "Sets the 7-day deadline to hand the item to the carrier.",
    Effect.PICKUP_DEADLINE: "Sets the 7-day deadline to pick the item up and approve it.",
    Effect.HANDOVER_CODE: "Makes the code the buyer shows the seller at a pickup.",
    Effect.REVIEW_DEADLINE: "Sets the 24-hour review deadline, after which the item is approved.",
    Effect.REFUND: "The deal moves on to Refunded at once (transition 'refund').",
    Effect.REFUND_PAYMENT: "The buyer gets the whole amount back.",
    Effect.PAY_OUT: "Amount minus fee is paid out to the seller, once they have a payout account.",
    Effect.DENY_PENDING_OFFERS: "Every pending offer is denied (a deal.offerDenied event each).",
    Effect.CLOSE_PAYMENT: "The open payment, if any, is cancelled (PaymentCancelled) with the "
    "provider's checkout, so the buyer can no longer pay; money the provider takes all the same "
    "is refunded in full.",
    Effect.TRANSIT_DEADLINE: "Sets the deadline (DEALBROKER_TRANSIT_DEADLINE_DAYS, 14 days by "
    "default) for the parcel to arrive; then the deal goes to dispute as not received.",
    Effect.NOT_RECEIVED: "The dispute's reason is 'not received' ('lost' for a parcel "
    "dealbroker booked, whose transit deadline is DEALBROKER_CARRIER_LOST_AFTER_DAYS, 30 days "
    "by default).",
    Effect.PARCEL_LOST: "The dispute's reason is 'lost': the carrier lost the parcel; the "
    "dispute's dossier gives the operator what to claim the loss from the carrier with.",
    # Every deal ends.
    Effect.LAPSE_APPROVAL: "The approved buyer is no longer the deal's buyer: their offer is "
    "Lapsed (a deal.offerDenied event), the price is the seller's asking price again, and every "
    "buyer who had offered is told they may offer again.",
    # Disputes decided on evidence.
    Effect.DECISION_DATE: "Sets the date by which the operator decides the dispute "
    "(DEALBROKER_DISPUTE_DECISION_BUSINESS_DAYS business days, Monday to Friday, 5 by "
    "default); nothing is decided automatically when it passes.",
    Effect.RETURN_SEND_DEADLINE: "Sets the buyer's deadline (DEALBROKER_RETURN_SEND_DAYS, 7 days "
    "by default) to send the item back to the seller's return address with a tracking number; "
    "if it passes unsent, the money is released to the seller (return_not_sent).",
    Effect.RETURN_CONFIRM_DEADLINE: "Sets the seller's deadline (DEALBROKER_RETURN_CONFIRM_DAYS, "
    "14 days by default, from the buyer's sending) to confirm they have the item back; if it "
    "passes, the buyer is refunded all the same (return_confirm_expired).",
}


@dataclass(frozen=True)
class Transition:
    sources: frozenset[DealStatus]
    trigger: Trigger
    target: DealStatus
    actors: frozenset[Actor]
    effects: tuple[Effect, ...] = ()


def _t(
    sources: set[DealStatus],
    trigger: Trigger,
    target: DealStatus,
    *actors: Actor,
    effects: tuple[Effect, ...] = (),
) -> Transition:
    return Transition(
        frozenset(sources), trigger, target, frozenset({*actors, Actor.SANDBOX}), effects
    )


# Deadlines: the trigger a timer fires, and after how many seconds.
DEADLINES = {
    Effect.SHIPPING_DEADLINE: (Trigger.SHIPPING_EXPIRED, 7 * 24 * 3600),
    Effect.PICKUP_DEADLINE: (Trigger.PICKUP_EXPIRED, 7 * 24 * 3600),
    Effect.REVIEW_DEADLINE: (Trigger.REVIEW_PERIOD_ENDED, 24 * 3600),
    # The default; the deployment's setting (``transit_deadline_days``) decides.
    Effect.TRANSIT_DEADLINE: (Trigger.TRANSIT_EXPIRED, 14 * 24 * 3600),
    # The defaults; the settings ``return_send_days`` and ``return_confirm_days`` decide.
    Effect.RETURN_SEND_DEADLINE: (Trigger.RETURN_NOT_SENT, 7 * 24 * 3600),
    Effect.RETURN_CONFIRM_DEADLINE: (Trigger.RETURN_CONFIRM_EXPIRED, 14 * 24 * 3600),
}


@dataclass(frozen=True)
class DeadlineDays:
    """The deadlines a deployment sets in days (its settings ``transit_deadline_days``,
    ``return_send_days``, ``return_confirm_days``); the table's defaults otherwise."""

    transit: int = 14
    return_send: int = 7
    return_confirm: int = 14


def deadline_seconds(effect: Effect, days: DeadlineDays) -> int:
    """How long the deadline ``effect`` sets runs: the transit and return deadlines are the
    deployment's (``days``), the others are the table's."""
    configured = {
        Effect.TRANSIT_DEADLINE: days.transit,
        Effect.RETURN_SEND_DEADLINE: days.return_send,
        Effect.RETURN_CONFIRM_DEADLINE: days.return_confirm,
    }
    if effect in configured:
        return configured[effect] * 24 * 3600
    return DEADLINES[effect][1]


# The reason a dispute opened because the parcel did not arrive is stored with (the pages and
# messages word it in the reader's language).
NOT_RECEIVED_REASON = "not received"
# ... and because the carrier lost it (its word, or a parcel dealbroker booked that did not
# arrive within ``carrier_lost_after_days``).
LOST_REASON = "lost"


S = DealStatus
DISPUTES = {S.SHIPPING_REVIEW_DENIED, S.PICKUP_DENIED}
# The statuses of a deal being refunded: Refunded, or an expiry or return on its way there.
REFUNDING = frozenset({S.SHIPPING_EXPIRED, S.SHIPPING_RETURNED, S.PICKUP_EXPIRED, S.REFUNDED})


def refund_keeps_shipping(source: DealStatus) -> bool:
    """Whether a refund from ``source`` keeps the shipping price: only for a parcel the buyer
    did not collect (``Shipping_Returned``), which travelled at their cost, whoever pays the
    shipping. Every other refund (expired, a dispute decided for the buyer) is the whole
    amount."""
    return source is S.SHIPPING_RETURNED


def escrow(status: DealStatus) -> Escrow:
    """What a deal in ``status`` lets escrow do with the buyer's money (payments asks, the
    lifecycle answers): take it while the deal is Signed, pay it out to the seller once the
    deal is Completed, give it back while the deal is being refunded, else hold it."""
    if status is S.SIGNED:
        return Escrow.AWAITING_PAYMENT
    if status is S.COMPLETED:
        return Escrow.RELEASE
    if status in REFUNDING:
        return Escrow.REFUND
    return Escrow.HELD


TRANSITIONS: tuple[Transition, ...] = (
    _t({S.DRAFT}, Trigger.SELLER_SIGNED, S.AD, Actor.SELLER),
    _t({S.AD}, Trigger.BUYER_SIGNED, S.SIGNED, Actor.BUYER),
    _t(
        {S.DRAFT, S.AD, S.SIGNED},
        Trigger.CANCEL,
        S.CANCELLED,
        Actor.INTEGRATION,
        Actor.SELLER,
        effects=(Effect.DENY_PENDING_OFFERS, Effect.CLOSE_PAYMENT),
    ),
    _t(
        {S.SIGNED},
        Trigger.PAID_FOR_SHIPPING,
        S.SHIPPING_PENDING,
        Actor.PROVIDER,
        effects=(Effect.SHIPPING_DEADLINE,),
    ),
    _t(
        {S.SIGNED},
        Trigger.PAID_FOR_PICKUP,
        S.PICKUP_PENDING,
        Actor.PROVIDER,
        effects=(Effect.PICKUP_DEADLINE, Effect.HANDOVER_CODE),
    ),
    _t(
        {S.SHIPPING_PENDING},
        Trigger.CARRIER_PICKED_UP,
        S.SHIPPING_IN_PROGRESS,
        Actor.PROVIDER,
        Actor.SELLER,
        effects=(Effect.TRANSIT_DEADLINE,),
    ),
    _t(
        {S.SHIPPING_PENDING},
        Trigger.SHIPPING_EXPIRED,
        S.SHIPPING_EXPIRED,
        Actor.TIMER,
        effects=(Effect.REFUND,),
    ),
    _t(
        {S.SHIPPING_IN_PROGRESS},
        Trigger.CARRIER_DELIVERED,
        S.SHIPPING_ARRIVED,
        Actor.PROVIDER,
        Actor.BUYER,
        effects=(Effect.REVIEW_DEADLINE,),
    ),
    _t(
        {S.SHIPPING_IN_PROGRESS},
        Trigger.CARRIER_RETURNED,
        S.SHIPPING_RETURNED,
        Actor.PROVIDER,
        effects=(Effect.REFUND,),
    ),
    _t(
        {S.SHIPPING_ARRIVED},
        Trigger.BUYER_APPROVED,
        S.COMPLETED,
        Actor.BUYER,
        effects=(Effect.PAY_OUT,),
    ),
    _t(
        {S.SHIPPING_ARRIVED},
        Trigger.REVIEW_PERIOD_ENDED,
        S.COMPLETED,
        Actor.TIMER,
        effects=(Effect.PAY_OUT,),
    ),
    _t(
        {S.SHIPPING_ARRIVED},
        Trigger.BUYER_DENIED,
        S.SHIPPING_REVIEW_DENIED,
        Actor.BUYER,
        effects=(Effect.DECISION_DATE,),
    ),
    _t(
        {S.PICKUP_PENDING},
        Trigger.BUYER_APPROVED,
        S.COMPLETED,
        Actor.BUYER,
        effects=(Effect.PAY_OUT,),
    ),
    # At a pickup the seller confirms the handover with the code the buyer shows: it completes
    # the deal as the buyer's approval would, so a buyer who takes the item and never taps
    # "approve" is not refunded after 7 days.
    _t(
        {S.PICKUP_PENDING},
        Trigger.HANDOVER_CONFIRMED,
        S.COMPLETED,
        Actor.SELLER,
        effects=(Effect.PAY_OUT,),
    ),
    _t(
        {S.PICKUP_PENDING},
        Trigger.BUYER_DENIED,
        S.PICKUP_DENIED,
        Actor.BUYER,
        effects=(Effect.DECISION_DATE,),
    ),
    _t(
        {S.PICKUP_PENDING},
        Trigger.PICKUP_EXPIRED,
        S.PICKUP_EXPIRED,
        Actor.TIMER,
        effects=(Effect.REFUND,),
    ),
    _t(
        {S.SHIPPING_EXPIRED, S.SHIPPING_RETURNED, S.PICKUP_EXPIRED},
        Trigger.REFUND,
        S.REFUNDED,
        Actor.PROVIDER,
        Actor.TIMER,
        effects=(Effect.REFUND_PAYMENT,),
    ),
    _t(DISPUTES, Trigger.DISPUTE_RELEASED, S.COMPLETED, Actor.OPERATOR, effects=(Effect.PAY_OUT,)),
    _t(
        DISPUTES,
        Trigger.DISPUTE_REFUNDED,
        S.REFUNDED,
        Actor.OPERATOR,
        effects=(Effect.REFUND_PAYMENT,),
    ),
    # --- a parcel in transit always resolves: the buyer reports it missing once the usual
    # delivery time has passed (a guard in ``parties``), or the transit deadline does.
    _t(
        {S.SHIPPING_IN_PROGRESS},
        Trigger.BUYER_NOT_RECEIVED,
        S.SHIPPING_REVIEW_DENIED,
        Actor.BUYER,
        effects=(Effect.NOT_RECEIVED, Effect.DECISION_DATE),
    ),
    _t(
        {S.SHIPPING_IN_PROGRESS},
        Trigger.CARRIER_LOST,
        S.SHIPPING_REVIEW_DENIED,
        Actor.PROVIDER,
        effects=(Effect.PARCEL_LOST, Effect.DECISION_DATE),
    ),
    _t(
        {S.SHIPPING_IN_PROGRESS},
        Trigger.TRANSIT_EXPIRED,
        S.SHIPPING_REVIEW_DENIED,
        Actor.TIMER,
        effects=(Effect.NOT_RECEIVED, Effect.DECISION_DATE),
    ),
    # --- every deal ends ---
    # A pickup buyer who leaves with the item without giving the code, or never comes: the
    # seller reports it before the 7 days run out, and the deal goes to the manual dispute with
    # the seller's reason instead of refunding (the pickup timer then finds it moved on).
    _t(
        {S.PICKUP_PENDING},
        Trigger.SELLER_REPORTED_PROBLEM,
        S.PICKUP_DENIED,
        Actor.SELLER,
        effects=(Effect.DECISION_DATE,),
    ),
    # The approved buyer did not sign and pay in time: the approval lapses and the deal takes
    # offers again, in Ad if the seller had signed, else in Draft. Its open payment is closed.
    # Only the approval's timer fires it (it needs an approved offer, which the status alone
    # does not say): the sandbox reaches it by moving its clock.
    Transition(
        frozenset({S.AD, S.SIGNED}),
        Trigger.APPROVAL_LAPSED,
        S.AD,
        frozenset({Actor.TIMER}),
        (Effect.CLOSE_PAYMENT, Effect.LAPSE_APPROVAL),
    ),
    Transition(
        frozenset({S.DRAFT}),
        Trigger.APPROVAL_LAPSED,
        S.DRAFT,
        frozenset({Actor.TIMER}),
        (Effect.CLOSE_PAYMENT, Effect.LAPSE_APPROVAL),
    ),
    # --- disputes decided on evidence: return then refund ---
    # The operator decides that the buyer sends the item back and is then refunded. The deal
    # stays in its dispute status while the item travels (the interface fixes the statuses);
    # these rows need a return under way, which the status alone does not say (guards in
    # ``deals.flows``), so only the named actors fire them, never the sandbox's status endpoint.
    *(
        Transition(frozenset({dispute}), trigger, dispute, frozenset({actor}), (deadline,))
        for trigger, actor, deadline in (
            (Trigger.RETURN_REQUESTED, Actor.OPERATOR, Effect.RETURN_SEND_DEADLINE),
            (Trigger.RETURN_SENT, Actor.BUYER, Effect.RETURN_CONFIRM_DEADLINE),
        )
        for dispute in sorted(DISPUTES)
    ),
    Transition(
        frozenset(DISPUTES),
        Trigger.RETURN_RECEIVED,
        S.REFUNDED,
        frozenset({Actor.SELLER}),
        (Effect.REFUND_PAYMENT,),
    ),
    Transition(
        frozenset(DISPUTES),
        Trigger.RETURN_CONFIRM_EXPIRED,
        S.REFUNDED,
        frozenset({Actor.TIMER}),
        (Effect.REFUND_PAYMENT,),
    ),
    # The buyer did not send the item back in time: they keep it, so the seller is paid.
    Transition(
        frozenset(DISPUTES),
        Trigger.RETURN_NOT_SENT,
        S.COMPLETED,
        frozenset({Actor.TIMER}),
        (Effect.PAY_OUT,),
    ),
)
# The ends of a return then refund: each needs the return at its stage (``deals.flows``).
RETURN_ENDS = frozenset(
    {Trigger.RETURN_RECEIVED, Trigger.RETURN_CONFIRM_EXPIRED, Trigger.RETURN_NOT_SENT}
)

FINAL_STATUSES = frozenset({S.CANCELLED, S.REFUNDED, S.COMPLETED})
# Statuses in which a deal still takes buyer offers (DESIGN.md: "Draft or Ad, with seller data").
OFFER_STATUSES = frozenset({S.DRAFT, S.AD})


def transition_for(status: DealStatus, trigger: Trigger, actor: Actor) -> Transition | None:
    """The transition ``trigger`` fires from ``status`` for ``actor``, if it is legal."""
    return _first_legal(status, actor, lambda transition: transition.trigger is trigger)


def transition_to(status: DealStatus, target: DealStatus, actor: Actor) -> Transition | None:
    """A legal transition from ``status`` straight to ``target`` for ``actor``, if any."""
    return _first_legal(status, actor, lambda transition: transition.target is target)


def _first_legal(
    status: DealStatus, actor: Actor, chosen: Callable[[Transition], bool]
) -> Transition | None:
    """The first transition of the table that ``chosen`` picks and ``actor`` may fire from
    ``status``."""
    return next(
        (t for t in TRANSITIONS if chosen(t) and status in t.sources and actor in t.actors), None
    )


def allowed_targets(status: DealStatus, actor: Actor) -> list[DealStatus]:
    """The statuses ``actor`` may move a deal in ``status`` to, in table order, without repeats."""
    targets = [t.target for t in TRANSITIONS if status in t.sources and actor in t.actors]
    return list(dict.fromkeys(targets))
