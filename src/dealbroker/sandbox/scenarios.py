"""Sandbox scenarios: one call drives a deal down a whole named path of the lifecycle.

Each scenario is a list of steps, each the service call of the party that takes it (the seller's
page, the buyer's, the carrier, the operator, the payment provider), so the deal changes and its
webhooks are exactly those of a real deal, in order. A new deal is created for the scenario, or
a given one is taken from where it stands: a deal before the scenario's start is fast-forwarded
there (``sandbox.paths``), one already partway down the path goes on from its step. Where a step
is time passing (7 days to pick up, 24 hours to review), the deal's deadlines are brought
forward and fire as the worker would fire them; the refunds and payouts the path decides are
made before the answer, as the simulated provider makes them.
"""

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker import parties
from dealbroker.auth.service import Principal
from dealbroker.carriers.base import ParcelEventKind
from dealbroker.core.i18n import N_
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import flows
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import DEADLINES, Actor, Effect, Trigger
from dealbroker.deals.models import Deal
from dealbroker.deals.schemas import DealCreate
from dealbroker.deals.tasks import fire_due_timers
from dealbroker.events import service as events
from dealbroker.events.service import By
from dealbroker.integrations.models import Integration
from dealbroker.parcels import service as parcels
from dealbroker.payments import repository as payment_calls
from dealbroker.payments import service as payments
from dealbroker.payments.tasks import make_pending_calls
from dealbroker.sandbox import paths
from dealbroker.sandbox.paths import SANDBOX_DISPUTE, SANDBOX_SELLER, SANDBOX_SHIPMENT
from dealbroker.settlement import settle_payment

S = DealStatus
Act = Callable[[AsyncSession, Deal, Settings], Awaitable[Any]]
# A valid Norwegian account number of the kind banks publish for tests; the simulated provider
# pays nothing into it.
SANDBOX_ACCOUNT = ("Sandbox Seller", "86011117947")
MAX_EVENTS = 1000
MAX_CALL_WAIT = 10.0  # seconds a scenario waits for a payout a running worker is making


@dataclass(frozen=True)
class Step:
    """One step of a path, taken from one of ``at``. ``act`` runs in a transaction with the
    deal locked; a step with ``wait`` instead lets that many seconds pass for the deal."""

    at: frozenset[DealStatus]
    act: Act | None = None
    wait: int = 0


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    shipping: str | None  # the shipping type the path needs, if it needs one
    start: DealStatus  # where the path's own steps begin
    steps: tuple[Step, ...]


def _step(*at: DealStatus, act: Act) -> Step:
    return Step(frozenset(at), act)


def _wait(effect: Effect, *at: DealStatus) -> Step:
    return Step(frozenset(at), wait=DEADLINES[effect][1])


# --- the parties' actions ----------------------------------------------------------------------


async def _buyer_offers(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await paths.sandbox_offer(session, deal, "Carrier")


async def _integration_cancels(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await flows.fire(session, deal, Trigger.CANCEL, Actor.INTEGRATION, settings)


async def _payment_fails(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await payments.start(session, deal, settings)
    await settle_payment(session, deal, "failed", settings)


async def _payment_succeeds(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await paths.pay(session, deal, settings)


async def _seller_hands_to_carrier(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    if settings.carrier == "simulated":
        # The parcel booked with the sandbox's carrier, which scans it in.
        await parcels.simulate_booked(session, deal, settings)
        await parcels.simulate(session, deal, ParcelEventKind.PICKED_UP, settings)
        return
    carrier, tracking = SANDBOX_SHIPMENT["carrier"], SANDBOX_SHIPMENT["tracking"]
    await parties.hand_to_carrier(session, deal, carrier, tracking, settings)


async def _carrier_delivers(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await parties.carrier_reports(session, deal, True, settings)


async def _carrier_returns(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await parties.carrier_reports(session, deal, False, settings)


async def _buyer_approves(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await flows.fire(session, deal, Trigger.BUYER_APPROVED, Actor.BUYER, settings)


async def _buyer_denies(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    deal.dispute_reason = SANDBOX_DISPUTE
    await flows.fire(session, deal, Trigger.BUYER_DENIED, Actor.BUYER, settings)


async def _seller_confirms_handover(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    # The seller types the code the buyer's page shows at the meeting.
    await parties.confirm_pickup(session, deal, deal.handover_code, settings)


async def _operator_releases(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await flows.resolve_dispute(session, deal.id, flows.DisputeOutcome.RELEASE, settings)


async def _operator_refunds(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    await flows.resolve_dispute(session, deal.id, flows.DisputeOutcome.REFUND, settings)


async def _seller_registers_account(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    holder, number = SANDBOX_ACCOUNT
    await parties.register_payout_account(session, deal, holder, number)


# --- the scenarios -----------------------------------------------------------------------------

SHIPPED = (
    _step(S.SHIPPING_PENDING, act=_seller_hands_to_carrier),
    _step(S.SHIPPING_IN_PROGRESS, act=_carrier_delivers),
)
PAID_OUT = _step(S.COMPLETED, act=_seller_registers_account)

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "carrier-completed",
            N_(
                "Carrier deal: the seller hands the package to the carrier, it arrives, the buyer "
                "approves it (Completed), the seller registers a payout account and is paid out."
            ),
            "Carrier",
            S.SHIPPING_PENDING,
            (*SHIPPED, _step(S.SHIPPING_ARRIVED, act=_buyer_approves), PAID_OUT),
        ),
        Scenario(
            "carrier-review-period-ends",
            N_(
                "Carrier deal: the package arrives and the buyer says nothing; 24 hours pass and "
                "the deal completes on its own, then the seller is paid out."
            ),
            "Carrier",
            S.SHIPPING_PENDING,
            (*SHIPPED, _wait(Effect.REVIEW_DEADLINE, S.SHIPPING_ARRIVED), PAID_OUT),
        ),
        Scenario(
            "carrier-returned-refunded",
            N_(
                "Carrier deal: the package is handed to the carrier, not collected and sent back "
                "(Shipping_Returned); the buyer is refunded (Refunded)."
            ),
            "Carrier",
            S.SHIPPING_PENDING,
            (
                _step(S.SHIPPING_PENDING, act=_seller_hands_to_carrier),
                _step(S.SHIPPING_IN_PROGRESS, act=_carrier_returns),
            ),
        ),
        Scenario(
            "pickup-completed",
            N_(
                "Pickup deal: at the handover the seller enters the buyer's code (Completed); the "
                "seller registers a payout account and is paid out."
            ),
            "Pickup",
            S.PICKUP_PENDING,
            (_step(S.PICKUP_PENDING, act=_seller_confirms_handover), PAID_OUT),
        ),
        Scenario(
            "pickup-expired-refunded",
            N_(
                "Pickup deal: 7 days pass without a handover (Pickup_Expired); the buyer is "
                "refunded (Refunded)."
            ),
            "Pickup",
            S.PICKUP_PENDING,
            (_wait(Effect.PICKUP_DEADLINE, S.PICKUP_PENDING),),
        ),
        Scenario(
            "review-denied-resolved-for-seller",
            N_(
                "Carrier deal: the buyer denies the item on arrival (Shipping_Review_Denied); the "
                "operator releases the money to the seller (Completed), who is paid out."
            ),
            "Carrier",
            S.SHIPPING_PENDING,
            (
                *SHIPPED,
                _step(S.SHIPPING_ARRIVED, act=_buyer_denies),
                _step(S.SHIPPING_REVIEW_DENIED, act=_operator_releases),
                PAID_OUT,
            ),
        ),
        Scenario(
            "review-denied-resolved-for-buyer",
            N_(
                "Carrier deal: the buyer denies the item on arrival (Shipping_Review_Denied); the "
                "operator refunds the buyer (Refunded)."
            ),
            "Carrier",
            S.SHIPPING_PENDING,
            (
                *SHIPPED,
                _step(S.SHIPPING_ARRIVED, act=_buyer_denies),
                _step(S.SHIPPING_REVIEW_DENIED, act=_operator_refunds),
            ),
        ),
        Scenario(
            "payment-failed-then-paid",
            N_(
                "Signed deal: the buyer's first payment fails (PaymentFailed), the second succeeds "
                "(Paid) and the deal moves on to Shipping_Pending."
            ),
            None,
            S.SIGNED,
            (_step(S.SIGNED, act=_payment_fails), _step(S.SIGNED, act=_payment_succeeds)),
        ),
        Scenario(
            "cancelled-with-pending-offer",
            N_(
                "A buyer's offer is pending when the integration cancels the deal (Cancelled): the "
                "offer is denied."
            ),
            None,
            S.DRAFT,
            (
                _step(S.DRAFT, S.AD, act=_buyer_offers),
                _step(S.DRAFT, S.AD, act=_integration_cancels),
            ),
        ),
    )
}


# --- running one -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    deal: Deal
    events: list[dict[str, Any]]  # the envelopes emitted for the deal, in order


async def run(
    sessionmaker: async_sessionmaker[AsyncSession],
    integration: Integration,
    name: str,
    deal_id: uuid.UUID | None,
    settings: Settings,
    by: By | None = None,
) -> Outcome:
    """Drive a new deal, or the integration's ``deal_id``, down scenario ``name``. The
    fast-forward and the steps up to the first wait run in one transaction, so a path refused
    from the deal's status (``paths.Unreachable``) changes nothing. A member's run (``by``, the
    developer portal) is audited in that first transaction: refused, it leaves no record."""
    scenario = SCENARIOS[name]
    async with sessionmaker() as session, session.begin():
        given = deal_id is not None
        deal = await _deal(session, integration, deal_id, scenario, settings)
        deal_id = deal.id
        if by is not None:
            run_of = {"scenario": name, "dealGiven": given, "statusBefore": deal.status}
            await by.record(
                session, integration.id, "sandbox.scenario.run", "deal", deal.id, after=run_of
            )
        after = await _last_event(session, integration.id, deal.id) if given else None
        steps = list(await _remaining(session, deal, scenario, settings))
        await _act_until_wait(session, deal, steps, settings)
    while steps:
        wait = steps.pop(0)
        async with sessionmaker() as session, session.begin():
            await flows.advance_deal_clock(session, integration.id, deal_id, wait.wait)
        await fire_due_timers(sessionmaker, settings)
        async with sessionmaker() as session, session.begin():
            deal = await deals.get_for(session, integration.id, deal_id, for_update=True)
            await _act_until_wait(session, deal, steps, settings)
    await _money_moved(sessionmaker, settings, deal_id)
    async with sessionmaker() as session, session.begin():
        deal = await deals.get_for(session, integration.id, deal_id)
        return Outcome(deal, await _events_since(session, integration.id, deal.id, after))


async def _money_moved(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings, deal_id: uuid.UUID
) -> None:
    """The refunds and payouts the path decided, made as the worker makes them; a call a
    running worker claimed first (woken by the commit that queued it) is waited for, within
    its lease, so that the scenario's answer ends with its outcome."""
    deadline = time.monotonic() + min(settings.worker_lease_seconds, MAX_CALL_WAIT)
    while True:
        await make_pending_calls(sessionmaker, settings)
        async with sessionmaker() as session:
            calls = await payment_calls.calls_of(session, deal_id)
        if all(c.status != "pending" for c in calls) or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.05)


async def _deal(
    session: AsyncSession,
    integration: Integration,
    deal_id: uuid.UUID | None,
    scenario: Scenario,
    settings: Settings,
) -> Deal:
    if deal_id is not None:
        return await deals.get_for(session, integration.id, deal_id, for_update=True)
    data = DealCreate.model_validate(
        {
            "name": f"Sandbox item ({scenario.name})",
            "description": f"Created by the sandbox scenario {scenario.name}.",
            "price": paths.SANDBOX_PRICE_MINOR / 100,
            "packageType": "Medium",
            "seller": SANDBOX_SELLER,
        }
    )
    principal = Principal(integration.id, frozenset(integration.scope_list))
    created = await deals.create(session, principal, data, settings.currency)
    # The scenario moves the deal on in this transaction: the stored row, as the ORM's.
    return await deals.get_for(session, integration.id, created.id, for_update=True)


async def _remaining(
    session: AsyncSession, deal: Deal, scenario: Scenario, settings: Settings
) -> tuple[Step, ...]:
    """The steps still to take: from the deal's own step if it is partway down the path, else
    all of them, once the deal is fast-forwarded to the start."""
    for i, step in enumerate(scenario.steps):
        if deal.status in step.at and (
            scenario.shipping is None or paths.shipping_of(deal) in (None, scenario.shipping)
        ):
            return scenario.steps[i:]
    await paths.reach(session, deal, scenario.start, settings, scenario.shipping)
    return scenario.steps


async def _act_until_wait(
    session: AsyncSession, deal: Deal, steps: list[Step], settings: Settings
) -> None:
    while steps and steps[0].act is not None:
        act = steps.pop(0).act
        assert act is not None
        await act(session, deal, settings)


async def _last_event(
    session: AsyncSession, integration_id: uuid.UUID, deal_id: uuid.UUID
) -> uuid.UUID | None:
    page = await events.list_events(
        session, integration_id, kind=None, deal_id=deal_id, after=None, page=1, size=1
    )
    return uuid.UUID(orjson.loads(page.payloads[0])["id"]) if page.payloads else None


async def _events_since(
    session: AsyncSession, integration_id: uuid.UUID, deal_id: uuid.UUID, after: uuid.UUID | None
) -> list[dict[str, Any]]:
    """The deal's events after ``after`` (all of them for a new deal), oldest first."""
    page = await events.list_events(
        session, integration_id, kind=None, deal_id=deal_id, after=after, page=1, size=MAX_EVENTS
    )
    found = [orjson.loads(p) for p in page.payloads]
    return found if after is not None else found[::-1]


def listing() -> list[dict[str, Any]]:
    """Every scenario, for ``GET /sandbox/v1/scenarios`` and the CLI."""
    return [
        {
            "name": s.name,
            "description": s.description,
            "shippingType": s.shipping,
            "startsFrom": s.start.value,
        }
        for s in SCENARIOS.values()
    ]
