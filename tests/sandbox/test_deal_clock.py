"""A test clock per deal: ``POST /sandbox/v1/deals/{dealId}/clock/advance`` and ``GET
/sandbox/v1/deals/{dealId}/clock``, through HTTP on both backends.

Moving one deal's clock brings only that deal's deadlines closer, fires those now due through
the real lifecycle with their events in order, and adds to the integration's clock; another
integration's deal is 404, a repeated Idempotency-Key moves nothing again, and concurrent moves
of one deal all count. Outside the sandbox the paths do not exist."""

import asyncio
import html
import re
from datetime import datetime, timedelta

import httpx
import pytest

from tests.conftest import make_caller, row_counts
from tests.sandbox.calls import assert_problem, deal_events, draft_deal, fire, get_deal, signed_deal
from tests.web.pages import path

DAY = 24 * 3600
HOUR = 3600


def _secret(caller) -> dict[str, str]:
    return {"webhook-secret": caller.webhook_secret}


async def advance(
    client: httpx.AsyncClient, caller, deal_id: str, seconds: int, **headers: str
) -> httpx.Response:
    return await client.post(
        f"/sandbox/v1/deals/{deal_id}/clock/advance",
        json={"seconds": seconds},
        headers={**_secret(caller), **headers},
    )


async def moved(client: httpx.AsyncClient, caller, deal_id: str, seconds: int) -> dict:
    response = await advance(client, caller, deal_id, seconds)
    assert response.status_code == 200, response.text
    return response.json()


async def deal_clock(client: httpx.AsyncClient, caller, deal_id: str) -> dict:
    response = await client.get(f"/sandbox/v1/deals/{deal_id}/clock", headers=_secret(caller))
    assert response.status_code == 200, response.text
    return response.json()


async def paid_pickup(client: httpx.AsyncClient, caller) -> dict:
    """A paid pickup deal: its 7 days to hand over run (``pickup_expired``)."""
    deal = await signed_deal(client, caller, "Pickup")
    await fire(client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
    assert (await get_deal(client, caller, deal["id"]))["status"] == "Pickup_Pending"
    return deal


def _due_in(clock_body: dict) -> dict[str, int]:
    return {t["trigger"]: t["dueInSeconds"] for t in clock_body["timers"]}


async def test_a_deals_clock_fires_its_deadline_and_leaves_the_others(client, caller, frozen_clock):
    mine, other = await paid_pickup(client, caller), await paid_pickup(client, caller)
    early = await moved(client, caller, mine["id"], 6 * DAY)
    assert early == {
        "dealId": mine["id"],
        "clockOffsetSeconds": 6 * DAY,
        "integrationClockOffsetSeconds": 0,
        "totalOffsetSeconds": 6 * DAY,
        "timersMoved": 1,
        "timersFired": 0,
    }
    assert _due_in(await deal_clock(client, caller, mine["id"])) == {"pickup_expired": DAY}
    assert _due_in(await deal_clock(client, caller, other["id"])) == {"pickup_expired": 7 * DAY}

    due = await moved(client, caller, mine["id"], DAY)
    assert (due["clockOffsetSeconds"], due["timersMoved"], due["timersFired"]) == (7 * DAY, 1, 1)
    after = await get_deal(client, caller, mine["id"])
    assert (after["status"], after["paymentStatus"]) == ("Refunded", "Refunded")
    statuses = [
        e["data"]["status"] for e in await deal_events(client, caller, mine["id"], "deal.status")
    ]
    assert statuses[-2:] == ["Pickup_Expired", "Refunded"]
    # The refund was made before the answer, as the worker makes it.
    payments = [
        e["data"]["status"] for e in await deal_events(client, caller, mine["id"], "payment.status")
    ]
    assert payments[-1] == "Refunded"

    assert (await get_deal(client, caller, other["id"]))["status"] == "Pickup_Pending"
    untouched = await deal_clock(client, caller, other["id"])
    assert (untouched["clockOffsetSeconds"], _due_in(untouched)) == (0, {"pickup_expired": 7 * DAY})
    assert (await deal_clock(client, caller, mine["id"]))["timers"] == []


async def test_the_deals_offset_adds_to_the_integrations(client, caller, frozen_clock):
    mine, other = await paid_pickup(client, caller), await paid_pickup(client, caller)
    await moved(client, caller, mine["id"], 2 * DAY)
    integration = await client.post(
        "/sandbox/v1/clock/advance", json={"seconds": DAY}, headers=_secret(caller)
    )
    assert integration.json()["clockOffsetSeconds"] == DAY

    body = await deal_clock(client, caller, mine["id"])
    now = frozen_clock[0]
    assert body["dealId"] == mine["id"]
    assert (
        body["clockOffsetSeconds"],
        body["integrationClockOffsetSeconds"],
        body["totalOffsetSeconds"],
    ) == (2 * DAY, DAY, 3 * DAY)
    assert datetime.fromisoformat(body["now"]) == now
    assert datetime.fromisoformat(body["clockTime"]) == now + timedelta(days=3)
    (timer,) = body["timers"]
    assert timer["trigger"] == "pickup_expired"
    assert timer["dueInSeconds"] == 4 * DAY
    assert datetime.fromisoformat(timer["dueAt"]) == now + timedelta(days=4)
    # The reminder moved with its deadline: the lead time before it.
    assert datetime.fromisoformat(timer["remindAt"]) < datetime.fromisoformat(timer["dueAt"])

    theirs = await deal_clock(client, caller, other["id"])
    assert (theirs["clockOffsetSeconds"], theirs["totalOffsetSeconds"]) == (0, DAY)
    assert _due_in(theirs) == {"pickup_expired": 6 * DAY}

    # 3 days ahead on its own clock and the integration's: 4 more and the 7 days are over.
    fired = await moved(client, caller, mine["id"], 4 * DAY)
    assert (fired["totalOffsetSeconds"], fired["timersFired"]) == (7 * DAY, 1)
    assert (await get_deal(client, caller, mine["id"]))["status"] == "Refunded"
    assert (await get_deal(client, caller, other["id"]))["status"] == "Pickup_Pending"


async def test_an_open_disputes_decision_date_comes_closer_with_the_deals_clock(
    client, caller, frozen_clock
):
    deal = await paid_pickup(client, caller)
    await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Pickup_Denied"})
    before = datetime.fromisoformat((await deal_clock(client, caller, deal["id"]))["decideBy"])
    await moved(client, caller, deal["id"], DAY)
    after = datetime.fromisoformat((await deal_clock(client, caller, deal["id"]))["decideBy"])
    assert before - after == timedelta(days=1)
    # The integration's clock moves it too: the deal sees one time, whichever clock moved.
    await client.post("/sandbox/v1/clock/advance", json={"seconds": DAY}, headers=_secret(caller))
    later = datetime.fromisoformat((await deal_clock(client, caller, deal["id"]))["decideBy"])
    assert after - later == timedelta(days=1)


async def test_a_draft_without_deadlines_keeps_its_offset(client, caller):
    deal = await draft_deal(client, caller)
    answer = await moved(client, caller, deal["id"], 90)
    assert (answer["clockOffsetSeconds"], answer["timersMoved"], answer["timersFired"]) == (
        90,
        0,
        0,
    )
    body = await deal_clock(client, caller, deal["id"])
    assert (body["clockOffsetSeconds"], body["timers"], body["decideBy"]) == (90, [], None)


async def test_concurrent_moves_of_one_deal_all_count(client, caller, frozen_clock):
    deal = await paid_pickup(client, caller)
    answers = await asyncio.gather(*(advance(client, caller, deal["id"], HOUR) for _ in range(6)))
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert sorted(a.json()["clockOffsetSeconds"] for a in answers) == [
        n * HOUR for n in range(1, 7)
    ]
    body = await deal_clock(client, caller, deal["id"])
    assert body["clockOffsetSeconds"] == 6 * HOUR
    assert _due_in(body) == {"pickup_expired": 7 * DAY - 6 * HOUR}


async def test_the_deals_and_the_integrations_clocks_moving_at_once_both_count(
    client, caller, frozen_clock
):
    deal = await paid_pickup(client, caller)

    async def integration_move() -> httpx.Response:
        return await client.post(
            "/sandbox/v1/clock/advance", json={"seconds": HOUR}, headers=_secret(caller)
        )

    answers = await asyncio.gather(
        *(advance(client, caller, deal["id"], HOUR) for _ in range(3)),
        *(integration_move() for _ in range(3)),
    )
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    body = await deal_clock(client, caller, deal["id"])
    assert (body["clockOffsetSeconds"], body["integrationClockOffsetSeconds"]) == (
        3 * HOUR,
        3 * HOUR,
    )
    assert _due_in(body) == {"pickup_expired": 7 * DAY - 6 * HOUR}


async def test_a_repeated_idempotency_key_moves_nothing_again(client, caller, frozen_clock):
    deal = await paid_pickup(client, caller)
    key = {"Idempotency-Key": "move-it-once"}
    first = await advance(client, caller, deal["id"], DAY, **key)
    again = await advance(client, caller, deal["id"], DAY, **key)
    assert first.status_code == again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    body = await deal_clock(client, caller, deal["id"])
    assert (body["clockOffsetSeconds"], _due_in(body)) == (DAY, {"pickup_expired": 6 * DAY})
    other_body = await advance(client, caller, deal["id"], 2 * DAY, **key)
    assert_problem(other_body, 422)


async def test_another_integrations_deal_is_404_and_moves_nothing(
    client, caller, sessionmaker, frozen_clock
):
    other = await make_caller(client, sessionmaker, "Other marketplace")
    theirs = await paid_pickup(client, other)
    counts = await row_counts(sessionmaker)
    for deal_id in (theirs["id"], "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"):
        refused = await advance(client, caller, deal_id, DAY)
        assert assert_problem(refused, 404)["detail"] == f"No deal {deal_id}."
        read = await client.get(f"/sandbox/v1/deals/{deal_id}/clock", headers=_secret(caller))
        assert assert_problem(read, 404)["detail"] == f"No deal {deal_id}."
    assert await row_counts(sessionmaker) == counts
    body = await deal_clock(client, other, theirs["id"])
    assert (body["clockOffsetSeconds"], _due_in(body)) == (0, {"pickup_expired": 7 * DAY})


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"seconds": 0}, 405),
        ({"seconds": 366 * DAY + 1}, 405),
        ({"seconds": "60"}, 405),
        ({"seconds": 60, "x": 1}, 405),
        ({}, 405),
    ],
)
async def test_bad_moves_are_refused(client, caller, body, status):
    deal = await draft_deal(client, caller)
    response = await client.post(
        f"/sandbox/v1/deals/{deal['id']}/clock/advance", json=body, headers=_secret(caller)
    )
    assert_problem(response, status)
    assert (await deal_clock(client, caller, deal["id"]))["clockOffsetSeconds"] == 0


async def test_refusals_of_the_caller_and_the_path(client, caller, sessionmaker):
    deal = await draft_deal(client, caller)
    path = f"/sandbox/v1/deals/{deal['id']}/clock"
    assert_problem(await client.post(path + "/advance", json={"seconds": 60}), 401)
    assert_problem(await client.get(path), 401)
    wrong = {"webhook-secret": "whsec_wrong"}
    assert_problem(await client.get(path, headers=wrong), 401)
    reader = await make_caller(client, sessionmaker, "Reader", ["deals:read"])
    forbidden = await advance(client, reader, deal["id"], 60)
    assert assert_problem(forbidden, 403)["detail"] == (
        "This integration lacks the scope deals:write."
    )
    text = await client.post(
        path + "/advance",
        content=b"seconds=60",
        headers={**_secret(caller), "content-type": "text/plain"},
    )
    assert_problem(text, 415)
    # A path that is no uuid is 400 on both, as on the deals API.
    bad_id = "/sandbox/v1/deals/not-a-uuid/clock"
    bad_move = await client.post(bad_id + "/advance", json={"seconds": 60}, headers=_secret(caller))
    assert assert_problem(bad_move, 400)["errors"][0]["field"] == "dealId"
    assert_problem(await client.get(bad_id, headers=_secret(caller)), 400)


async def test_production_has_no_deal_clock(production_client, client, caller):
    deal = await draft_deal(client, caller)
    path = f"/sandbox/v1/deals/{deal['id']}/clock"
    moved_there = await production_client.post(
        path + "/advance", json={"seconds": 60}, headers=_secret(caller)
    )
    assert assert_problem(moved_there, 404)["detail"] == "No such resource."
    read = await production_client.get(path, headers=_secret(caller))
    assert assert_problem(read, 404)["detail"] == "No such resource."
    assert (await deal_clock(client, caller, deal["id"]))["clockOffsetSeconds"] == 0


async def test_the_deals_page_shows_the_deadline_its_clock_brought_closer(
    client, caller, frozen_clock
):
    deal = await paid_pickup(client, caller)
    seller = path(deal["url"])

    def due(page: str) -> str:
        found = re.search(r"<p data-due>(.*?)</p>", page, re.S)
        assert found is not None, page
        text = html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))
        return re.sub(r"\s", " ", text)  # Babel puts a narrow no-break space before PM

    # The frozen clock says 22 November, 12:00 UTC: 7 days to hand over, then 2 days less.
    assert due((await client.get(seller)).text).startswith("By Sunday, November 29, 2026, 1:00 PM")
    await moved(client, caller, deal["id"], 2 * DAY)
    assert due((await client.get(seller)).text).startswith("By Friday, November 27, 2026, 1:00 PM")
    (timer,) = (await deal_clock(client, caller, deal["id"]))["timers"]
    assert datetime.fromisoformat(timer["dueAt"]) == datetime.fromisoformat(
        "2026-11-27T12:00:00+00:00"
    )


async def test_a_scenarios_wait_moves_its_deals_own_clock(client, caller):
    other = await paid_pickup(client, caller)
    ran = await client.post(
        "/sandbox/v1/scenarios",
        json={"scenario": "pickup-expired-refunded"},
        headers=_secret(caller),
    )
    assert ran.status_code == 200, ran.text
    assert ran.json()["status"] == "Refunded"
    body = await deal_clock(client, caller, ran.json()["dealId"])
    assert (body["clockOffsetSeconds"], body["integrationClockOffsetSeconds"]) == (7 * DAY, 0)
    assert (await deal_clock(client, caller, other["id"]))["clockOffsetSeconds"] == 0
