"""``dealbroker payments``: the operator compares our money with the provider's, and refunds money
taken late."""

import uuid
from datetime import UTC, datetime
from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.audit.service import Actor
from dealbroker.cli.common import _in_transaction, _print, _with_sessionmaker
from dealbroker.core.settings import get_settings

app = typer.Typer(
    help="Payments: reconcile with the provider, refund money taken late, retry refused calls.",
    no_args_is_help=True,
)


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


@app.command("hold")
def payments_hold(
    reason: Annotated[
        str, typer.Option(help="Why (shown with every refusal while held), e.g. the restore.")
    ],
) -> None:
    """Hold money going out: the worker makes no payout and no refund (they wait, queued) and
    `payouts export` writes no file, until `payments release`. `scripts/restore` holds it:
    after a restore to an earlier moment, money that left since looks held again, and would
    leave twice. A hold already in place is kept. Prints the hold as JSON."""
    from dealbroker.payments import hold

    held = _in_transaction(lambda s: hold.hold(s, reason, Actor.system()))
    _print({"held": True, "since": held.since, "reason": held.reason, "by": held.by})


@app.command("release")
def payments_release() -> None:
    """Release the hold on money going out, once what moved after the restored moment is
    reconciled (docs/operations/backup-restore.md): the payouts and refunds waiting are made."""
    from dealbroker.payments import hold

    released = _in_transaction(lambda s: hold.release(s, Actor.system()))
    if released is None:
        typer.echo("payouts and refunds were not held: nothing to release")
        return
    _print({"held": False, "since": released.since, "reason": released.reason})


@app.command("refund-late")
def refund_late(
    payment_intent: Annotated[str, typer.Argument(help="The PaymentIntent's id (pi_...).")],
) -> None:
    """Refund in full what Stripe took on a PaymentIntent whose payment does not pay for its
    deal (the deal was cancelled or moved on), as the webhook does for such money now; for what
    reconcile lists as `status ... here, succeeded at the provider`. The refund is made at once
    (the worker would make it too), and both parties are told. Refused for a payment that paid
    for its deal, or that its deal still waits for."""
    from dealbroker.payments.reconciliation import LateRefund, refund_taken_late
    from dealbroker.payments.tasks import make_pending_calls

    settings = get_settings()

    async def run(sessionmaker: async_sessionmaker[AsyncSession]) -> LateRefund:
        done = await refund_taken_late(sessionmaker, settings, payment_intent)
        await make_pending_calls(sessionmaker, settings)
        return done

    done = _with_sessionmaker(run)
    outcome = "refund queued" if done.queued else "refund under way or made already"
    # The refund is decided in transactions of its own (the reconciliation's); it is recorded
    # once it is, so a refused refund leaves no record.
    from dealbroker.audit import service as audit

    _in_transaction(
        lambda s: audit.record(
            s,
            Actor.system(),
            "payment.refund_late",
            "payment",
            done.payment_id,
            after={"paymentIntent": payment_intent, "dealId": done.deal_id, "outcome": outcome},
        )
    )
    _print({"paymentId": done.payment_id, "dealId": done.deal_id, "outcome": outcome})


REFUSED_LISTED = 1000


@app.command("refused")
def refused() -> None:
    """List the provider calls refused for good that nobody has tried again (a refund the
    provider refused, a payout the bank rejected), newest first, one JSON line each: what the
    back office's Refused calls page shows."""
    from dealbroker.payments import service

    rows = _in_transaction(lambda s: service.refused_calls(s, REFUSED_LISTED))
    for call, payment in rows:
        _print(
            {
                "callId": str(call.id),
                "kind": call.kind,
                "dealId": str(call.deal_id),
                "paymentId": str(payment.id),
                "refusedAt": call.finished_at.isoformat() if call.finished_at else None,
                "error": call.error,
            }
        )


@app.command("retry")
def retry(
    call_id: Annotated[uuid.UUID, typer.Argument(help="The refused call's id (payments refused).")],
) -> None:
    """Try a refused call again, once, as the back office's Try again button does: a new call
    (a new idempotency key) is queued, then made at once, as the worker would. A call retried
    before queues nothing; one whose payment has moved on is refused."""
    from dealbroker.payments import service
    from dealbroker.payments.tasks import make_pending_calls

    settings = get_settings()
    done = _in_transaction(lambda s: service.retry_refused_call(s, call_id, Actor.system()))
    _with_sessionmaker(lambda sm: make_pending_calls(sm, settings))
    _print(
        {
            "callId": str(done.call_id),
            "kind": done.kind,
            "newCallId": str(done.new_call_id) if done.new_call_id else None,
            "outcome": "queued" if done.new_call_id else "retried before; nothing queued",
        }
    )
