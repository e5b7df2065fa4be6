"""``dealbroker disputes``: the operator's queue of disputes, and their decisions."""

import uuid
from pathlib import Path
from typing import Annotated

import typer

from dealbroker.cli.common import _in_transaction, _print, _with_sessionmaker
from dealbroker.core.settings import get_settings

app = typer.Typer(
    help="Decide disputes (a buyer denied the item or did not receive it, or a pickup seller "
    "reported a problem).",
    no_args_is_help=True,
)


@app.command("list")
def disputes_list() -> None:
    """Deals in dispute (Shipping_Review_Denied or Pickup_Denied), the earliest decision date
    first, with who opened each (buyer or seller), their reason, the date we decide by
    (``overdue`` once it has passed undecided) and a return under way."""
    from sqlalchemy.ext.asyncio import AsyncSession

    from dealbroker.deals import flows
    from dealbroker.deals.models import Deal

    async def listed(session: AsyncSession) -> list[tuple[Deal, str | None]]:
        return [
            (d, await flows.dispute_opened_by(session, d)) for d in await flows.in_dispute(session)
        ]

    for deal, opened_by in _in_transaction(listed):
        _print(
            {
                "dealId": deal.id,
                "status": deal.status,
                "integrationId": deal.integration_id,
                "updatedAt": deal.updated_at,
                "openedBy": opened_by,
                "reason": deal.dispute_reason,
                "decideBy": deal.decide_by,
                "overdue": flows.decision_overdue(deal),
                "return": deal.dispute_return,
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
    returned and then refund the buyer."""
    from sqlalchemy.ext.asyncio import AsyncSession

    from dealbroker.audit import service as audit
    from dealbroker.audit.service import Actor
    from dealbroker.deals import flows
    from dealbroker.payments.tasks import make_pending_calls

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

    async def resolve(session: AsyncSession) -> None:
        before = await flows.operator_view(session, deal_id)
        status_before = str(before.status)
        await flows.resolve_dispute(
            session, deal_id, outcome, settings, reason=reason, return_address=return_address
        )
        after = await flows.operator_view(session, deal_id)
        await audit.record(
            session,
            Actor.system(),
            "dispute.resolve",
            "deal",
            deal_id,
            before={"status": status_before},
            after={
                "outcome": outcome.value,
                "reason": reason,
                "returnAddress": return_address,
                "status": str(after.status),
            },
        )

    _in_transaction(resolve)
    # The refund or payout the resolution decided is made now, so the operator sees its outcome.
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
