"""``dealbroker deals show``: everything about one deal for support, without a full account
number, with the parties' conversations apart from the dispute's evidence."""

import asyncio
import json
import uuid

from dealbroker.audit.service import Actor
from dealbroker.conversations import service as conversations
from tests.lifecycle_helpers import run_provider_calls
from tests.processes import cli
from tests.web.conversations import OFF_PLATFORM, talked
from tests.web.pages import path, signed_deal, submit

IBAN = "NO9386011117947"


async def test_deals_show_prints_the_whole_story(client, caller, sessionmaker, db_url):
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    # Paid with Vipps (simulated in the sandbox): the dossier names the method and its provider.
    checkout = path((await submit(client, buyer, "pay", method="vipps")).headers["location"])
    assert (await submit(client, checkout, "pay", outcome="succeeded")).status_code == 303
    await submit(client, buyer, "approve")
    await submit(client, seller, "account", holder="Kari Nordmann", account=IBAN)
    await run_provider_calls(sessionmaker)

    shown = await asyncio.to_thread(cli, db_url, "deals", "show", deal["id"])
    assert shown.returncode == 0, shown.stderr
    assert IBAN not in shown.stdout  # only the last digits
    story = json.loads(shown.stdout)
    assert story["deal"]["status"] == "Completed"
    assert [h["to"] for h in story["history"]] == [
        "Draft",
        "Ad",
        "Signed",
        "Pickup_Pending",
        "Completed",
    ]
    assert [o["status"] for o in story["offers"]] == ["Approved"]
    assert [(p["status"], p["method"], p["provider"]) for p in story["payments"]] == [
        ("PaidOut", "vipps", "simulated")
    ]
    assert [(c["kind"], c["status"]) for c in story["providerCalls"]] == [("payout", "succeeded")]
    assert story["payoutAccount"] == {"holder": "Kari Nordmann", "kind": "iban", "ending": "7947"}
    # The approval's deadline to pay, closed when the buyer paid, and the pickup's.
    assert {t["trigger"] for t in story["deadlines"]} == {"approval_lapsed", "pickup_expired"}
    # Met before its reminder time: the reminder is due a day before the deadline, not sent.
    (deadline,) = [t for t in story["deadlines"] if t["trigger"] == "pickup_expired"]
    assert deadline["remindAt"] < deadline["dueAt"]
    assert deadline["remindedAt"] is None
    kinds = [e["kind"] for e in story["events"]]
    assert kinds[0] == "deal.status"
    assert "payment.status" in kinds
    assert any(m["kind"] == "payout_sent" for m in story["messages"])

    missing = await asyncio.to_thread(
        cli, db_url, "deals", "show", "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"
    )
    assert missing.returncode == 1
    assert "No deal" in missing.stderr


async def test_deals_show_prints_the_conversations_apart_from_the_evidence(
    client, caller, sessionmaker, db_url
):
    t = await talked(client, caller, sessionmaker, db_url)
    async with sessionmaker() as session, session.begin():
        await conversations.hide(
            session, uuid.UUID(t.deal_id), t.off_platform, Actor("operator:sue@example.com")
        )

    shown = await asyncio.to_thread(cli, db_url, "deals", "show", t.deal_id)
    assert shown.returncode == 0, shown.stderr
    story = json.loads(shown.stdout)
    first, second = story["conversations"]
    # The approved buyer's conversation first, though the other has the latest message.
    assert first["approvedBuyer"] is True
    assert first["buyer"]["email"] == "a@example.com"
    assert second["approvedBuyer"] is False
    assert second["buyer"] is None  # asked, never offered
    # Every message, the hidden one too, marked with who hid it; reports and warnings kept.
    assert [(m["author"], m["body"]) for m in first["messages"]] == [
        ("buyer", OFF_PLATFORM),
        ("seller", "Please pay in the deal."),
    ]
    hidden = first["messages"][0]
    assert hidden["hidden"]["by"] == "operator:sue@example.com"
    assert hidden["warnings"] == ["phone", "payment"]
    assert hidden["report"]["by"] == "seller"
    assert hidden["report"]["reason"] == "Wants me to pay outside"
    assert hidden["report"]["closedAt"] is not None
    assert first["messages"][1]["hidden"] is None
    assert [m["id"] for m in second["messages"]] == [str(t.question), str(t.answer)]
    assert second["messages"][1]["report"]["closedAt"] is None
    # The dispute's statements stay apart: none here, and no message among them.
    assert story["evidence"]["statements"] == []
