"""Listing deals: page arithmetic at the edges, newest-first order, and refused page parameters.

DESIGN.md: ``page`` counts from 1, ``pageSize`` defaults to 20 and is at most 100, bad values
are 400, the newest deal comes first, and an integration sees only its own deals. The response
is exactly ``{page, items}`` and the page object exactly the interface's four integers.
"""

from datetime import timedelta

import pytest

from dealbroker.core.errors import TYPE_BASE
from tests.conftest import create_deal

LIST = "/deals/v1/deals"
PAGE_KEYS = {"pageSize", "pageNumber", "totalPages", "totalCount"}


def page(size: int, number: int, pages: int, count: int) -> dict[str, int]:
    return {"pageSize": size, "pageNumber": number, "totalPages": pages, "totalCount": count}


async def make_deals(client, caller, clock, count: int) -> list[dict]:
    """``count`` deals one second apart, returned newest first (the order the list uses)."""
    deals = []
    for n in range(count):
        clock[0] += timedelta(seconds=1)
        deals.append(await create_deal(client, caller, name=f"Deal {n + 1}"))
    return deals[::-1]


async def list_deals(client, caller, **params: object) -> dict:
    """One page of the caller's deals, checked to have exactly the documented shape."""
    response = await client.get(LIST, params=params, headers=caller.headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"page", "items"}, body
    assert set(body["page"]) == PAGE_KEYS, body["page"]
    assert all(type(v) is int for v in body["page"].values()), body["page"]
    return body


async def walk(client, caller, size: int | None, last: int) -> list[dict]:
    """Pages 1 to ``last`` (``size`` None: the default page size)."""
    params = {} if size is None else {"pageSize": size}
    return [await list_deals(client, caller, page=n, **params) for n in range(1, last + 1)]


# deals, pageSize asked (None: default 20), pageSize expected, totalPages expected
EDGES = [
    pytest.param(0, 3, 3, 0, id="no-deals"),
    pytest.param(1, 3, 3, 1, id="one-deal"),
    pytest.param(3, 3, 3, 1, id="exactly-one-page"),
    pytest.param(4, 3, 3, 2, id="one-more-than-a-page"),
    pytest.param(20, None, 20, 1, id="default-size-exactly-one-page"),
    pytest.param(21, None, 20, 2, id="default-size-one-more-than-a-page"),
]


@pytest.mark.parametrize(("count", "asked", "size", "pages"), EDGES)
async def test_pages_at_the_edges(frozen_clock, client, caller, count, asked, size, pages):
    # frozen_clock comes first so the caller's token is issued on the same clock.
    deals = await make_deals(client, caller, frozen_clock, count)

    # Every page up to the last, then one beyond it (for no deals, page 1 is already beyond).
    bodies = await walk(client, caller, asked, max(pages, 1) + 1)

    for number, body in enumerate(bodies, start=1):
        start = (number - 1) * size
        assert body == {
            "page": page(size, number, pages, count),
            "items": deals[start : start + size],
        }
    assert bodies[-1]["items"] == []


async def test_page_far_beyond_the_last_is_empty_with_true_totals(frozen_clock, client, caller):
    await make_deals(client, caller, frozen_clock, 4)

    for number in (3, 50, 1_000_000):
        body = await list_deals(client, caller, page=number, pageSize=3)
        assert body == {"page": page(3, number, 2, 4), "items": []}


async def test_all_pages_together_hold_every_deal_once_newest_first(frozen_clock, client, caller):
    deals = await make_deals(client, caller, frozen_clock, 10)

    bodies = await walk(client, caller, 3, 4)

    assert [len(b["items"]) for b in bodies] == [3, 3, 3, 1]
    listed = [d["id"] for b in bodies for d in b["items"]]
    assert listed == [d["id"] for d in deals]
    assert [d["name"] for b in bodies for d in b["items"]] == [
        f"Deal {n}" for n in range(10, 0, -1)
    ]


async def test_deals_created_at_the_same_instant_are_neither_repeated_nor_lost(
    frozen_clock, client, caller
):
    # The clock does not move: every deal has the same createdAt, so only the tie-break
    # keeps the order stable from one page to the next.
    created = {(await create_deal(client, caller))["id"] for _ in range(7)}

    bodies = await walk(client, caller, 3, 3)

    listed = [d["id"] for b in bodies for d in b["items"]]
    assert len(listed) == len(set(listed)) == 7
    assert set(listed) == created
    assert len({d["createdAt"] for b in bodies for d in b["items"]}) == 1


async def test_only_the_callers_deals_are_listed_and_counted(frozen_clock, client, caller, other):
    mine = await make_deals(client, caller, frozen_clock, 2)
    theirs = await make_deals(client, other, frozen_clock, 4)

    assert await list_deals(client, caller, pageSize=3) == {
        "page": page(3, 1, 1, 2),
        "items": mine,
    }
    assert await list_deals(client, caller, page=2, pageSize=1) == {
        "page": page(1, 2, 2, 2),
        "items": mine[1:],
    }
    their_pages = await walk(client, other, 3, 2)
    assert [b["page"] for b in their_pages] == [page(3, 1, 2, 4), page(3, 2, 2, 4)]
    assert [d for b in their_pages for d in b["items"]] == theirs


INVALID = ("invalid-input", "Invalid input")

BAD_PARAMS = [
    pytest.param({"page": "0"}, "page", INVALID, id="page-0"),
    pytest.param({"page": "-1"}, "page", INVALID, id="page-negative"),
    pytest.param({"page": "abc"}, "page", INVALID, id="page-not-a-number"),
    pytest.param({"page": "1.5"}, "page", INVALID, id="page-fraction"),
    pytest.param({"pageSize": "0"}, "pageSize", INVALID, id="page-size-0"),
    pytest.param({"pageSize": "-1"}, "pageSize", INVALID, id="page-size-negative"),
    pytest.param({"pageSize": "abc"}, "pageSize", INVALID, id="page-size-not-a-number"),
    pytest.param({"pageSize": "1.5"}, "pageSize", INVALID, id="page-size-fraction"),
    pytest.param({"pageSize": "101"}, "pageSize", INVALID, id="page-size-above-max"),
]


@pytest.mark.parametrize(("params", "name", "problem"), BAD_PARAMS)
async def test_bad_page_parameters_are_400(client, caller, params, name, problem):
    await create_deal(client, caller)

    response = await client.get(LIST, params=params, headers=caller.headers)

    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail", "instance", "errors", "requestId"}
    assert body["requestId"] == response.headers["x-request-id"]
    assert (body["type"], body["title"]) == (TYPE_BASE + problem[0], problem[1])
    assert body["status"] == 400
    assert body["instance"] == LIST
    assert name in body["detail"]
    assert [e["field"] for e in body["errors"]] == [name]
    assert body["errors"][0]["message"]


async def test_largest_page_size_is_accepted(frozen_clock, client, caller):
    deals = await make_deals(client, caller, frozen_clock, 2)

    body = await list_deals(client, caller, pageSize=100)

    assert body == {"page": page(100, 1, 1, 2), "items": deals}
