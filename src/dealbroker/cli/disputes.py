"""``dealbroker disputes``: the operator's queue of disputes, and their decisions."""

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dealbroker.cli.common import _in_transaction, _print, _with_sessionmaker
from dealbroker.core.settings import get_settings

if TYPE_CHECKING:
    from dealbroker.core.settings import Settings
    from dealbroker.disputes.models import DisputeProposal

app = typer.Typer(
    help="Decide disputes (a buyer denied the item or did not receive it, or a pickup seller "
    "reported a problem).",
    no_args_is_help=True,
)


@app.command("list")
def disputes_list() -> None:
    """Deals in dispute (Shipping_Review_Denied or Pickup_Denied), the earliest decision date
    first, with who opened each (buyer or seller), their reason, the date we decide by
    (``overdue`` once it has passed undecided), a return under way and a decision waiting for
    a second operator's approval (``proposalId``)."""
    from dealbroker.disputes import service as disputes

    for row in _in_transaction(disputes.queue):
        deal = row.deal
        _print(
            {
                "dealId": deal.id,
                "status": deal.status,
                "integrationId": deal.integration_id,
                "updatedAt": deal.updated_at,
                "openedBy": row.opened_by,
                "reason": deal.dispute_reason,
                "decideBy": deal.decide_by,
                "overdue": row.overdue,
                "return": deal.dispute_return,
                # A decision waiting for a second operator (``disputes approve``).
                "proposalId": row.proposal.id if row.proposal else None,
            }
        )


@app.command("resolve")
def disputes_resolve(
    deal_id: uuid.UUID,
    release: Annotated[
        bool, typer.Option("--release", help="Pay the seller (deal Completed).")
    ] = False,
    refund: Annotated[
        bool, typer.Option("--refund", help="Refund the buyer (deal Refunded).")
    ] = False,
    return_then_refund: Annotated[
        bool,
        typer.Option(
            "--return-then-refund",
            help="The buyer sends the item back to --return-address; the buyer is refunded "
            "when the seller confirms its receipt or the seller's deadline passes; if the buyer "
            "does not send it in time, the seller is paid.",
        ),
    ] = False,
    return_address: Annotated[
        str | None,
        typer.Option(
            "--return-address",
            help="With --return-then-refund: where the buyer sends the item (the seller's "
            "address, as agreed with the seller), at most 500 characters.",
        ),
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason", help="Why, sent to both parties with the decision (at most 2000)."
        ),
    ] = None,
) -> None:
    """Decide a dispute: release the money to the seller, refund the buyer, or have the item
    returned and then refund the buyer. On a deal priced above
    DEALBROKER_DISPUTE_FOUR_EYES_MINOR the decision is proposed: another operator approves it
    (``disputes approve PROPOSAL_ID``, or the back office)."""
    from sqlalchemy.ext.asyncio import AsyncSession

    from dealbroker.audit.service import Actor
    from dealbroker.deals import flows
    from dealbroker.disputes import service as disputes
    from dealbroker.disputes.service import Decided

    if sum((release, refund, return_then_refund)) != 1:
        typer.echo(
            "error: give exactly one of --release, --refund or --return-then-refund", err=True
        )
        raise typer.Exit(2)
    if return_address is not None and not return_then_refund:
        typer.echo("error: --return-address goes with --return-then-refund", err=True)
        raise typer.Exit(2)
    if return_then_refund and not (return_address or "").strip():
        typer.echo("error: --return-then-refund needs --return-address", err=True)
        raise typer.Exit(2)
    # Bounded here as well as in the service: the operator's typing, before anything is parsed.
    for name, value, most in (
        ("--return-address", return_address, flows.MAX_RETURN_ADDRESS),
        ("--reason", reason, flows.MAX_REASON),
    ):
        if value is not None and len(value) > most:
            typer.echo(f"error: {name} is longer than {most} characters", err=True)
            raise typer.Exit(2)
    outcome = (
        flows.DisputeOutcome.RELEASE
        if release
        else flows.DisputeOutcome.REFUND
        if refund
        else flows.DisputeOutcome.RETURN_THEN_REFUND
    )
    settings = get_settings()

    async def resolve(session: AsyncSession) -> Decided:
        decision = disputes.Decision(outcome, reason, return_address)
        return await disputes.decide(session, deal_id, decision, settings, Actor.system())

    decided = _in_transaction(resolve)
    if decided.proposal is not None:
        _print_proposal(decided.proposal)
        return
    _finish(deal_id, settings)


def _finish(deal_id: uuid.UUID, settings: "Settings") -> None:
    """The refund or payout a decision made is made now, so the operator sees its outcome."""
    from dealbroker.deals import flows
    from dealbroker.payments.tasks import make_pending_calls

    _with_sessionmaker(lambda sm: make_pending_calls(sm, settings))
    deal = _in_transaction(lambda s: flows.operator_view(s, deal_id))
    _print(
        {
            "dealId": deal_id,
            "status": deal.status,
            "paymentStatus": deal.payment_status,
            "return": deal.dispute_return,
        }
    )


def _print_proposal(proposal: "DisputeProposal") -> None:
    _print(
        {
            "proposalId": proposal.id,
            "dealId": proposal.deal_id,
            "status": proposal.status,
            "outcome": proposal.outcome,
            "proposedBy": proposal.proposed_by,
            "decidedBy": proposal.decided_by,
        }
    )


@app.command("approve")
def disputes_approve(proposal_id: uuid.UUID) -> None:
    """Approve a decision another operator proposed (a deal above
    DEALBROKER_DISPUTE_FOUR_EYES_MINOR): it is executed now. The system user who proposed it
    cannot approve it."""
    from dealbroker.audit.service import Actor
    from dealbroker.disputes import service as disputes

    settings = get_settings()
    proposal = _in_transaction(lambda s: disputes.approve(s, proposal_id, settings, Actor.system()))
    _finish(proposal.deal_id, settings)


@app.command("reject")
def disputes_reject(proposal_id: uuid.UUID) -> None:
    """Reject a proposed decision: nothing is decided, the dispute waits for a new one."""
    from dealbroker.audit.service import Actor
    from dealbroker.disputes import service as disputes

    proposal = _in_transaction(lambda s: disputes.reject(s, proposal_id, Actor.system()))
    _print_proposal(proposal)


@app.command("photo")
def disputes_photo(
    deal_id: uuid.UUID,
    photo_id: uuid.UUID,
    out: Annotated[
        Path, typer.Option("--out", help="File to write the photo (a JPEG) to; not overwritten.")
    ],
) -> None:
    """Save one evidence photo of a deal (ids from `dealbroker deals show`) to a file."""
    from sqlalchemy.ext.asyncio import AsyncSession

    from dealbroker.core.errors import NotFound
    from dealbroker.evidence import service as evidence

    settings = get_settings()

    async def read(session: AsyncSession) -> tuple[object, bytes]:
        return await evidence.read_photo(session, deal_id, photo_id, settings)

    try:
        _row, data = _in_transaction(read)
    except NotFound as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from None
    try:
        with out.open("xb") as file:
            file.write(data)
    except FileExistsError:
        typer.echo(f"error: {out} exists already; give another --out", err=True)
        raise typer.Exit(1) from None
    _print({"dealId": deal_id, "photoId": photo_id, "out": str(out), "bytes": len(data)})
