"""Payouts by bank file, end to end on both databases: deals paid out through the real services
to ``PendingPayOut``, ``dealbroker payouts export`` and ``import`` as the operator's processes,
the bank's status reports built here as the bank would send them."""

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from sqlalchemy import func, select

from dealbroker.audit.models import AuditRecord
from dealbroker.audit.service import Actor as AuditActor
from dealbroker.core import clock
from dealbroker.core.settings import Settings
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.events import service as events
from dealbroker.events.models import Delivery, Event
from dealbroker.payments import bank_file
from dealbroker.payments import repository as payment_rows
from dealbroker.payments.models import PayoutFile, PayoutTransfer, ProviderCall
from tests import lifecycle_helpers
from tests.lifecycle_helpers import count, new_deal, payment_statuses
from tests.payments.bank import (
    BANK_SETTINGS,
    payouts,
    pending_payout,
    popen_payouts,
    read_file,
    status_report,
)
from tests.processes import cli

IBAN = "NO9386011117947"
SYSTEM = AuditActor("system:test")
FOREIGN_IBAN = "DE89370400440532013000"
BBAN = "15030000010"


def lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


async def call_ids(d) -> list[str]:  # type: ignore[no-untyped-def]
    async with d.sessionmaker() as session:
        return [c.id.hex for c in await payment_rows.calls_of(session, d.deal_id)]


async def test_payouts_go_out_in_one_file_and_the_banks_report_settles_them(
    sessionmaker, db_url, tmp_path, bank_rail
):
    deals = [
        await pending_payout(sessionmaker, 450000, IBAN),
        await pending_payout(sessionmaker, 123455, "1503.00.00029"),  # a Norwegian BBAN
        await pending_payout(sessionmaker, 9999, FOREIGN_IBAN),
    ]
    payments = [await d.payment() for d in deals]
    ids = [(await call_ids(d))[0] for d in deals]

    exported = await asyncio.to_thread(payouts, db_url, tmp_path, "export", "--out", "day1.xml")
    assert exported.returncode == 0, exported.stderr
    summary = lines(exported.stdout)[0]
    sent = read_file(tmp_path / "day1.xml")  # valid against the schema
    assert (summary["messageId"], summary["transfers"]) == (sent.message_id, 3)
    by_id = {t.end_to_end_id: t for t in sent.transfers}
    assert set(by_id) == set(ids)  # the end-to-end id is the payout call's
    for payment, e2e in zip(payments, ids, strict=True):
        assert by_id[e2e].amount_minor == payment.amount_minor - payment.fee_minor
        assert by_id[e2e].currency == "NOK"
        assert by_id[e2e].creditor == "Kari Nordmann"
    assert (by_id[ids[0]].account, by_id[ids[0]].scheme) == (IBAN, "IBAN")
    assert (by_id[ids[1]].account, by_id[ids[1]].scheme) == ("15030000029", "BBAN")
    assert (by_id[ids[2]].account, by_id[ids[2]].scheme) == (FOREIGN_IBAN, "IBAN")
    # 1234.55 NOK with a 5 % fee: 61.7275 rounds half-up to 61.73, the seller gets 1172.82.
    assert by_id[ids[1]].amount_minor == 117282
    # Money is conserved: what the file pays plus our fees is what the buyers paid.
    assert sent.control_sum_minor == sum(t.amount_minor for t in sent.transfers)
    assert sent.control_sum_minor + sum(p.fee_minor for p in payments) == sum(
        p.amount_minor for p in payments
    )
    for d in deals:
        assert (await d.payment()).status == "PendingPayOut"  # on its way, not paid yet

    again = await asyncio.to_thread(payouts, db_url, tmp_path, "export", "--out", "day2.xml")
    assert again.returncode == 0, again.stderr
    assert "nothing to export" in again.stdout
    assert not (tmp_path / "day2.xml").exists()

    report = status_report(
        "BANK-STS-1",
        sent.message_id,
        [
            (ids[0], "ACSC", None, by_id[ids[0]].amount_minor),
            (ids[1], "ACCP", None, None),
            (ids[2], "RJCT", "AC04", None),
            ("9" * 32, "ACSC", None, 100),  # not ours
        ],
    )
    (tmp_path / "report1.xml").write_bytes(report)
    async with sessionmaker() as session, session.begin():
        endpoint = await events.create_endpoint(
            session,
            deals[0].integration_id,
            BANK_SETTINGS,
            url="http://127.0.0.1:9/hooks",
            event_kinds=["payment.status"],
            description=None,
            enabled=True,
        )
    events_before = [len(await d.events()) for d in deals]
    imported = await asyncio.to_thread(payouts, db_url, tmp_path, "import", "report1.xml")
    assert imported.returncode == 0, imported.stderr
    outcomes = {line["endToEndId"]: line["outcome"] for line in lines(imported.stdout)[:-1]}
    assert outcomes == {ids[0]: "paid", ids[1]: "paid", ids[2]: "failed", "9" * 32: "unknown"}
    assert lines(imported.stdout)[-1]["unknown"] == ["9" * 32]
    # Both in the audit trail, as the system user who ran the commands.
    async with sessionmaker() as session:
        trail = (await session.scalars(select(AuditRecord).order_by(AuditRecord.id))).all()
    assert [(r.action, r.target_type) for r in trail] == [
        ("payouts.export", "bank_file"),
        ("payouts.import", "bank_report"),
    ]
    assert trail[0].target_id == summary["messageId"]
    assert trail[0].after["transfers"] == summary["transfers"]
    assert trail[1].after == {"outcomes": {"paid": 2, "failed": 1, "unknown": 1}, "unknown": 1}
    assert all(r.actor.startswith("system:") for r in trail)

    for d, payment in zip(deals[:2], payments[:2], strict=True):
        paid = await d.payment()
        assert (paid.status, paid.paid_out_minor) == (
            "PaidOut",
            payment.amount_minor - payment.fee_minor,
        )
        assert payment_statuses(await d.events("payment.status"))[-2:] == [
            "PendingPayOut",
            "PaidOut",
        ]
        event = json.loads((await d.events("payment.status"))[-1].payload)["data"]
        assert (event["amount"], event["fee"]) == (
            f"{payment.amount_minor / 100:.2f}",
            f"{payment.fee_minor / 100:.2f}",
        )
    # The integration's webhook endpoint gets the PaidOut event: a delivery is queued for it.
    async with sessionmaker() as session:
        delivered = await session.scalars(
            select(Event.payload)
            .join(Delivery, Delivery.event_seq == Event.seq)
            .where(Delivery.endpoint_id == endpoint.id)
        )
        statuses = [json.loads(p)["data"]["status"] for p in delivered]
    assert statuses == ["PaidOut"]
    failed = await deals[2].payment()
    assert (failed.status, failed.paid_out_minor) == ("PayoutFailed", 0)
    async with sessionmaker() as session:
        call = await session.get(ProviderCall, uuid.UUID(hex=ids[2]))
    assert call.status == "failed"
    assert "AC04" in call.error

    # The same report again changes nothing.
    events_after = [len(await d.events()) for d in deals]
    assert events_after != events_before
    twice = await asyncio.to_thread(payouts, db_url, tmp_path, "import", "report1.xml")
    assert twice.returncode == 0, twice.stderr
    assert "imported before; nothing changed" in twice.stdout
    assert [len(await d.events()) for d in deals] == events_after

    # The seller of the refused payout gives another account: a new transfer, a new end-to-end
    # id, in the next file only, and paid once.
    await deals[2].payout_account(BBAN)
    assert (await deals[2].payment()).status == "PendingPayOut"
    retry_id = (await call_ids(deals[2]))[-1]
    assert retry_id != ids[2]
    second = await asyncio.to_thread(payouts, db_url, tmp_path, "export", "--out", "day2.xml")
    assert second.returncode == 0, second.stderr
    resent = read_file(tmp_path / "day2.xml")
    assert [(t.end_to_end_id, t.account, t.scheme) for t in resent.transfers] == [
        (retry_id, BBAN, "BBAN")
    ]
    assert resent.message_id != sent.message_id
    assert resent.control_sum_minor == payments[2].amount_minor - payments[2].fee_minor

    (tmp_path / "report2.xml").write_bytes(
        status_report(
            "BANK-STS-2",
            resent.message_id,
            [(retry_id, "ACSC", None, None), (ids[2], "ACSC", None, None)],
        )
    )
    settled = await asyncio.to_thread(payouts, db_url, tmp_path, "import", "report2.xml")
    assert settled.returncode == 0, settled.stderr
    outcomes = {line["endToEndId"]: line["outcome"] for line in lines(settled.stdout)[:-1]}
    # The refused transfer reported paid after all is not applied: the operator looks at it.
    assert outcomes == {retry_id: "paid", ids[2]: "conflict"}
    retried = await deals[2].payment()
    assert (retried.status, retried.paid_out_minor) == (
        "PaidOut",
        payments[2].amount_minor - payments[2].fee_minor,
    )
    statuses = payment_statuses(await deals[2].events("payment.status"))
    assert statuses.count("PaidOut") == 1
    assert statuses[-4:] == ["PendingPayOut", "PayoutFailed", "PendingPayOut", "PaidOut"]

    async with sessionmaker() as session:
        differences = await bank_file.reconcile(
            session, retried.created_at.replace(year=2000), retried.updated_at.replace(year=2100)
        )
    assert sorted((x.kind, x.end_to_end_id) for x in differences) == [
        ("conflict", ids[2]),
        ("unknown_id", "9" * 32),
    ]


async def test_two_exports_racing_put_each_payout_in_exactly_one_file(
    sessionmaker, db_url, tmp_path, bank_rail
):
    deals = [await pending_payout(sessionmaker, 10000 + i, IBAN) for i in range(6)]
    expected = {(await call_ids(d))[0] for d in deals}
    runs = [popen_payouts(db_url, tmp_path, "export", "--out", f"race{i}.xml") for i in (1, 2)]
    results = [await asyncio.to_thread(run.communicate, timeout=120) for run in runs]
    for run, (_, err) in zip(runs, results, strict=True):
        assert run.returncode == 0, err
    files = [read_file(p) for p in sorted(tmp_path.glob("race*.xml"))]
    sent = [t.end_to_end_id for f in files for t in f.transfers]
    assert sorted(sent) == sorted(expected)  # every payout, none twice
    assert await count(sessionmaker, PayoutTransfer) == 6
    assert await count(sessionmaker, PayoutFile) == len(files)


async def test_an_invalid_file_is_never_recorded_nor_written(
    sessionmaker, db_url, tmp_path, bank_rail, monkeypatch
):
    """The document is checked against the schema before anything is recorded: a payout that
    would make an invalid file stays waiting for export."""
    from dealbroker.payments.iso20022 import MessageError

    d = await pending_payout(sessionmaker, 50000, IBAN)
    monkeypatch.setattr(bank_file, "end_to_end_id", lambda call_id: "X" * 36)  # over Max35Text
    with pytest.raises(MessageError, match=r"not a valid pain\.001\.001\.03"):
        async with sessionmaker() as session, session.begin():
            await bank_file.export(session, BANK_SETTINGS, SYSTEM)
    assert await count(sessionmaker, PayoutFile) == 0
    async with sessionmaker() as session:
        waiting = await session.scalar(
            select(func.count())
            .select_from(ProviderCall)
            .where(ProviderCall.deal_id == d.deal_id, ProviderCall.payout_file_id.is_(None))
        )
    assert waiting == 1
    monkeypatch.undo()


async def test_a_file_refused_as_a_whole_fails_each_of_its_payouts(sessionmaker, bank_rail):
    deals = [await pending_payout(sessionmaker, 70000, IBAN) for _ in range(2)]
    async with sessionmaker() as session, session.begin():
        exported = await bank_file.export(session, BANK_SETTINGS, SYSTEM)
    report = bank_file.read_report(status_report("BANK-STS-G", exported.message_id, [], "RJCT"))
    async with sessionmaker() as session, session.begin():
        result = await bank_file.import_report(session, report, SYSTEM)
    assert sorted(a.outcome for a in result.applied) == ["failed", "failed"]
    for d in deals:
        assert (await d.payment()).status == "PayoutFailed"


async def test_a_status_that_settles_nothing_yet_is_noted_only(sessionmaker, bank_rail):
    d = await pending_payout(sessionmaker, 30000, IBAN)
    async with sessionmaker() as session, session.begin():
        exported = await bank_file.export(session, BANK_SETTINGS, SYSTEM)
    e2e = (await call_ids(d))[0]
    report = bank_file.read_report(
        status_report("BANK-STS-A", exported.message_id, [(e2e, "ACTC", None, None)])
    )
    async with sessionmaker() as session, session.begin():
        result = await bank_file.import_report(session, report, SYSTEM)
    assert [a.outcome for a in result.applied] == ["noted"]
    assert (await d.payment()).status == "PendingPayOut"


async def test_reconcile_lists_every_difference(sessionmaker, bank_rail, monkeypatch):
    start = clock.now()
    unanswered = await pending_payout(sessionmaker, 20000, IBAN)
    misreported = await pending_payout(sessionmaker, 30000, IBAN)
    async with sessionmaker() as session, session.begin():
        exported = await bank_file.export(session, BANK_SETTINGS, SYSTEM)
    wrong_amount = (await call_ids(misreported))[0]
    report = bank_file.read_report(
        status_report(
            "BANK-STS-R",
            exported.message_id,
            [(wrong_amount, "ACSC", None, 1), ("f" * 32, "RJCT", "AC01", None)],
        )
    )
    async with sessionmaker() as session, session.begin():
        await bank_file.import_report(session, report, SYSTEM)
    # A payout paid by other means (the simulated rail) has no bank confirmation.
    monkeypatch.setattr(
        lifecycle_helpers, "SETTINGS", Settings(database_url="sqlite://", environment="sandbox")
    )
    simulated = await new_deal(sessionmaker, 150)
    await simulated.to_signed("Pickup")
    await simulated.pay()
    await simulated.payout_account(IBAN)
    await simulated.fire(Trigger.BUYER_APPROVED, Actor.BUYER)
    assert (await simulated.payment()).status == "PaidOut"

    async with sessionmaker() as session:
        differences = await bank_file.reconcile(session, start, clock.now())
    found = sorted((x.kind, x.end_to_end_id or str(x.deal_id)) for x in differences)
    assert found == sorted(
        [
            ("no_answer", (await call_ids(unanswered))[0]),
            ("no_answer", wrong_amount),  # paid is not applied: its amount differs
            ("amount_differs", wrong_amount),
            ("conflict", wrong_amount),
            ("unknown_id", "f" * 32),
            ("unconfirmed_payout", str(simulated.deal_id)),
        ]
    )
    amounts = {
        x.kind: (x.ours_minor, x.theirs_minor)
        for x in differences
        if x.end_to_end_id == wrong_amount
    }
    payment = await misreported.payment()
    assert amounts["amount_differs"] == (payment.amount_minor - payment.fee_minor, 1)
    async with sessionmaker() as session:
        assert await bank_file.reconcile(session, clock.now(), clock.now()) == []


async def test_the_stored_file_is_written_again_byte_for_byte(
    sessionmaker, db_url, tmp_path, bank_rail
):
    await pending_payout(sessionmaker, 80000, IBAN)
    first = await asyncio.to_thread(payouts, db_url, tmp_path, "export", "--out", "a.xml")
    assert first.returncode == 0, first.stderr
    message_id = lines(first.stdout)[0]["messageId"]
    again = await asyncio.to_thread(payouts, db_url, tmp_path, "file", message_id, "--out", "b.xml")
    assert again.returncode == 0, again.stderr
    assert Path(tmp_path / "a.xml").read_bytes() == Path(tmp_path / "b.xml").read_bytes()
    kept = await asyncio.to_thread(payouts, db_url, tmp_path, "file", message_id, "--out", "b.xml")
    assert kept.returncode == 1  # never replaces a file


async def test_an_export_that_overlaps_another_takes_none_of_its_payouts(sessionmaker, bank_rail):
    """Deterministic overlap: the second export starts while the first holds its payouts
    uncommitted. On PostgreSQL it skips the locked rows; on SQLite it waits for the first to
    commit and then finds them in a file. Either way no payout is in two files."""
    for i in range(3):
        await pending_payout(sessionmaker, 20000 + i, IBAN)

    async def second():  # type: ignore[no-untyped-def]
        async with sessionmaker() as session, session.begin():
            return await bank_file.export(session, BANK_SETTINGS, SYSTEM)

    async with sessionmaker() as session, session.begin():
        first = await bank_file.export(session, BANK_SETTINGS, SYSTEM)
        racing = asyncio.create_task(second())
        await asyncio.sleep(0.5)
    assert first is not None
    assert first.transfers == 3
    assert await racing is None
    assert await count(sessionmaker, PayoutTransfer) == 3


async def test_export_refuses_a_deployment_that_does_not_pay_by_bank_file(
    sessionmaker, db_url, tmp_path
):
    d = await new_deal(sessionmaker)
    refused = await asyncio.to_thread(
        cli, db_url, "payouts", "export", "--out", str(tmp_path / "x")
    )
    assert refused.returncode == 2
    assert "DEALBROKER_PAYOUT_RAIL=bank_file" in refused.stderr
    assert not (tmp_path / "x").exists()
    assert await count(sessionmaker, PayoutFile) == 0
    assert await d.status() == "Draft"


async def test_the_sandbox_trigger_settles_a_payout_the_bank_rail_holds(sessionmaker, bank_rail):
    """``paymentStatus`` PaidOut or PayoutFailed on a payout waiting for the bank settles it as
    the bank's report would: no later file pays it, and a failed one is retried once."""
    from dealbroker.deals import repository as deal_rows
    from dealbroker.payments import service as payments

    paid, failed = [await pending_payout(sessionmaker, 40000, IBAN) for _ in range(2)]
    for d, status in ((paid, payments.P.PAID_OUT), (failed, payments.P.PAYOUT_FAILED)):
        async with sessionmaker() as session, session.begin():
            deal = await deal_rows.by_id_for_update(session, d.deal_id)
            await payments.sandbox_set(session, deal, status, BANK_SETTINGS)
    assert (await paid.payment()).status == "PaidOut"
    assert (await failed.payment()).status == "PayoutFailed"
    async with sessionmaker() as session, session.begin():
        assert await bank_file.export(session, BANK_SETTINGS, SYSTEM) is None
    await failed.payout_account(IBAN)  # the same account again: a retry
    retry = (await call_ids(failed))[-1]
    async with sessionmaker() as session, session.begin():
        exported = await bank_file.export(session, BANK_SETTINGS, SYSTEM)
    async with sessionmaker() as session:
        sent = await payment_rows.transfers_in_file(session, exported.message_id)
    assert [t.end_to_end_id for t in sent] == [retry]
