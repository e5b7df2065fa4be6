"""``dealbroker disputes``: the operator resolves disputes."""

import uuid
from pathlib import Path
from typing import Annotated

import typer

from dealbroker.cli.common import _in_transaction, _print, _with_sessionmaker
from dealbroker.core.settings import get_settings

app = typer.Typer(
    help="Resolve disputes (a buyer denied the item, or a pickup seller reported a problem).",
    no_args_is_help=True,
)


@app.command("list")
def disputes_list() -> None:
    """Deals in dispute (Shipping_Review_Denied or Pickup_Denied), oldest change first, with
    who opened each (buyer or seller) and their reason."""
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
) -> None:
    """Settle a dispute: release the money to the seller, or refund the buyer."""
    if release == refund:
        typer.echo("error: give exactly one of --release or --refund", err=True)
        raise typer.Exit(2)
    from dealbroker.deals import flows
    from dealbroker.payments.tasks import make_pending_calls

    settings = get_settings()
    _in_transaction(lambda s: flows.resolve_dispute(s, deal_id, release, settings))
    # The refund or payout the resolution decided is made now, so the operator sees its outcome.
    _with_sessionmaker(lambda sm: make_pending_calls(sm, settings))
    deal = _in_transaction(lambda s: flows.operator_view(s, deal_id))
    _print({"dealId": deal_id, "status": deal.status, "paymentStatus": deal.payment_status})


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
