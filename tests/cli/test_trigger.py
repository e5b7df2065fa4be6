"""``dealbroker trigger EVENT|SCENARIO``, run as a real process on the test database: one line
per event emitted, in the order the events API lists them."""

import asyncio
import subprocess

from tests.conftest import create_deal
from tests.processes import cli
from tests.sandbox.calls import deal_events, get_deal, list_events


def lines(done: subprocess.CompletedProcess[str]) -> list[tuple[str, str, str]]:
    """(event id, kind, detail) of each line printed."""
    out = []
    for line in done.stdout.splitlines():
        event_id, kind, detail = line.split(maxsplit=2)
        out.append((event_id, kind, detail))
    return out


async def run(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, db_url, "trigger", *args)


async def test_an_event_on_a_draft_fast_forwards_it(client, caller, db_url):
    deal = await create_deal(client, caller)
    seen = await deal_events(client, caller, deal["id"])

    done = await run(
        db_url,
        "signature.status",
        "--client-id",
        caller.client_id,
        "--deal",
        deal["id"],
        "--signature-type",
        "Buyer",
    )

    assert done.returncode == 0, done.stderr
    emitted = (await deal_events(client, caller, deal["id"]))[len(seen) :]
    printed = lines(done)
    assert [(i, k) for i, k, _ in printed] == [(e["id"], e["event"]) for e in emitted]
    assert [d for _, k, d in printed if k != "deal.offer"] == [
        "Seller Initiated",
        "Seller Completed",
        "Ad",
        emitted[4]["data"]["id"],  # the approved offer
        "Buyer Completed",
        "Signed",
    ]
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Signed"
    assert done.stderr.strip() == f"deal {deal['id']} is Signed"


async def test_the_trigger_name_works_too_and_payment_status_is_given(client, caller, db_url):
    deal = await create_deal(client, caller)
    done = await run(
        db_url,
        "paymentStatus",
        "--client-id",
        caller.client_id,
        "--deal",
        deal["id"],
        "--status",
        "Paid",
    )
    assert done.returncode == 0, done.stderr
    assert lines(done)[-2:] == [
        (lines(done)[-2][0], "payment.status", "Paid 4500.50 NOK"),
        (lines(done)[-1][0], "deal.status", "Shipping_Pending"),
    ]
    assert done.stderr.strip() == f"deal {deal['id']} is Shipping_Pending, payment Paid"


async def test_an_event_without_a_deal_sends_dummy_data(client, caller, db_url):
    done = await run(db_url, "deal.status", "--status", "Ad")  # the only integration
    assert done.returncode == 0, done.stderr
    events = await list_events(client, caller)
    assert lines(done) == [(events[0]["id"], "deal.status", "Ad")]
    assert done.stderr == ""


async def test_a_scenario_prints_its_whole_story(client, caller, db_url):
    done = await run(db_url, "pickup-expired-refunded", "--client-id", caller.client_id)
    assert done.returncode == 0, done.stderr
    deal_id = done.stderr.split()[1]
    events = await deal_events(client, caller, deal_id)
    assert [(i, k) for i, k, _ in lines(done)] == [(e["id"], e["event"]) for e in events]
    assert [d for _, k, d in lines(done) if k == "deal.status"][-3:] == [
        "Pickup_Pending",
        "Pickup_Expired",
        "Refunded",
    ]
    assert done.stderr.strip() == f"deal {deal_id} is Refunded, payment Refunded"


async def test_a_scenario_on_a_given_deal(client, caller, db_url):
    deal = await create_deal(client, caller)
    done = await run(
        db_url,
        "cancelled-with-pending-offer",
        "--client-id",
        caller.client_id,
        "--deal",
        deal["id"],
    )
    assert done.returncode == 0, done.stderr
    assert [(k, d.split()[0]) for _, k, d in lines(done)][1:] == [
        ("deal.status", "Cancelled"),
        ("deal.offerDenied", lines(done)[0][2].split()[0]),
    ]


async def test_refusals(client, caller, other, db_url):
    deal = await create_deal(client, caller)
    cancelled = await run(
        db_url,
        "deal.status",
        "--client-id",
        caller.client_id,
        "--deal",
        deal["id"],
        "--status",
        "Cancelled",
    )
    assert cancelled.returncode == 0, cancelled.stderr

    closed = await run(
        db_url, "signature.status", "--client-id", caller.client_id, "--deal", deal["id"]
    )
    assert (closed.returncode, closed.stdout) == (1, "")
    assert "cannot reach a signature" in closed.stderr

    which = await run(db_url, "deal.status")  # two integrations now
    assert which.returncode == 1
    assert "--client-id" in which.stderr

    unknown = await run(db_url, "deal.teleported", "--client-id", caller.client_id)
    assert unknown.returncode == 2
    assert "carrier-completed" in unknown.stderr

    misplaced = await run(db_url, "deal.offer", "--client-id", caller.client_id, "--status", "Ad")
    assert misplaced.returncode == 2
    assert "takes no --status" in misplaced.stderr

    invalid = await run(db_url, "deal.status", "--client-id", caller.client_id, "--status", "Sold")
    assert invalid.returncode == 2
    assert "status" in invalid.stderr

    foreign = await run(
        db_url,
        "deal.status",
        "--client-id",
        other.client_id,
        "--deal",
        deal["id"],
        "--status",
        "Ad",
    )
    assert foreign.returncode == 1
    assert f"No deal {deal['id']}" in foreign.stderr
