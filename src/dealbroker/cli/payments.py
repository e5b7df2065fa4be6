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
    help="Payments: reconcile with the provider, refund money taken late, record money moved "
    "that the database forgot, retry refused calls.",
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


@app.command("record-made")
def record_made(
    deal_id: Annotated[uuid.UUID, typer.Argument(help="The deal whose money moved.")],
    kind: Annotated[str, typer.Option(help="refund or payout.")],
    provider_ref: Annotated[
        str,
        typer.Option(
            help="The provider's id of the money moved: Stripe's re_..., the Vipps reference, "
            "the call's own Swish instruction or bank end-to-end id."
        ),
    ],
    checked_by_hand: Annotated[
        bool,
        typer.Option(help="A bank transfer, read on the bank's statement (no bank API to ask)."),
    ] = False,
) -> None:
    """Record that the provider already made the deal's refund or payout, which our database
    says is still to be made (or was refused): money that left after the moment a restore went
    back to, which `reconcile` names. The provider's record is read first and must be that
    money, of the amount due; the deal's newest call of that kind is then marked made with the
    provider's id, the payment and deal move on as if the worker had made it, and the call is
    never made again. A call still to be made is recorded only while money out is held
    (`payments hold`); in the audit trail. Prints the call recorded as JSON."""
    from dealbroker.payments.reconciliation import Recorded
    from dealbroker.payments.reconciliation import record_made as run
    from dealbroker.payments.service import CallKind

    if kind not in (CallKind.REFUND, CallKind.PAYOUT):
        typer.echo("error: --kind is refund or payout", err=True)
        raise typer.Exit(2)
    settings = get_settings()

    async def work(sessionmaker: async_sessionmaker[AsyncSession]) -> Recorded:
        return await run(
            sessionmaker,
            settings,
            deal_id,
            CallKind(kind),
            provider_ref,
            checked_by_hand=checked_by_hand,
        )

    done = _with_sessionmaker(work)
    _print(
        {
            "callId": done.call_id,
            "kind": done.kind,
            "paymentId": done.payment_id,
            "dealId": done.deal_id,
            "providerRef": done.provider_ref,
            "checked": done.checked,
        }
    )


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
