"""The back office's money pages over HTTP, on a deployment that pays out by bank file: the
payouts waiting, the export and the file's download, the bank's status report uploaded and
what it did, reconciliation, and a refused payout tried again (once, however many press).
Deals reach ``PendingPayOut`` through the real services; the reports are built as a bank's."""

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select

from dealbroker.app import create_app
from dealbroker.audit.models import AuditRecord
from dealbroker.audit.service import Actor as AuditActor
from dealbroker.core import clock
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.payments import hold
from dealbroker.payments import repository as payment_rows
from dealbroker.payments.iso20022 import MAX_REPORT_BYTES
from dealbroker.payments.models import ProviderCall
from dealbroker.payments.provider import ProviderError, SimulatedProvider
from dealbroker.payments.tasks import make_pending_calls
from tests import lifecycle_helpers
from tests.conftest import BASE_URL, make_settings
from tests.lifecycle_helpers import DealDriver, new_deal
from tests.payments.bank import BANK_SETTINGS, pending_payout, read_file, status_report
from tests.processes import cli
from tests.web.back_office import csrf, log_in, make_operator

IBAN = "NO9386011117947"
BBAN = "15030000029"
RAIL = {
    "payout_rail": "bank_file",
    "payout_debtor_name": BANK_SETTINGS.payout_debtor_name,
    "payout_debtor_account": BANK_SETTINGS.payout_debtor_account,
    "payout_debtor_bic": BANK_SETTINGS.payout_debtor_bic,
    "payout_debtor_org_number": BANK_SETTINGS.payout_debtor_org_number,
}


@pytest.fixture
async def bank(db_url, engine, monkeypatch) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app on the bank-file rail; deals driven in the test pay out by it."""
    monkeypatch.setattr(lifecycle_helpers, "SETTINGS", BANK_SETTINGS)
    app = create_app(make_settings(db_url, **RAIL), engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield client


async def finance(client: httpx.AsyncClient, sessionmaker, email="fin@example.com") -> str:
    """A finance operator logged in; the payouts page's CSRF token."""
    await make_operator(sessionmaker, email, "finance")
    await log_in(client, sessionmaker, email)
    shown = await client.get("/back-office/payouts")
    assert shown.status_code == 200, shown.text
    return csrf(shown.text)


def upload(token: str, data: bytes, name: str = "report.xml") -> dict:
    return {"data": {"csrf": token}, "files": {"report": (name, data, "application/xml")}}


async def trail(sessionmaker) -> list[AuditRecord]:
    async with sessionmaker() as session:
        return list((await session.scalars(select(AuditRecord).order_by(AuditRecord.id))).all())


async def test_payouts_are_exported_downloaded_and_settled_by_the_banks_report(
    bank, sessionmaker, tmp_path
):
    deals = [
        await pending_payout(sessionmaker, 450000, IBAN),
        await pending_payout(sessionmaker, 123455, BBAN),
    ]
    token = await finance(bank, sessionmaker)
    shown = (await bank.get("/back-office/payouts")).text
    for d in deals:
        assert f'data-waiting="{d.deal_id}"' in shown
    assert "NOK\u00a04,275.00" in shown  # 4500 less the 5 % fee, in the reader's locale

    exported = await bank.post("/back-office/payouts/export", data={"csrf": token})
    assert exported.status_code == 303, exported.text
    assert exported.headers["location"].startswith("/back-office/payouts?done=payouts-exported")
    shown = (await bank.get("/back-office/payouts")).text
    assert "data-waiting=" not in shown
    message_id = re.search(r'data-file="([^"]+)"', shown).group(1)
    assert shown.count('data-state="submitted"') == 2

    download = await bank.get(f"/back-office/payouts/files/{message_id}")
    assert download.status_code == 200
    assert download.headers["content-disposition"] == f'attachment; filename="{message_id}.xml"'
    assert download.headers["cache-control"] == "no-store"
    again = await bank.get(f"/back-office/payouts/files/{message_id}")
    assert again.content == download.content  # the same document, byte for byte
    (tmp_path / "file.xml").write_bytes(download.content)
    sent = read_file(tmp_path / "file.xml")  # valid against the schema
    assert sent.message_id == message_id
    ids = [t.end_to_end_id for t in sent.transfers]
    assert (await bank.get("/back-office/payouts/files/DBPNOSUCHFILE")).status_code == 404

    report = status_report(
        "BANK-STS-1", message_id, [(ids[0], "ACSC", None, None), (ids[1], "RJCT", "AC04", None)]
    )
    imported = await bank.post("/back-office/payouts/report", **upload(token, report))
    assert imported.status_code == 200, imported.text
    assert re.findall(r'data-outcome="(\w+)"', imported.text) == ["paid", "failed"]
    assert 'data-state="succeeded"' in imported.text
    assert 'data-state="failed"' in imported.text
    statuses = {(await d.payment()).status for d in deals}
    assert statuses == {"PaidOut", "PayoutFailed"}
    twice = await bank.post("/back-office/payouts/report", **upload(token, report))
    assert twice.status_code == 200
    assert "imported before: nothing changed" in twice.text

    records = [r for r in await trail(sessionmaker) if r.actor == "operator:fin@example.com"]
    assert [r.action for r in records] == [
        "operator.login",
        "payouts.export",
        "payouts.file",
        "payouts.file",
        "payouts.import",
    ]
    assert records[1].target_id == message_id
    assert records[1].after["transfers"] == 2
    assert records[4].before == {"file": message_id, "unanswered": 2}
    assert records[4].after == {"outcomes": {"paid": 1, "failed": 1}, "unknown": 0}
    assert all(r.request_id for r in records)


async def test_a_refused_payout_is_tried_again_once_however_many_press(
    bank, sessionmaker, tmp_path
):
    d = await pending_payout(sessionmaker, 9999, IBAN)
    token = await finance(bank, sessionmaker)
    await bank.post("/back-office/payouts/export", data={"csrf": token})
    shown = (await bank.get("/back-office/payouts")).text
    message_id = re.search(r'data-file="([^"]+)"', shown).group(1)
    async with sessionmaker() as session:
        (refused,) = await payment_rows.calls_of(session, d.deal_id)
    report = status_report("BANK-STS-2", message_id, [(refused.id.hex, "RJCT", "AC04", None)])
    await bank.post("/back-office/payouts/report", **upload(token, report))

    listed = await bank.get("/back-office/refused-calls")
    assert f'data-call="{refused.id}"' in listed.text
    assert '<dd data-method="card">Card</dd>' in listed.text  # the payment's method
    assert "AC04" in listed.text
    path = f"/back-office/refused-calls/{refused.id}/retry"
    answers = await asyncio.gather(
        *(bank.post(path, data={"csrf": csrf(listed.text)}) for _ in range(3))
    )
    locations = sorted(a.headers["location"] for a in answers)
    assert [a.status_code for a in answers] == [303, 303, 303]
    assert locations == [
        "/back-office/refused-calls?done=call-retried",
        "/back-office/refused-calls?done=call-retried-before",
        "/back-office/refused-calls?done=call-retried-before",
    ]
    async with sessionmaker() as session:
        calls = await payment_rows.calls_of(session, d.deal_id)
    assert [c.status for c in calls] == ["failed", "pending"]
    assert f'data-call="{refused.id}"' not in (await bank.get("/back-office/refused-calls")).text

    # The worker hands it to the rail: a new transfer, in the next file only.
    await make_pending_calls(sessionmaker, BANK_SETTINGS)
    assert (await d.payment()).status == "PendingPayOut"
    await bank.post("/back-office/payouts/export", data={"csrf": token})
    shown = (await bank.get("/back-office/payouts")).text
    assert f'data-transfer="{calls[1].id.hex}" data-state="submitted"' in shown
    retried = [r for r in await trail(sessionmaker) if r.action == "provider_call.retry"]
    assert len(retried) == 1
    assert retried[0].target_id == str(refused.id)
    assert retried[0].before["status"] == "failed"
    assert retried[0].after["call"] == str(calls[1].id)
    # A call that is not refused, or no call at all, is not retried.
    async with sessionmaker() as session:
        pending = await session.get(ProviderCall, calls[1].id)
    assert pending.status == "submitted"
    not_refused = await bank.post(
        f"/back-office/refused-calls/{pending.id}/retry", data={"csrf": token}
    )
    assert not_refused.status_code == 409
    missing = await bank.post(
        f"/back-office/refused-calls/{uuid.uuid4()}/retry", data={"csrf": token}
    )
    assert missing.status_code == 404


async def test_a_report_that_is_not_one_is_refused_and_changes_nothing(bank, sessionmaker):
    await pending_payout(sessionmaker, 9999, IBAN)
    token = await finance(bank, sessionmaker)
    await bank.post("/back-office/payouts/export", data={"csrf": token})
    before = len(await trail(sessionmaker))
    broken = await bank.post("/back-office/payouts/report", **upload(token, b"<not xml"))
    assert broken.status_code == 400
    assert "nothing was imported" in broken.text
    dtd = b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x "y">]><d>&x;</d>'
    assert (await bank.post("/back-office/payouts/report", **upload(token, dtd))).status_code == 400
    foreign = status_report("BANK-STS-3", "NOT-OURS", [("9" * 32, "ACSC", None, None)])
    answered = await bank.post("/back-office/payouts/report", **upload(token, foreign))
    assert answered.status_code == 409
    assert "never exported here" in answered.text
    large = await bank.post(
        "/back-office/payouts/report", **upload(token, b" " * (MAX_REPORT_BYTES + 1))
    )
    assert large.status_code == 413
    huge = await bank.post(
        "/back-office/payouts/report", **upload(token, b" " * (MAX_REPORT_BYTES + 128 * 1024))
    )
    assert huge.status_code == 413  # the body's cap, before the form is read
    no_file = await bank.post("/back-office/payouts/report", data={"csrf": token})
    assert no_file.status_code == 400
    two = await bank.post(
        "/back-office/payouts/report",
        data={"csrf": token},
        files=[("report", ("a.xml", b"<a/>")), ("report", ("b.xml", b"<b/>"))],
    )
    assert two.status_code == 400
    assert len(await trail(sessionmaker)) == before


async def test_reconciliation_shows_the_payouts_the_bank_has_not_answered(bank, sessionmaker):
    d = await pending_payout(sessionmaker, 9999, IBAN)
    token = await finance(bank, sessionmaker)
    shown = await bank.get("/back-office/reconcile")
    assert shown.status_code == 200
    assert "data-no-differences" in shown.text
    await bank.post("/back-office/payouts/export", data={"csrf": token})
    shown = await bank.get("/back-office/reconcile")
    assert 'data-difference="no_answer"' in shown.text
    assert str(d.deal_id) in shown.text
    today = clock.now().date()
    earlier = (today - timedelta(days=400)).isoformat()
    past = await bank.get(f"/back-office/reconcile?since={earlier}&until={earlier}")
    assert "data-no-differences" in past.text
    backwards = await bank.get(f"/back-office/reconcile?since={today}&until={earlier}")
    assert backwards.status_code == 400
    assert (await bank.get("/back-office/reconcile?since=soon")).status_code == 400


async def test_money_actions_want_a_recent_login(bank, sessionmaker):
    await pending_payout(sessionmaker, 9999, IBAN)
    start = clock.now()
    now = [start]
    clock.set_clock(lambda: now[0])
    token = await finance(bank, sessionmaker)
    now[0] = start + timedelta(minutes=16)
    stale = await bank.post("/back-office/payouts/export", data={"csrf": token})
    assert stale.status_code == 303
    assert stale.headers["location"] == "/back-office/login?again=fresh"
    assert (await bank.get("/back-office/payouts")).status_code == 200  # reading needs none
    assert "payouts.export" not in [r.action for r in await trail(sessionmaker)]


async def test_held_payouts_are_shown_and_no_file_is_made(bank, sessionmaker):
    """Money out held (after a restore): the payouts page says since when and why, and the
    export makes no file until the hold is released."""
    d = await pending_payout(sessionmaker, 450000, IBAN)
    token = await finance(bank, sessionmaker)
    async with sessionmaker() as session, session.begin():
        await hold.hold(session, "restored to 12:00", AuditActor.system())
    try:
        shown = (await bank.get("/back-office/payouts")).text
        assert "data-payouts-held" in shown
        assert "(restored to 12:00)" in shown
        refused = await bank.post("/back-office/payouts/export", data={"csrf": token})
        assert refused.status_code == 409
        assert "Payouts and refunds are held" in refused.text
        # The command as code to type, without the message's backticks.
        assert "<code>dealbroker payments release</code>" in refused.text
        assert "`" not in refused.text
        assert f'data-waiting="{d.deal_id}"' in (await bank.get("/back-office/payouts")).text
        # A payout decided while held waits for the release, not for "a moment".
        later = await pending_payout(sessionmaker, 9999, IBAN)
        waiting = re.search(
            rf'data-waiting="{later.deal_id}">.*?</dl>',
            (await bank.get("/back-office/payouts")).text,
            re.S,
        )
        assert waiting is not None
        assert "held: handed to the bank rail once released" in waiting.group(0)
        assert "in a moment" not in waiting.group(0)
    finally:
        async with sessionmaker() as session, session.begin():
            await hold.release(session, AuditActor.system())
    exported = await bank.post("/back-office/payouts/export", data={"csrf": token})
    assert exported.status_code == 303, exported.text
    assert "data-payouts-held" not in (await bank.get("/back-office/payouts")).text


async def test_export_on_a_deployment_without_the_bank_rail_is_refused(client, sessionmaker):
    token = await finance(client, sessionmaker)
    refused = await client.post("/back-office/payouts/export", data={"csrf": token})
    assert refused.status_code == 409
    assert "does not pay by bank file" in refused.text
    shown = await client.get("/back-office/reconcile")
    assert "do not go by bank file" in shown.text


@pytest.mark.parametrize("lang", ["nb", "sv"])
async def test_the_money_pages_read_in_norwegian_and_swedish(bank, sessionmaker, lang):
    from tests.web.english import ENGLISH, WORD

    def english(html: str) -> set[str]:
        text = re.sub(r"<(code|style|script)[^>]*>.*?</\1>", " ", html, flags=re.S)
        text = re.sub(r"<[^>]+>", " ", text)
        return {w for w in WORD.findall(text) if w.lower() in ENGLISH}

    await pending_payout(sessionmaker, 450000, IBAN)
    await pending_payout(sessionmaker, 9999, BBAN)
    token = await finance(bank, sessionmaker)
    assert not english((await bank.get(f"/back-office/payouts?lang={lang}")).text)
    exported = await bank.post("/back-office/payouts/export", data={"csrf": token})
    shown = await bank.get(exported.headers["location"])
    assert not english(shown.text)
    message_id = re.search(r'data-file="([^"]+)"', shown.text).group(1)
    ids = re.findall(r'data-transfer="([^"]+)"', shown.text)
    report = status_report(
        "BANK-STS-L", message_id, [(ids[0], "ACSC", None, None), (ids[1], "RJCT", "AC04", None)]
    )
    imported = await bank.post("/back-office/payouts/report", **upload(token, report))
    assert not english(imported.text)
    refused = await bank.post("/back-office/payouts/report", **upload(token, b"<x"))
    assert not english(refused.text)
    for path in ("/back-office/", "/back-office/reconcile", "/back-office/refused-calls"):
        assert not english((await bank.get(path)).text), path
    listed = await bank.get("/back-office/refused-calls")
    call_id = re.search(r'data-call="([^"]+)"', listed.text).group(1)
    retried = await bank.post(f"/back-office/refused-calls/{call_id}/retry", data={"csrf": token})
    assert not english((await bank.get(retried.headers["location"])).text)


async def refused_refund(sessionmaker, monkeypatch, keys: list[str]) -> DealDriver:
    """A returned item whose refund the provider refused (the idempotency keys it was asked
    with go to ``keys``): the money stays held."""

    async def refuse(self, payment, *, idempotency_key: str) -> None:
        keys.append(idempotency_key)
        raise ProviderError("charge_disputed: the charge is disputed")

    d = await new_deal(sessionmaker)
    await d.to_signed("Carrier")
    await d.pay()
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.PROVIDER)
    monkeypatch.setattr(SimulatedProvider, "refund", refuse)
    await d.fire(Trigger.CARRIER_RETURNED, Actor.PROVIDER)
    assert (await d.payment()).status == "Paid"  # held: the refund was refused
    monkeypatch.undo()
    return d


async def test_a_refund_the_provider_refused_is_tried_again_with_a_new_key(
    client, sessionmaker, monkeypatch
):
    """The provider refuses the refund of a returned item (as Stripe may): the money stays
    held, the refused refund is listed, and its retry is a new call, with a new idempotency
    key, that refunds the buyer once."""
    keys: list[str] = []
    d = await refused_refund(sessionmaker, monkeypatch, keys)

    await finance(client, sessionmaker)
    listed = await client.get("/back-office/refused-calls")
    assert 'data-kind="refund"' in listed.text
    assert "charge_disputed" in listed.text
    call_id = re.search(r'data-call="([^"]+)"', listed.text).group(1)
    assert keys == [call_id]
    retried = await client.post(
        f"/back-office/refused-calls/{call_id}/retry", data={"csrf": csrf(listed.text)}
    )
    assert retried.headers["location"] == "/back-office/refused-calls?done=call-retried"
    await make_pending_calls(sessionmaker, lifecycle_helpers.SETTINGS)
    payment = await d.payment()
    assert (payment.status, payment.refunded_minor) == ("Refunded", payment.amount_minor)
    async with sessionmaker() as session:
        calls = await payment_rows.calls_of(session, d.deal_id)
    assert [(c.kind, c.status) for c in calls if c.kind == "refund"] == [
        ("refund", "failed"),
        ("refund", "succeeded"),
    ]
    assert str(calls[-1].id) != call_id  # a new key: the provider keeps its refusal for the old
    again = await client.post(
        f"/back-office/refused-calls/{call_id}/retry", data={"csrf": csrf(listed.text)}
    )
    assert again.headers["location"] == "/back-office/refused-calls?done=call-retried-before"


async def test_the_cli_lists_and_retries_refused_calls_through_the_same_service(
    client, sessionmaker, db_url, monkeypatch
):
    keys: list[str] = []
    d = await refused_refund(sessionmaker, monkeypatch, keys)
    listed = await asyncio.to_thread(cli, db_url, "payments", "refused")
    assert listed.returncode == 0, listed.stderr
    (line,) = [json.loads(x) for x in listed.stdout.splitlines()]
    assert (line["callId"], line["kind"], line["dealId"]) == (keys[0], "refund", str(d.deal_id))
    assert "charge_disputed" in line["error"]

    retried = await asyncio.to_thread(cli, db_url, "payments", "retry", keys[0])
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout)["outcome"] == "queued"
    payment = await d.payment()  # made at once by the command, as the worker would
    assert (payment.status, payment.refunded_minor) == ("Refunded", payment.amount_minor)
    again = await asyncio.to_thread(cli, db_url, "payments", "retry", keys[0])
    assert json.loads(again.stdout)["outcome"] == "retried before; nothing queued"
    assert (await asyncio.to_thread(cli, db_url, "payments", "refused")).stdout == ""
    missing = await asyncio.to_thread(cli, db_url, "payments", "retry", str(uuid.uuid4()))
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: No provider call")
    records = [r for r in await trail(sessionmaker) if r.action == "provider_call.retry"]
    assert [r.actor.startswith("system:") for r in records] == [True]
    await finance(client, sessionmaker)
    assert "data-call=" not in (await client.get("/back-office/refused-calls")).text
