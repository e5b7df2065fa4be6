"""The back office's money pages (finance): payouts waiting for the bank and the files they
went out in, the bank's status reports, the differences reconciliation finds, and the provider
calls the provider refused, with a retry.

The pages parse and render; the services decide and record each action in the audit trail
(``payments.bank_file``, ``payments.service.retry_refused_call``), the same ones the
``dealbroker payouts`` and ``dealbroker payments`` commands call. Every action that moves money
or settles it wants a recent login (``fresh``).
"""

import uuid
from datetime import date, datetime, time, timedelta
from typing import Annotated
from zoneinfo import ZoneInfo

from fastapi import Depends, Query, Request
from starlette.datastructures import UploadFile
from starlette.responses import HTMLResponse, Response

from dealbroker.core import clock
from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest, Conflict, NotFound
from dealbroker.core.i18n import N_, _
from dealbroker.operators.service import LoggedIn
from dealbroker.payments import bank_file, hold, reconciliation
from dealbroker.payments import service as payments
from dealbroker.payments.iso20022 import MAX_REPORT_BYTES
from dealbroker.web.backoffice.session import BACK_OFFICE, PREFIX, Finance, page, require_operator
from dealbroker.web.render import PRIVATE, not_found, with_commands

router = BACK_OFFICE.router()
# The status report's upload: the report's own bound and room for the form around it.
REPORT_PATH = f"{PREFIX}/payouts/report"
UPLOAD_PATHS = ((REPORT_PATH, MAX_REPORT_BYTES + 64 * 1024),)
FILES_SHOWN = 20
CALLS_SHOWN = 100
RECONCILE_DAYS = 30  # the period reconciliation looks at unless the operator chooses one
MAX_RECONCILE_DAYS = 366

Paying = Annotated[LoggedIn, Depends(require_operator("finance", fresh=True))]
Uploading = Annotated[LoggedIn, Depends(require_operator("finance", fresh=True, files=1))]

# What each state of a transfer, outcome of a bank status and kind of call reads as.
STATES = {
    "submitted": N_("sent, no answer from the bank yet"),
    "succeeded": N_("paid"),
    "failed": N_("refused by the bank"),
}
OUTCOMES = {
    "paid": N_("paid"),
    "failed": N_("failed: the payout waits for a retry or a new account"),
    "noted": N_("noted: the bank has not settled it yet"),
    "unchanged": N_("unchanged: settled already"),
    "conflict": N_("conflict: contradicts the payout's settled state, not applied"),
    "unknown": N_("unknown: not a payout of ours"),
}
KINDS = {"refund": N_("Refund"), "payout": N_("Payout"), "cancel": N_("Cancel a payment")}
DIFFERENCES = {
    "no_answer": N_("In a file, not settled by any report yet"),
    "unknown_id": N_("The bank reported on a payout that is in none of our files"),
    "amount_differs": N_("The amounts differ"),
    "conflict": N_("A status that contradicts the payout's settled state"),
    "unconfirmed_payout": N_("Paid out, but no bank status report confirmed it"),
}


HELD = N_(
    "Payouts and refunds are held: the database was restored to an earlier moment, and money "
    "that left since would leave twice. No file is made until they are released with "
    "`dealbroker payments release`, after reconciling (see the backup and restore guide)."
)


def _words(table: dict[str, str]) -> dict[str, str]:
    return {key: _(words) for key, words in table.items()}


@router.get("/payouts", response_class=HTMLResponse)
async def payouts(request: Request, logged_in: Finance, session: Session) -> Response:
    """Payouts waiting for a file, the export button, the report's upload, the newest files."""
    return page(request, "back_office_payouts.html", await _payouts_context(session))


async def _payouts_context(session: Session) -> dict[str, object]:
    overview = await bank_file.overview(session, FILES_SHOWN)
    return {
        "held": await hold.current(session),
        "waiting": overview.waiting,
        "files": overview.files,
        "states": _words(STATES),
        "outcomes": _words(OUTCOMES),
        "max_report_mb": MAX_REPORT_BYTES // (1024 * 1024),
    }


@router.post("/payouts/export")
async def payouts_export(request: Request, logged_in: Paying, session: Session) -> Response:
    """One file with every payout the rail holds and no file has (``payouts export``)."""
    if await hold.current(session) is not None:
        return await _payouts_refused(request, session, with_commands(_(HELD)), 409)
    try:
        exported = await bank_file.export(
            session, request.app.state.settings, logged_in.actor, request.state.request_id
        )
    except Conflict:
        if await hold.current(session) is not None:  # held since the check above
            return await _payouts_refused(request, session, with_commands(_(HELD)), 409)
        error = _(
            "This deployment does not pay by bank file, or its client-funds account is not "
            "configured: no file was made. See the payouts guide."
        )
        return await _payouts_refused(request, session, error, 409)
    if exported is None:
        return BACK_OFFICE.to("/payouts?done=nothing-to-export")
    return BACK_OFFICE.to(f"/payouts?done=payouts-exported#file-{exported.message_id}")


@router.get("/payouts/files/{message_id}")
async def payouts_file(
    request: Request, message_id: str, logged_in: Finance, session: Session
) -> Response:
    """A file exported before, as the document first written (``payouts file``), to save."""
    stored = await bank_file.stored_file(
        session, message_id[:35], logged_in.actor, request.state.request_id
    )
    if stored is None:
        return not_found(request)
    return Response(
        stored.document.encode(),
        media_type="application/xml",
        headers={
            **PRIVATE,
            "Content-Disposition": f'attachment; filename="{stored.message_id}.xml"',
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
        },
    )


@router.post(REPORT_PATH.removeprefix(PREFIX))
async def payouts_report(request: Request, logged_in: Uploading, session: Session) -> Response:
    """Import the bank's status report (``payouts import``), then show what it did to each
    payout. The report is read bounded and parsed by the service the command uses."""
    form = await request.form()  # read and checked by the route's dependency
    upload = form.get("report")
    if not isinstance(upload, UploadFile):
        return await _payouts_refused(request, session, _("Choose the bank's report file."), 400)
    data = await upload.read(MAX_REPORT_BYTES + 1)
    if len(data) > MAX_REPORT_BYTES:
        error = _("The file is larger than %(size)s MB: nothing was imported.") % {
            "size": MAX_REPORT_BYTES // (1024 * 1024)
        }
        return await _payouts_refused(request, session, error, 413)
    try:
        report = bank_file.read_report(data)
        async with session.begin_nested():
            result = await bank_file.import_report(
                session, report, logged_in.actor, request.state.request_id
            )
    except BadRequest as exc:
        error = _(
            "This is not a bank status report we can read (ISO 20022 pain.002.001.03): "
            "nothing was imported."
        )
        return await _payouts_refused(request, session, error, 400, exc.detail)
    except Conflict as exc:
        error = _("This report answers a file that was never exported here: nothing was imported.")
        return await _payouts_refused(request, session, error, 409, exc.detail)
    context = {**await _payouts_context(session), "imported": result}
    return page(request, "back_office_payouts.html", context)


async def _payouts_refused(
    request: Request, session: Session, error: str, status: int, detail: str | None = None
) -> Response:
    context = {**await _payouts_context(session), "error": error, "detail": detail}
    return page(request, "back_office_payouts.html", context, status)


@router.get("/reconcile", response_class=HTMLResponse)
async def reconcile(
    request: Request,
    logged_in: Finance,
    session: Session,
    since: Annotated[str | None, Query(max_length=10)] = None,
    until: Annotated[str | None, Query(max_length=10)] = None,
) -> Response:
    """The differences between our money and the bank's and the provider's, in a period of
    days (the last 30 unless chosen), found when the page is opened: what ``payouts
    reconcile`` and ``payments reconcile`` list."""
    settings = request.app.state.settings
    zone = ZoneInfo(settings.time_zone)
    today = clock.now().astimezone(zone).date()
    try:
        first = date.fromisoformat(since) if since else today - timedelta(days=RECONCILE_DAYS)
        last = date.fromisoformat(until) if until else today
    except ValueError:
        first, last = date.max, date.min
    context: dict[str, object] = {"since": first, "until": last, "kinds": _words(DIFFERENCES)}
    if not timedelta(0) <= last - first <= timedelta(days=MAX_RECONCILE_DAYS):
        error = _("Choose a first day on or before the last day, at most a year apart.")
        today_context = {"since": today - timedelta(days=RECONCILE_DAYS), "until": today}
        return page(
            request,
            "back_office_reconcile.html",
            {**context, **today_context, "error": error},
            400,
        )
    start = datetime.combine(first, time.min, zone)
    end = datetime.combine(last + timedelta(days=1), time.min, zone)
    context["payouts"] = (
        await bank_file.reconcile(session, start, end)
        if settings.payout_rail == "bank_file"
        else None
    )
    # The request's transaction ends before the providers are asked: none is held across
    # their answers, and reconciliation's own sessions find SQLite's one writer free.
    await session.commit()
    context["provider"] = (
        await reconciliation.reconcile(
            request.app.state.sessionmaker, settings, start, end, bank_files=False
        )
        if reconciliation.sources(settings, bank_files=False)  # Stripe, Vipps, Swish
        else None
    )
    return page(request, "back_office_reconcile.html", context)


@router.get("/refused-calls", response_class=HTMLResponse)
async def refused(request: Request, logged_in: Finance, session: Session) -> Response:
    """Refunds, payouts and cancels the provider refused for good, with a retry each."""
    context: dict[str, object] = {
        "calls": await payments.refused_calls(session, CALLS_SHOWN),
        "kinds": _words(KINDS),
    }
    return page(request, "back_office_refused_calls.html", context)


@router.post("/refused-calls/{call_id}/retry")
async def retry(
    request: Request, call_id: uuid.UUID, logged_in: Paying, session: Session
) -> Response:
    """Queue a refused call again (``payments.service.retry_refused_call``): once, however
    many times it is pressed."""
    try:
        async with session.begin_nested():
            done = await payments.retry_refused_call(
                session, call_id, logged_in.actor, request.state.request_id
            )
    except NotFound:
        return not_found(request)
    except Conflict:
        error = _(
            "This call cannot be retried: the payment has moved on since (refunded, paid out, "
            "or no payout account). Look at the deal."
        )
        context: dict[str, object] = {
            "calls": await payments.refused_calls(session, CALLS_SHOWN),
            "kinds": _words(KINDS),
            "error": error,
        }
        return page(request, "back_office_refused_calls.html", context, 409)
    outcome = "call-retried" if done.new_call_id else "call-retried-before"
    return BACK_OFFICE.to(f"/refused-calls?done={outcome}")
