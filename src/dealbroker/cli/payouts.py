"""``dealbroker payouts``: the operator's bank-file routine (see docs/payouts.md): export the
payouts to a credit transfer file for the bank, import the bank's status report, reconcile."""

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

from dealbroker.audit.service import Actor
from dealbroker.cli.common import _in_transaction, _print, _with_sessionmaker
from dealbroker.core import clock, money
from dealbroker.core.errors import Conflict, DomainError
from dealbroker.core.settings import get_settings

app = typer.Typer(
    help="Pay sellers by bank file: export payouts, import the bank's reports, reconcile.",
    no_args_is_help=True,
)


@app.command("export")
def payouts_export(
    out: Annotated[
        Path | None,
        typer.Option(help="Where to write the file (default: ./<message id>.xml); never replaced."),
    ] = None,
) -> None:
    """Write one pain.001 credit transfer file with every payout not yet in a file.

    Nothing new: no file is written, and the command says so. The file is recorded (with its
    payouts) before it is written: if writing fails, `dealbroker payouts file` writes it again.
    """
    from dealbroker.payments import bank_file, hold
    from dealbroker.payments.tasks import make_pending_calls

    settings = get_settings()
    held = _in_transaction(hold.current)
    if held is not None:
        typer.echo(f"error: {held.words()}", err=True)
        raise typer.Exit(2)
    try:
        bank_file.debtor(settings)
    except Conflict as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(2) from exc
    if out is not None and out.exists():
        typer.echo(f"error: {out} exists already; choose another --out", err=True)
        raise typer.Exit(2)
    # Payouts decided but not yet handed to the rail (no worker running) go in this file too.
    _with_sessionmaker(lambda sm: make_pending_calls(sm, settings))

    try:
        exported = _in_transaction(lambda s: bank_file.export(s, settings, Actor.system()))
    except Conflict as exc:  # payouts held since the check above
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(2) from exc
    if exported is None:
        typer.echo("nothing to export: every payout is in a file already; no file written")
        return
    path = out or Path(f"{exported.message_id}.xml")
    _write(path, exported.document, exported.message_id)
    _print(
        {
            "file": str(path),
            "messageId": exported.message_id,
            "transfers": exported.transfers,
            "total": money.to_string(exported.total_minor),
        }
    )


@app.command("file")
def payouts_file(
    message_id: str,
    out: Annotated[Path, typer.Option(help="Where to write the file; never replaced.")],
) -> None:
    """Write a file exported before again, byte for byte (same message id: the bank refuses
    it if it has the first one already)."""
    from dealbroker.payments import bank_file

    stored = _in_transaction(lambda s: bank_file.stored_file(s, message_id, Actor.system()))
    if stored is None:
        typer.echo(f"error: no payout file {message_id}", err=True)
        raise typer.Exit(1)
    _write(out, stored.document, message_id)
    typer.echo(str(out))


# A payout file names every seller's account and amount: readable by its owner only, whatever
# the umask (which can only take permissions away, so the mode is set on the open file too).
FILE_MODE = 0o600


def _write(path: Path, document: str, message_id: str) -> None:
    """Write ``document`` to a new file at ``path`` whole, or not at all; mode 0600."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(document)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(partial, path)  # fails, rather than replaces, if the file appeared meanwhile
    except OSError as exc:
        typer.echo(
            f"error: could not write {path}: {exc}. The file is recorded: "
            f"`dealbroker payouts file {message_id} --out FILE` writes it.",
            err=True,
        )
        raise typer.Exit(1) from exc
    finally:
        partial.unlink(missing_ok=True)


@app.command("import")
def payouts_import(report: Path) -> None:
    """Apply the bank's payment status report (pain.002.001.03): accepted payouts become
    PaidOut, refused ones PayoutFailed. Prints one line per payout, then a summary; ids that
    are not ours are listed and otherwise ignored. Importing a report again changes nothing.
    A report that is too large, not valid XML or pain.002, has a DTD, or answers a file never
    exported here is refused with one `error:` line and exit code 1, and changes nothing."""
    from dealbroker.payments import bank_file
    from dealbroker.payments.iso20022 import MAX_REPORT_BYTES

    try:
        with report.open("rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as exc:
        typer.echo(f"error: cannot read {report}: {exc}", err=True)
        raise typer.Exit(2) from exc
    if len(data) > MAX_REPORT_BYTES:
        typer.echo(f"error: the report is larger than {MAX_REPORT_BYTES} bytes", err=True)
        raise typer.Exit(1)
    try:
        parsed = bank_file.read_report(data)
    except DomainError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc

    result = _in_transaction(lambda s: bank_file.import_report(s, parsed, Actor.system()))
    if result.already_imported:
        typer.echo(f"report {result.report_message_id} was imported before; nothing changed")
        return
    for status in result.applied:
        _print(
            {
                "endToEndId": status.end_to_end_id,
                "status": status.status,
                "outcome": status.outcome,
                "dealId": status.deal_id,
                "reason": status.reason,
            }
        )
    _print(
        {
            "report": result.report_message_id,
            "outcomes": result.outcomes,
            "unknown": result.unknown,
        }
    )


def _moment(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise typer.BadParameter(f"not an ISO 8601 date or time: {value!r}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@app.command("reconcile")
def payouts_reconcile(
    since: Annotated[
        str | None, typer.Option(help="Start of the period (ISO 8601; default: 30 days ago).")
    ] = None,
    until: Annotated[str | None, typer.Option(help="End of the period (default: now).")] = None,
) -> None:
    """List every difference between our payouts and the bank's files and reports in the
    period, one JSON line each; exit code 1 if there is any."""
    from dealbroker.payments import bank_file

    end = _moment(until) if until else clock.now()
    start = _moment(since) if since else end - timedelta(days=30)
    differences = _in_transaction(lambda s: bank_file.reconcile(s, start, end))
    for difference in differences:
        _print(
            {
                "kind": difference.kind,
                "endToEndId": difference.end_to_end_id,
                "dealId": difference.deal_id,
                "paymentId": difference.payment_id,
                "ours": None
                if difference.ours_minor is None
                else money.to_string(difference.ours_minor),
                "theirs": None
                if difference.theirs_minor is None
                else money.to_string(difference.theirs_minor),
                "detail": difference.detail,
            }
        )
    if differences:
        raise typer.Exit(1)
    typer.echo(f"no differences from {start.isoformat()} to {end.isoformat()}")
