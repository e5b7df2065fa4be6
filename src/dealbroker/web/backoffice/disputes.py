"""The back office's disputes (role support): the queue, a deal's dossier, its evidence
photos, and the decision form with its four eyes (a proposal another operator approves).

Every decision goes through ``disputes.service`` (as ``dealbroker disputes`` does), which
records it in the audit trail in the request's transaction. Deciding money (a decision, an
approval) wants a recent login.
"""

import uuid
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.errors import DomainError, NotFound
from dealbroker.core.i18n import N_, _
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle
from dealbroker.disputes import service as disputes
from dealbroker.disputes.dossier import dossier
from dealbroker.operators.service import LoggedIn
from dealbroker.web import evidence as evidence_pages
from dealbroker.web.backoffice.session import BACK_OFFICE, Support, page, require_operator

router = BACK_OFFICE.router()
# A decision or an approval moves money: it wants a recent login.
SupportFresh = Annotated[LoggedIn, Depends(require_operator("support", fresh=True))]
OUTCOMES = {
    disputes.Outcome.RELEASE: N_("Release the money to the seller"),
    disputes.Outcome.REFUND: N_("Refund the buyer"),
    disputes.Outcome.RETURN_THEN_REFUND: N_(
        "The buyer returns the item, then the buyer is refunded"
    ),
}


@router.get("/disputes", response_class=HTMLResponse)
async def queue(request: Request, logged_in: Support, session: Session) -> Response:
    """Every dispute, the earliest decision date first (overdue ones marked)."""
    return page(request, "back_office_disputes.html", {"queue": await disputes.queue(session)})


async def _dossier(session: AsyncSession, deal_id: uuid.UUID) -> dict[str, Any]:
    try:
        return await dossier(session, deal_id)
    except NotFound:
        raise DossierNotFound() from None


class DossierNotFound(Exception):
    """No deal of this id: the back office's 404 page."""


@router.get("/deals/{deal_id}", response_class=HTMLResponse)
async def deal(
    request: Request, deal_id: uuid.UUID, logged_in: Support, session: Session
) -> Response:
    """Everything about one deal for support: its fields, parties, money, delivery, history,
    the messages sent, and both parties' evidence."""
    found = await _dossier(session, deal_id)
    return page(request, "back_office_deal.html", {"dossier": found})


@router.get("/deals/{deal_id}/photos/{photo_id}")
async def photo(
    request: Request, deal_id: uuid.UUID, photo_id: str, logged_in: Support, session: Session
) -> Response:
    """One evidence photo of the deal, served as the parties' pages serve it (a JPEG, never
    cached, never sniffed); another deal's photo is not found."""
    answer = await evidence_pages.photo_response(
        session, deal_id, photo_id[:40], request.app.state.settings
    )
    if answer is None:
        raise DossierNotFound()
    return answer


async def _dispute_context(session: AsyncSession, deal_id: uuid.UUID) -> dict[str, Any]:
    found = await _dossier(session, deal_id)
    return {
        "dossier": found,
        "proposal": await disputes.pending(session, deal_id),
        "proposals": await disputes.proposals(session, deal_id),
        "outcomes": [(o.value, _(words)) for o, words in OUTCOMES.items()],
        "outcome_words": {o.value: _(words) for o, words in OUTCOMES.items()},
        "max_reason": disputes.MAX_REASON,
        "max_address": disputes.MAX_RETURN_ADDRESS,
        "in_dispute": DealStatus(found["deal"]["status"]) in lifecycle.DISPUTES,
        "has_return": found["deal"]["disputeReturn"] is not None,
    }


@router.get("/disputes/{deal_id}", response_class=HTMLResponse)
async def dispute(
    request: Request, deal_id: uuid.UUID, logged_in: Support, session: Session
) -> Response:
    """The deal's dossier and the decision form, or the decision waiting for approval."""
    return page(request, "back_office_dispute.html", await _dispute_context(session, deal_id))


async def _refused(
    request: Request,
    session: AsyncSession,
    deal_id: uuid.UUID,
    error: str,
    typed: dict[str, str],
    invalid: dict[str, str] | None = None,
    status: int = 400,
) -> Response:
    context = {
        **await _dispute_context(session, deal_id),
        "error": error,
        "typed": typed,
        "invalid": invalid or {},
    }
    return page(request, "back_office_dispute.html", context, status)


def _not_done() -> str:
    return _(
        "Nothing was decided: this dispute was decided already, or the deal is no longer in dispute."
    )


@router.post("/disputes/{deal_id}")
async def decide(
    request: Request, deal_id: uuid.UUID, logged_in: SupportFresh, session: Session
) -> Response:
    form = await BACK_OFFICE.checked_form(request)
    typed = {
        name: str(form.get(name, ""))[: disputes.MAX_REASON + 1]
        for name in ("outcome", "reason", "return_address")
    }
    invalid: dict[str, str] = {}
    outcome = next((o for o in disputes.Outcome if o.value == typed["outcome"]), None)
    reason = typed["reason"].strip()
    address = typed["return_address"].strip()
    if outcome is None:
        invalid["outcome"] = _("Choose a decision.")
    if not reason:
        invalid["reason"] = _("Write the reason: both parties receive it with the decision.")
    elif len(reason) > disputes.MAX_REASON:
        invalid["reason"] = _("This is too long (at most %(max)s characters).") % {
            "max": disputes.MAX_REASON
        }
    if outcome is disputes.Outcome.RETURN_THEN_REFUND:
        if not address:
            invalid["return_address"] = _("Give the address the buyer sends the item to.")
        elif len(address) > disputes.MAX_RETURN_ADDRESS:
            invalid["return_address"] = _("This is too long (at most %(max)s characters).") % {
                "max": disputes.MAX_RETURN_ADDRESS
            }
    if invalid or outcome is None:
        return await _refused(
            request, session, deal_id, _("Check the decision below."), typed, invalid
        )
    decision = disputes.Decision(
        outcome, reason, address if outcome is disputes.Outcome.RETURN_THEN_REFUND else None
    )
    try:
        async with session.begin_nested():
            decided = await disputes.decide(
                session,
                deal_id,
                decision,
                request.app.state.settings,
                logged_in.actor,
                request.state.request_id,
            )
    except NotFound:
        raise DossierNotFound() from None
    except DomainError as exc:
        return await _refused(
            request, session, deal_id, exc.page_detail or _not_done(), typed, status=409
        )
    done = "dispute-proposed" if decided.proposal is not None else "dispute-decided"
    return BACK_OFFICE.to(f"/disputes/{deal_id}?done={done}")


@router.post("/disputes/proposals/{proposal_id}/approve")
async def approve(
    request: Request, proposal_id: uuid.UUID, logged_in: SupportFresh, session: Session
) -> Response:
    """A second operator approves a proposed decision: it is executed now."""
    return await _settle(request, proposal_id, logged_in, session, approve=True)


@router.post("/disputes/proposals/{proposal_id}/reject")
async def reject(
    request: Request, proposal_id: uuid.UUID, logged_in: Support, session: Session
) -> Response:
    """An operator (the proposer too, to take it back) rejects a proposed decision."""
    return await _settle(request, proposal_id, logged_in, session, approve=False)


async def _settle(
    request: Request,
    proposal_id: uuid.UUID,
    logged_in: LoggedIn,
    session: AsyncSession,
    approve: bool,
) -> Response:
    await BACK_OFFICE.checked_form(request)
    settings = request.app.state.settings
    proposal = await disputes.proposal(session, proposal_id)
    if proposal is None:
        raise DossierNotFound()
    try:
        async with session.begin_nested():
            if approve:
                await disputes.approve(
                    session, proposal_id, settings, logged_in.actor, request.state.request_id
                )
            else:
                await disputes.reject(
                    session, proposal_id, logged_in.actor, request.state.request_id
                )
    except DomainError as exc:
        status = 403 if exc.status == 403 else 409
        return await _refused(
            request, session, proposal.deal_id, exc.page_detail or _not_done(), {}, status=status
        )
    done = "proposal-approved" if approve else "proposal-rejected"
    return BACK_OFFICE.to(f"/disputes/{proposal.deal_id}?done={done}")
