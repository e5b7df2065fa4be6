"""``dealbroker payments``: the operator compares our money with the provider's."""

from datetime import UTC, datetime
from typing import Annotated

import typer

from dealbroker.cli.common import _with_sessionmaker
from dealbroker.core.settings import get_settings

app = typer.Typer(help="Payments: reconcile with the provider.", no_args_is_help=True)


def _moment(value: str) -> datetime:
    """An ISO 8601 date or date and time; without a zone it is UTC."""
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@app.command("reconcile")
def reconcile(
    since: Annotated[str, typer.Option(help="Start of the period (ISO 8601; UTC if no zone).")],
    until: Annotated[
        str | None, typer.Option(help="End of the period, excluded (ISO 8601); default now.")
    ] = None,
) -> None:
    """Compare our payments, refunds and payouts created in the period with the provider's
    records: one line per difference, and exit status 1 if there is any."""
    from dealbroker.payments.reconciliation import reconcile as run

    try:
        start = _moment(since)
        end = _moment(until) if until else datetime.now(UTC)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if end <= start:
        typer.echo("error: --until must be after --since", err=True)
        raise typer.Exit(2)
    settings = get_settings()
    differences = _with_sessionmaker(lambda sm: run(sm, settings, start, end))
    for difference in differences:
        typer.echo(difference.line())
    period = f"{start.isoformat()} to {end.isoformat()}"
    if differences:
        typer.echo(f"{len(differences)} difference(s) from {period}", err=True)
        raise typer.Exit(1)
    typer.echo(f"no differences from {period}")
