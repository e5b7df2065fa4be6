"""GET /deals/v1/lifecycle: the lifecycle table as the code holds it, cacheable, authenticated."""

import os
import re
import subprocess
import sys

from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle
from dealbroker.deals.lifecycle import Actor, Effect
from dealbroker.deals.schemas import LifecycleOut
from tests.conftest import make_caller

PATH = "/deals/v1/lifecycle"


async def _table(client, caller) -> dict:
    response = await client.get(PATH, headers=caller.headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


async def test_every_status_once_with_final_ones_marked(client, caller):
    table = await _table(client, caller)
    LifecycleOut.model_validate(table)  # the documented response model
    assert table["initialStatus"] == "Draft"
    statuses = {s["status"]: s for s in table["statuses"]}
    assert list(statuses) == [s.value for s in DealStatus]
    assert {s for s, info in statuses.items() if info["final"]} == {
        "Cancelled",
        "Refunded",
        "Completed",
    }
    assert {s for s, info in statuses.items() if info["dispute"]} == {
        "Pickup_Denied",
        "Shipping_Review_Denied",
    }
    assert {s for s, info in statuses.items() if info["takesOffers"]} == {"Draft", "Ad"}
    # "final" is what the transitions say: none leaves a final status, one leaves every other.
    leaving = {source for t in table["transitions"] for source in t["from"]}
    assert {s for s, info in statuses.items() if not info["final"]} == leaving


async def test_every_transition_of_the_table_as_it_is(client, caller):
    transitions = (await _table(client, caller))["transitions"]
    assert len(transitions) == len(lifecycle.TRANSITIONS)
    for published, row in zip(transitions, lifecycle.TRANSITIONS, strict=True):
        assert set(published["from"]) == {s.value for s in row.sources}
        assert published["trigger"] == row.trigger.value
        assert published["to"] == row.target.value
        assert set(published["actors"]) == {a.value for a in row.actors}
        assert published["effects"] == [e.value for e in row.effects]
    by_trigger = {(t["trigger"], t["to"]): t for t in transitions}
    cancel = by_trigger[("cancel", "Cancelled")]
    assert cancel["from"] == ["Draft", "Ad", "Signed"]
    assert cancel["actors"] == ["integration", "seller", "sandbox"]
    assert cancel["effects"] == ["deny_pending_offers", "close_payment"]
    assert cancel["deadline"] is None
    # The interface's periods: 7 days to ship or pick up, 24 hours to review.
    assert by_trigger[("paid_for_shipping", "Shipping_Pending")]["deadline"] == {
        "effect": "shipping_deadline",
        "fires": "shipping_expired",
        "seconds": 7 * 24 * 3600,
        "duration": "P7D",
    }
    assert by_trigger[("paid_for_pickup", "Pickup_Pending")]["deadline"]["duration"] == "P7D"
    arrived = by_trigger[("carrier_delivered", "Shipping_Arrived")]["deadline"]
    assert arrived == {
        "effect": "review_deadline",
        "fires": "review_period_ended",
        "seconds": 24 * 3600,
        "duration": "P1D",
    }
    assert by_trigger[("carrier_returned", "Shipping_Returned")]["effects"] == ["refund"]
    # A parcel in transit always resolves: the hand-over sets the transit deadline (the
    # deployment's setting, 14 days by default), and its expiry opens the "not received" dispute.
    assert by_trigger[("carrier_picked_up", "Shipping_In_Progress")]["deadline"] == {
        "effect": "transit_deadline",
        "fires": "transit_expired",
        "seconds": 14 * 24 * 3600,
        "duration": "P14D",
    }
    assert by_trigger[("transit_expired", "Shipping_Review_Denied")]["actors"] == [
        "timer",
        "sandbox",
    ]
    not_received = by_trigger[("buyer_not_received", "Shipping_Review_Denied")]
    assert (not_received["from"], not_received["effects"]) == (
        ["Shipping_In_Progress"],
        ["not_received", "decision_date"],
    )
    assert by_trigger[("buyer_approved", "Completed")]["effects"] == ["pay_out"]
    # Disputes decided on evidence: the return's deadlines (7 and 14 days by default).
    requested = by_trigger[("return_requested", "Pickup_Denied")]
    assert (requested["actors"], requested["deadline"]["duration"]) == (["operator"], "P7D")
    sent = by_trigger[("return_sent", "Shipping_Review_Denied")]
    assert (sent["actors"], sent["deadline"]["fires"]) == (["buyer"], "return_confirm_expired")
    assert by_trigger[("return_not_sent", "Completed")]["effects"] == ["pay_out"]
    assert by_trigger[("dispute_refunded", "Refunded")]["actors"] == ["operator", "sandbox"]


async def test_actors_and_effects_are_described(client, caller):
    table = await _table(client, caller)
    assert [a["actor"] for a in table["actors"]] == [a.value for a in Actor]
    assert [e["effect"] for e in table["effects"]] == [e.value for e in Effect]
    assert all(item["description"] for item in table["actors"] + table["effects"])


async def test_cacheable_with_an_etag(client, caller):
    first = await client.get(PATH, headers=caller.headers)
    etag = first.headers["etag"]
    assert re.fullmatch(r'"[0-9a-f]{32}"', etag)
    assert first.headers["cache-control"] == "private, max-age=3600"
    for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = await client.get(PATH, headers={**caller.headers, "If-None-Match": sent})
        assert again.status_code == 304, sent
        assert again.content == b""
        assert again.headers["etag"] == etag
        assert again.headers["cache-control"] == "private, max-age=3600"
    stale = await client.get(PATH, headers={**caller.headers, "If-None-Match": '"old"'})
    assert stale.status_code == 200
    assert stale.content == first.content


def test_the_etag_is_the_same_in_every_process():
    """Sets are iterated in a per-process hash order; the body must not depend on it."""
    code = (
        "from dealbroker.deals.api import _lifecycle_body; "
        "from dealbroker.deals.lifecycle import DeadlineDays; "
        "print(_lifecycle_body(DeadlineDays())[1])"
    )
    etags = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(etags) == 1


async def test_needs_a_token_with_the_read_scope(client, sessionmaker):
    response = await client.get(PATH)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    # Even a conditional request: no 304 without a valid token.
    assert (await client.get(PATH, headers={"If-None-Match": "*"})).status_code == 401
    writer = await make_caller(client, sessionmaker, "Writer", scopes=["deals:write"])
    response = await client.get(PATH, headers=writer.headers)
    assert response.status_code == 403
    assert response.json()["detail"] == "This token lacks the scope deals:read."


def test_the_transit_and_return_deadlines_published_are_the_deployments():
    from dealbroker.deals.lifecycle import DeadlineDays
    from dealbroker.deals.schemas import lifecycle_out

    days = DeadlineDays(transit=20, return_send=3, return_confirm=10)
    published = {
        t["trigger"]: t["deadline"] for t in lifecycle_out(days)["transitions"] if t["deadline"]
    }
    assert published["carrier_picked_up"]["duration"] == "P20D"
    assert published["return_requested"]["duration"] == "P3D"
    assert published["return_sent"]["duration"] == "P10D"
    assert published["paid_for_shipping"]["duration"] == "P7D"
