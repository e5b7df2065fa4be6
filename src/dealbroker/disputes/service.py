"""The operator's disputes: the queue, and deciding one, with four eyes on large deals.

``decide`` is the one entry point of a decision, for the back office's form and for
``dealbroker disputes resolve``: on a deal priced at most ``dispute_four_eyes_minor`` it
decides at once (``flows.resolve_dispute``); above it the decision becomes a pending proposal,
which another operator ``approve``s (it is then executed) or ``reject``s. The proposer never
approves their own: a back office operator is told apart by their operator id, the CLI's
system user by their unix name. Every step is recorded in the audit trail in its own
transaction, with the values before and after.
"""

import uuid
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core import clock
from dealbroker.core.errors import BadRequest, Conflict, Forbidden, found
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.deals import flows, lifecycle
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import Actor as By
from dealbroker.deals.lifecycle import DealStatus, Trigger
from dealbroker.deals.models import Deal
from dealbroker.disputes import repository
from dealbroker.disputes.models import DisputeProposal

Outcome = flows.DisputeOutcome
MAX_REASON = flows.MAX_REASON
MAX_RETURN_ADDRESS = flows.MAX_RETURN_ADDRESS


@dataclass(frozen=True)
class Decision:
    """What an operator decides a dispute with; ``reason`` is sent to both parties."""

    outcome: Outcome
    reason: str | None = None
    return_address: str | None = None


@dataclass(frozen=True)
class Queued:
    """One dispute of the queue."""

    deal: Deal
    opened_by: str | None
    overdue: bool
    proposal: DisputeProposal | None


@dataclass(frozen=True)
class Decided:
    """What ``decide`` did: the deal decided, or (four eyes) the proposal it is waiting on."""

    deal: Deal
    proposal: DisputeProposal | None = None


async def queue(session: AsyncSession) -> list[Queued]:
    """Every integration's deals in dispute, the earliest decision date first, with who opened
    each, whether its decision date has passed, and a proposal waiting for approval."""
    found = await flows.in_dispute(session)
    waiting = await repository.pending_by_deal(session, [d.id for d in found])
    return [
        Queued(
            deal,
            await flows.dispute_opened_by(session, deal),
            flows.decision_overdue(deal),
            waiting.get(deal.id),
        )
        for deal in found
    ]


def needs_four_eyes(deal: Deal, settings: Settings) -> bool:
    """Whether a decision on ``deal`` needs a second operator: its price is above the
    setting (a deal without a price never is)."""
    return deal.price_minor is not None and deal.price_minor > settings.dispute_four_eyes_minor


async def pending(session: AsyncSession, deal_id: uuid.UUID) -> DisputeProposal | None:
    return await repository.pending_of(session, deal_id)


async def proposal(session: AsyncSession, proposal_id: uuid.UUID) -> DisputeProposal | None:
    return await repository.by_id(session, proposal_id)


async def proposals(session: AsyncSession, deal_id: uuid.UUID) -> list[DisputeProposal]:
    return await repository.of_deal(session, deal_id)


def _checked(decision: Decision) -> Decision:
    """The decision with its texts trimmed, refused when out of bounds."""
    outcome = Outcome(decision.outcome)
    reason = (decision.reason or "").strip() or None
    address = (decision.return_address or "").strip() or None
    if reason is not None and len(reason) > MAX_REASON:
        raise BadRequest(f"The reason is longer than {MAX_REASON} characters.")
    if outcome is Outcome.RETURN_THEN_REFUND:
        if address is None:
            raise BadRequest("A return then refund needs the seller's return address.")
        if len(address) > MAX_RETURN_ADDRESS:
            raise BadRequest(f"The return address is longer than {MAX_RETURN_ADDRESS} characters.")
    elif address is not None:
        raise BadRequest("A return address goes with a return then refund only.")
    return Decision(outcome, reason, address)


def _check_decidable(deal: Deal, outcome: Outcome) -> None:
    """What ``flows.resolve_dispute`` would refuse, checked before a proposal is kept."""
    if outcome is Outcome.RETURN_THEN_REFUND:
        if DealStatus(deal.status) not in lifecycle.DISPUTES:
            raise deals.illegal(deal, Trigger.RETURN_REQUESTED.value, By.OPERATOR)
        if deal.dispute_return is not None:
            raise Conflict("A return is already under way for this deal.")
        return
    trigger = Trigger.DISPUTE_RELEASED if outcome is Outcome.RELEASE else Trigger.DISPUTE_REFUNDED
    if lifecycle.transition_for(DealStatus(deal.status), trigger, By.OPERATOR) is None:
        raise deals.illegal(deal, trigger.value, By.OPERATOR)


async def _execute(
    session: AsyncSession, deal: Deal, decision: Decision, settings: Settings
) -> tuple[dict[str, object], Deal]:
    """Carry out ``decision`` on ``deal`` (row locked by the caller): the deal's status before,
    and the deal after."""
    before: dict[str, object] = {"status": str(deal.status)}
    decided = await flows.resolve_dispute(
        session,
        deal.id,
        decision.outcome,
        settings,
        reason=decision.reason,
        return_address=decision.return_address,
    )
    return before, decided


def _decision_values(decision: Decision) -> dict[str, object]:
    return {
        "outcome": decision.outcome.value,
        "reason": decision.reason,
        "returnAddress": decision.return_address,
    }


async def decide(
    session: AsyncSession,
    deal_id: uuid.UUID,
    decision: Decision,
    settings: Settings,
    actor: Actor,
    request_id: str | None = None,
) -> Decided:
    """An operator decides a dispute (``Decision``): at once, or, on a deal above the four
    eyes amount, as a proposal another operator approves. Refused while another proposal on
    the deal waits."""
    decision = _checked(decision)
    deal = await flows.operator_view(session, deal_id, for_update=True)
    if await repository.pending_of(session, deal.id) is not None:
        raise Conflict(
            "A decision on this deal is waiting for a second operator's approval.",
            page_detail=_(
                "A decision on this dispute is waiting for a second operator's approval."
            ),
        )
    _check_decidable(deal, decision.outcome)
    if needs_four_eyes(deal, settings):
        proposal = DisputeProposal(
            id=uuid.uuid4(),
            deal_id=deal.id,
            outcome=decision.outcome.value,
            reason=decision.reason,
            return_address=decision.return_address,
            amount_minor=deal.price_minor or 0,
            currency=deal.currency,
            status=repository.PENDING,
            proposed_by=actor.label[:300],
            proposer_id=actor.operator_id,
            proposed_at=clock.now(),
        )
        session.add(proposal)
        await session.flush()
        await audit.record(
            session,
            actor,
            "dispute.propose",
            "deal",
            deal.id,
            before={"status": str(deal.status)},
            after={
                "proposalId": proposal.id,
                **_decision_values(decision),
                "amountMinor": proposal.amount_minor,
                "currency": proposal.currency,
            },
            request_id=request_id,
        )
        return Decided(deal, proposal)
    before, deal = await _execute(session, deal, decision, settings)
    await audit.record(
        session,
        actor,
        "dispute.resolve",
        "deal",
        deal.id,
        before=before,
        after={**_decision_values(decision), "status": str(deal.status)},
        request_id=request_id,
    )
    return Decided(deal)


def _same(actor: Actor, proposal: DisputeProposal) -> bool:
    if actor.operator_id is not None and actor.operator_id == proposal.proposer_id:
        return True
    return actor.label[:300] == proposal.proposed_by


async def _settle(
    session: AsyncSession, proposal_id: uuid.UUID, status: str, actor: Actor
) -> DisputeProposal:
    proposal = found(
        await repository.by_id(session, proposal_id), f"No dispute proposal {proposal_id}."
    )
    if status == "approved" and _same(actor, proposal):
        raise Forbidden(
            "The operator who proposed a decision cannot approve it: another operator does.",
            page_detail=_("You proposed this decision: another operator must approve it."),
        )
    if not await repository.settle(
        session, proposal.id, status, actor.label[:300], actor.operator_id, clock.now()
    ):
        raise Conflict(
            "This proposal was approved or rejected already.",
            page_detail=_("This proposal was approved or rejected already."),
        )
    return proposal


async def approve(
    session: AsyncSession,
    proposal_id: uuid.UUID,
    settings: Settings,
    actor: Actor,
    request_id: str | None = None,
) -> DisputeProposal:
    """A second operator approves a pending proposal: it is executed now. Refused to its
    proposer, and to the second of two approvals racing."""
    proposal = await _settle(session, proposal_id, "approved", actor)
    deal = await flows.operator_view(session, proposal.deal_id, for_update=True)
    decision = Decision(Outcome(proposal.outcome), proposal.reason, proposal.return_address)
    before, deal = await _execute(session, deal, decision, settings)
    await audit.record(
        session,
        actor,
        "dispute.approve",
        "deal",
        deal.id,
        before={**before, "proposalId": proposal.id, "proposal": "pending"},
        after={
            "proposalId": proposal.id,
            "proposal": "approved",
            "proposedBy": proposal.proposed_by,
            **_decision_values(decision),
            "status": str(deal.status),
        },
        request_id=request_id,
    )
    return proposal


async def reject(
    session: AsyncSession,
    proposal_id: uuid.UUID,
    actor: Actor,
    request_id: str | None = None,
) -> DisputeProposal:
    """An operator rejects a pending proposal (its proposer may, to take it back): nothing is
    decided, the dispute stays in the queue for a new decision."""
    proposal = await _settle(session, proposal_id, "rejected", actor)
    await audit.record(
        session,
        actor,
        "dispute.reject",
        "deal",
        proposal.deal_id,
        before={"proposalId": proposal.id, "proposal": "pending"},
        after={
            "proposalId": proposal.id,
            "proposal": "rejected",
            "proposedBy": proposal.proposed_by,
            "outcome": proposal.outcome,
        },
        request_id=request_id,
    )
    return proposal
