"""``dealbroker deals show``: everything about one deal for support, without a full account
number."""

import asyncio
import json

from tests.lifecycle_helpers import run_provider_calls
from tests.processes import cli
from tests.web.pages import paid, signed_deal, submit

IBAN = "NO9386011117947"


async def test_deals_show_prints_the_whole_story(client, caller, sessionmaker, db_url):
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    await paid(client, seller, buyer)
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
    assert [p["status"] for p in story["payments"]] == ["PaidOut"]
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
