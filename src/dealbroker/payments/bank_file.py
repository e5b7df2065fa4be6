"""The bank-file payout rail: payouts leave escrow as credit transfers from the operator's
client-funds account, in ISO 20022 files the operator sends to the bank (see docs/payouts.md).

- The provider-call job hands each payout to the rail (``BankFilePayouts.pay_out``): the call
  becomes ``submitted`` and the payment stays ``PendingPayOut``, on its way.
- ``export`` puts every submitted payout that is in no file yet into one pain.001 file, in one
  transaction that marks each payout with its file: a payout is in exactly one file, and its
  end-to-end id is its call's id, so a payout retried after a refusal (a new call) is a new
  transfer, never the old one again.
- ``import_report`` applies the bank's pain.002 status report: accepted (``ACCP``, ``ACSP``,
  ``ACSC``, ``ACWC``) makes the payout ``PaidOut``, rejected (``RJCT``) ``PayoutFailed`` with
  the bank's reason, through the same service calls every provider's answer goes through.
  Every status is kept; a report imported again changes nothing.
- ``reconcile`` lists where our payouts and the bank's files and reports disagree.
"""

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core import clock, money
from dealbroker.core.errors import BadRequest, Conflict
from dealbroker.core.settings import Settings
from dealbroker.payments import hold, iso20022, repository
from dealbroker.payments import service as payments
from dealbroker.payments.escrow import deal_side
from dealbroker.payments.models import PayoutFile, PayoutStatusEntry, PayoutTransfer
from dealbroker.payments.provider import debtor_problem

# Transaction statuses that mean the bank took the payout for payment: ``PaidOut`` ("paid out
# within 5 bank days"). ``ACTC`` (the file passed technical checks) and ``PDNG`` settle nothing.
ACCEPTED = frozenset({"ACCP", "ACSP", "ACSC", "ACWC"})
REJECTED = "RJCT"
# Payouts per file: a bank takes far more, but one export stays one short transaction.
MAX_TRANSFERS = 5000


def debtor(settings: Settings) -> iso20022.Debtor:
    """The client-funds account payouts are paid from; ``Conflict`` when this deployment does
    not pay by bank file, or its account settings are missing or wrong."""
    if settings.payout_rail != "bank_file":
        raise Conflict(
            "Payouts go by bank file only with DEALBROKER_PAYOUT_RAIL=bank_file; this "
            f"deployment's payout rail is {settings.payout_rail}."
        )
    problem = debtor_problem(settings)
    if problem is not None:
        raise Conflict(f"The client-funds account is not configured: {problem}.")
    number = settings.payout_debtor_account.replace(" ", "").replace(".", "").upper()
    kind = "iban" if number[:2].isalpha() else "account"
    return iso20022.Debtor(
        iso20022.Party(settings.payout_debtor_name.strip(), kind, number),
        settings.payout_debtor_bic.replace(" ", "").upper(),
        settings.payout_debtor_org_number.replace(" ", ""),
    )


def end_to_end_id(call_id: uuid.UUID) -> str:
    """A payout call's id as the transfer's end-to-end id (32 characters; ISO allows 35)."""
    return call_id.hex


async def export(
    session: AsyncSession, settings: Settings, actor: Actor, request_id: str | None = None
) -> PayoutFile | None:
    """One credit transfer file with every payout submitted and not yet in a file, recorded
    with its transfers and in the audit trail (``payouts.export``); None when there is none.
    The document is checked against the schema before anything is recorded. Refused
    (``Conflict``) while payouts are held (``payments.hold``)."""
    await hold.refuse_if_held(session)
    paid_from = debtor(settings)
    now = clock.now()
    calls = await repository.calls_to_export(session, MAX_TRANSFERS)
    file_id = uuid.uuid4()
    transfers: list[PayoutTransfer] = []
    for call in calls:
        payment = await repository.payment(session, call.payment_id)
        account = (
            None
            if call.account_id is None
            else await repository.account_by_id(session, call.account_id)
        )
        if payment.status != payments.P.PENDING_PAYOUT or account is None:
            continue  # moved by other means (the sandbox): left out, and listed by reconcile
        transfers.append(
            PayoutTransfer(
                end_to_end_id=end_to_end_id(call.id),
                file_id=file_id,
                call_id=call.id,
                payment_id=payment.id,
                deal_id=payment.deal_id,
                amount_minor=payment.payout_minor,
                currency=payment.currency,
                creditor_kind=account.kind,
                creditor_account=account.number,
                creditor_name=account.holder[: iso20022.MAX_NAME],
            )
        )
        call.payout_file_id = file_id
    if not transfers:
        return None
    message_id = f"DBP{now:%Y%m%d%H%M%S}{secrets.token_hex(4).upper()}"
    document = iso20022.credit_transfer(
        message_id,
        now,
        now.astimezone(ZoneInfo(settings.time_zone)).date(),
        paid_from,
        [
            iso20022.Transfer(
                t.end_to_end_id,
                t.amount_minor,
                t.currency,
                iso20022.Party(t.creditor_name, t.creditor_kind, t.creditor_account),
                f"Payout, deal {t.deal_id}",
            )
            for t in transfers
        ],
    )
    payout_file = PayoutFile(
        id=file_id,
        message_id=message_id,
        created_at=now,
        transfers=len(transfers),
        total_minor=sum(t.amount_minor for t in transfers),
        document=document.decode(),
    )
    repository.add_payout_file(session, payout_file, transfers)
    await session.flush()
    await audit.record(
        session,
        actor,
        "payouts.export",
        "bank_file",
        message_id,
        after={
            "transfers": payout_file.transfers,
            "total": money.to_string(payout_file.total_minor),
        },
        request_id=request_id,
    )
    return payout_file


async def stored_file(
    session: AsyncSession, message_id: str, actor: Actor, request_id: str | None = None
) -> PayoutFile | None:
    """A file written before, by its message id, to write it again (the same document, byte
    for byte); who took it is in the audit trail (``payouts.file``): it names every seller's
    account."""
    found = await repository.payout_file(session, message_id)
    if found is not None:
        await audit.record(
            session,
            actor,
            "payouts.file",
            "bank_file",
            message_id,
            after={"transfers": found.transfers, "total": money.to_string(found.total_minor)},
            request_id=request_id,
        )
    return found


@dataclass(frozen=True)
class Waiting:
    """A payout in no file yet: ``handed`` once the rail has it (the next export takes it);
    until then the worker hands it over."""

    call_id: uuid.UUID
    deal_id: uuid.UUID
    amount_minor: int
    currency: str
    handed: bool
    since: datetime


@dataclass(frozen=True)
class SentTransfer:
    end_to_end_id: str
    deal_id: uuid.UUID
    amount_minor: int
    currency: str
    creditor_name: str
    state: str  # the payout call's: submitted (no answer yet), succeeded, failed


@dataclass(frozen=True)
class SentFile:
    message_id: str
    created_at: datetime
    total_minor: int
    currency: str | None  # None: transfers in more than one currency
    transfers: list[SentTransfer]


@dataclass(frozen=True)
class Overview:
    waiting: list[Waiting]
    files: list[SentFile]


async def overview(session: AsyncSession, files: int = 20) -> Overview:
    """The payouts waiting for a file, and the newest ``files`` files with their transfers'
    states: the back office's payouts page."""
    waiting = [
        Waiting(
            call.id,
            payment.deal_id,
            payment.payout_minor,
            payment.currency,
            call.status == "submitted",
            call.created_at,
        )
        for call, payment in await repository.payouts_not_in_a_file(session)
    ]
    newest = await repository.newest_payout_files(session, files)
    sent: dict[uuid.UUID, list[SentTransfer]] = {f.id: [] for f in newest}
    for transfer, state in await repository.transfers_with_state(session, list(sent)):
        sent[transfer.file_id].append(
            SentTransfer(
                transfer.end_to_end_id,
                transfer.deal_id,
                transfer.amount_minor,
                transfer.currency,
                transfer.creditor_name,
                state,
            )
        )
    return Overview(
        waiting,
        [
            SentFile(
                f.message_id,
                f.created_at,
                f.total_minor,
                _one_currency(sent[f.id]),
                sent[f.id],
            )
            for f in newest
        ],
    )


def _one_currency(transfers: list[SentTransfer]) -> str | None:
    currencies = {t.currency for t in transfers}
    return currencies.pop() if len(currencies) == 1 else None


@dataclass(frozen=True)
class AppliedStatus:
    """What importing one transaction status did (``PayoutStatusEntry.outcome``)."""

    end_to_end_id: str
    status: str
    outcome: str
    deal_id: uuid.UUID | None
    reason: str | None


@dataclass(frozen=True)
class ImportResult:
    report_message_id: str
    already_imported: bool
    applied: list[AppliedStatus]

    @property
    def unknown(self) -> list[str]:
        return [a.end_to_end_id for a in self.applied if a.outcome == "unknown"]

    @property
    def outcomes(self) -> dict[str, int]:
        """How many statuses had each outcome."""
        counts: dict[str, int] = {}
        for status in self.applied:
            counts[status.outcome] = counts.get(status.outcome, 0) + 1
        return counts


def read_report(data: bytes) -> iso20022.StatusReport:
    """The bank's report, read safely and checked against its schema (``BadRequest`` if not)."""
    try:
        return iso20022.read_status_report(data)
    except iso20022.MessageError as exc:
        raise BadRequest(f"The status report was refused: {exc}") from exc


async def import_report(
    session: AsyncSession,
    report: iso20022.StatusReport,
    actor: Actor,
    request_id: str | None = None,
) -> ImportResult:
    """Apply a bank's status report, whole, in this transaction, and record it in the audit
    trail (``payouts.import``: before, the file it answers and how many of its payouts had no
    answer yet; after, how many statuses had each outcome). A report whose message
    id was imported before changes nothing; one that answers a file we never exported (its
    ``OrgnlMsgId``) is refused (``Conflict``) before anything is applied."""
    if await repository.report_imported(session, report.message_id):
        return ImportResult(report.message_id, True, [])
    answered = await repository.payout_file(session, report.original_message_id)
    if answered is None:
        # Not the bank's answer to a file of ours (another system's, or forged): applied, it
        # could settle payouts that no file of ours asked the bank to make.
        raise Conflict(
            f"The status report {report.message_id} answers file "
            f"{report.original_message_id or '(none named)'}, which was never exported here; "
            "nothing was imported."
        )
    states = await repository.transfers_with_state(session, [answered.id])
    before = {
        "file": answered.message_id,
        "unanswered": sum(1 for _, state in states if state == "submitted"),
    }
    applied: list[AppliedStatus] = []
    seen: set[str] = set()
    for status in await _statuses(session, report):
        if status.end_to_end_id in seen:
            continue  # one status per payout and report: the first one the bank lists
        seen.add(status.end_to_end_id)
        applied.append(await _apply(session, report.message_id, status))
    result = ImportResult(report.message_id, False, applied)
    await audit.record(
        session,
        actor,
        "payouts.import",
        "bank_report",
        report.message_id,
        before=before,
        after={"outcomes": result.outcomes, "unknown": len(result.unknown)},
        request_id=request_id,
    )
    return result


async def _statuses(
    session: AsyncSession, report: iso20022.StatusReport
) -> list[iso20022.TransactionStatus]:
    """The report's statuses per transfer. A file or block accepted or refused as a whole
    (a group or payment information status without one per transfer) gives each of its
    transfers that status."""
    statuses = list(report.transactions)
    listed = {s.end_to_end_id for s in statuses}
    whole = {REJECTED, *ACCEPTED}
    for transfer in await repository.transfers_in_file(session, report.original_message_id):
        if transfer.end_to_end_id in listed:
            continue
        block = report.block_statuses.get(f"{report.original_message_id}-{transfer.currency}")
        if block is not None and block[0] in whole:
            code, reason = block
        elif report.group_status in whole:
            code, reason = report.group_status, report.group_reason
        else:
            continue
        statuses.append(
            iso20022.TransactionStatus(transfer.end_to_end_id, code, reason, None, None)
        )
    return statuses


async def _apply(
    session: AsyncSession, report_message_id: str, status: iso20022.TransactionStatus
) -> AppliedStatus:
    transfer = await repository.transfer(session, status.end_to_end_id)
    outcome = "unknown"
    deal_id = None
    if transfer is not None:
        deal_id = transfer.deal_id
        outcome = await _settle(session, transfer, status)
    repository.add_status_entry(
        session,
        PayoutStatusEntry(
            id=uuid.uuid4(),
            report_message_id=report_message_id,
            end_to_end_id=status.end_to_end_id,
            status=status.status,
            reason=status.reason,
            amount_minor=status.amount_minor,
            currency=status.currency,
            outcome=outcome,
            imported_at=clock.now(),
        ),
    )
    await session.flush()
    return AppliedStatus(status.end_to_end_id, status.status, outcome, deal_id, status.reason)


async def _settle(
    session: AsyncSession, transfer: PayoutTransfer, status: iso20022.TransactionStatus
) -> str:
    """Move the payout as the bank says, once; the deal is locked first, then the call, in the
    provider-call job's order."""
    deal = await deal_side().lock(session, transfer.deal_id)
    call = await repository.call_for_update(session, transfer.call_id)
    if deal is None or call is None:
        return "unknown"
    differs = status.amount_minor is not None and (
        status.amount_minor != transfer.amount_minor or status.currency != transfer.currency
    )
    if status.status in ACCEPTED:
        if call.status == "succeeded":
            return "unchanged"
        if call.status != "submitted" or differs:
            return "conflict"  # paid after a refusal, or another amount: for the operator
        await payments.call_succeeded(session, deal, call)
        return "paid"
    if status.status == REJECTED:
        if call.status == "failed":
            return "unchanged"
        if call.status != "submitted":
            return "conflict"  # refused after being reported paid
        reason = f"the bank refused the transfer ({status.reason or 'no reason given'})"
        await payments.call_refused(session, deal, call, reason[:500])
        return "failed"
    return "noted"


@dataclass(frozen=True)
class PayoutDifference:
    """One place where our payouts and the bank disagree, for a period:

    - ``no_answer``: in a file, but no report has settled it yet;
    - ``unknown_id``: the bank reported on an end-to-end id that is in none of our files;
    - ``amount_differs``: the bank's amount, or the file's, is not the payment's payout
      (amount less fee and shipping);
    - ``conflict``: a status that contradicts the payout's settled state (paid after a
      refusal, refused after being paid);
    - ``unconfirmed_payout``: a payment ``PaidOut`` with no bank status that paid it.

    Amounts are in minor units; ``ours`` what we meant to pay, ``theirs`` what the bank says.
    """

    kind: str
    end_to_end_id: str | None
    deal_id: uuid.UUID | None
    payment_id: uuid.UUID | None
    ours_minor: int | None
    theirs_minor: int | None
    detail: str
    currency: str | None = None  # of both amounts (the bank's own is in ``detail`` if other)


async def reconcile(
    session: AsyncSession, since: datetime, until: datetime
) -> list[PayoutDifference]:
    """Every difference between our payouts and the bank's files and reports in
    ``[since, until)``: files written, statuses imported and payouts paid out in the period."""
    found: list[PayoutDifference] = []
    for transfer, payout_file in await repository.exported_without_answer(session, since, until):
        found.append(
            PayoutDifference(
                "no_answer",
                transfer.end_to_end_id,
                transfer.deal_id,
                transfer.payment_id,
                transfer.amount_minor,
                None,
                f"in file {payout_file.message_id} of {payout_file.created_at.isoformat()}, "
                "not settled by any report yet",
                transfer.currency,
            )
        )
    for transfer, payment in await repository.transfers_differing_from_payment(
        session, since, until
    ):
        found.append(
            PayoutDifference(
                "amount_differs",
                transfer.end_to_end_id,
                transfer.deal_id,
                payment.id,
                payment.payout_minor,
                transfer.amount_minor,
                "the file's amount is not the payment's payout (amount less fee and shipping)",
                payment.currency,
            )
        )
    for entry, reported in await repository.status_entries(session, since, until):
        found.extend(_entry_differences(entry, reported))
    for payment in await repository.paid_out_without_confirmation(session, since, until):
        found.append(
            PayoutDifference(
                "unconfirmed_payout",
                None,
                payment.deal_id,
                payment.id,
                payment.paid_out_minor,
                None,
                "PaidOut, but no bank status report confirmed it",
                payment.currency,
            )
        )
    return found


def _entry_differences(
    entry: PayoutStatusEntry, transfer: PayoutTransfer | None
) -> list[PayoutDifference]:
    report = f"report {entry.report_message_id}, status {entry.status}"
    if transfer is None:
        return [
            PayoutDifference(
                "unknown_id",
                entry.end_to_end_id,
                None,
                None,
                None,
                entry.amount_minor,
                f"{report}: not a payout in any of our files",
                entry.currency,
            )
        ]
    found = []
    if entry.amount_minor is not None and (
        entry.amount_minor != transfer.amount_minor or entry.currency != transfer.currency
    ):
        found.append(
            PayoutDifference(
                "amount_differs",
                entry.end_to_end_id,
                transfer.deal_id,
                transfer.payment_id,
                transfer.amount_minor,
                entry.amount_minor,
                f"{report}: the bank names {entry.currency} {entry.amount_minor}, "
                f"we sent {transfer.currency} {transfer.amount_minor}",
                transfer.currency,
            )
        )
    if entry.outcome == "conflict":
        found.append(
            PayoutDifference(
                "conflict",
                entry.end_to_end_id,
                transfer.deal_id,
                transfer.payment_id,
                transfer.amount_minor,
                entry.amount_minor,
                f"{report}: contradicts the payout's settled state; not applied",
                transfer.currency,
            )
        )
    return found
