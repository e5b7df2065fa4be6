"""Listing deals: page arithmetic at the edges, newest-first order, and page parameters out of range.

DESIGN.md: ``page`` counts from 1, ``pageSize`` defaults to 20 and is at most 100, the newest
deal comes first, and an integration sees only its own deals. The response is exactly
``{page, items}`` and the page object exactly the interface's four integers, but where a page
parameter could not be used as sent: the interface lists no 400, so it is read as the nearest
valid value and the page object names it in ``adjusted``.
"""

from datetime import timedelta

import pytest

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


HUGE = "9" * 10_000  # never computed with: past the bound, whatever it says

# What is sent, then the page number and the page size used, and the parameters adjusted.
NEAREST = [
    pytest.param({"page": "0"}, 1, 20, ["page"], id="page-0"),
    pytest.param({"page": "-1"}, 1, 20, ["page"], id="page-negative"),
    pytest.param({"page": "abc"}, 1, 20, ["page"], id="page-not-a-number"),
    pytest.param({"page": "1.5"}, 1, 20, ["page"], id="page-fraction"),
    pytest.param({"page": ""}, 1, 20, ["page"], id="page-empty"),
    pytest.param({"page": "+2"}, 1, 20, ["page"], id="page-plus-sign"),
    pytest.param({"page": "1000001"}, 1_000_000, 20, ["page"], id="page-above-max"),
    pytest.param({"page": HUGE}, 1_000_000, 20, ["page"], id="page-10000-digits"),
    pytest.param({"page": "-" + HUGE}, 1, 20, ["page"], id="page-10000-digits-negative"),
    pytest.param({"page": "0" * 10_000 + "2"}, 2, 20, [], id="page-leading-zeros"),
    pytest.param({"pageSize": "0"}, 1, 1, ["pageSize"], id="page-size-0"),
    pytest.param({"pageSize": "-1"}, 1, 1, ["pageSize"], id="page-size-negative"),
    pytest.param({"pageSize": "abc"}, 1, 20, ["pageSize"], id="page-size-not-a-number"),
    pytest.param({"pageSize": "1.5"}, 1, 20, ["pageSize"], id="page-size-fraction"),
    pytest.param({"pageSize": "101"}, 1, 100, ["pageSize"], id="page-size-above-max"),
    pytest.param({"pageSize": HUGE}, 1, 100, ["pageSize"], id="page-size-10000-digits"),
    pytest.param({"page": "0", "pageSize": "abc"}, 1, 20, ["page", "pageSize"], id="both-adjusted"),
]


@pytest.mark.parametrize(("params", "number", "size", "adjusted"), NEAREST)
async def test_page_parameters_are_read_as_the_nearest_valid_page(
    frozen_clock, client, caller, params, number, size, adjusted
):
    """The interface lists 200, 401 and 403 for the deal list, no 400: a page parameter out of
    range or not an integer answers 200 with the nearest valid page, and the page object says
    which page and size were used (and, in ``adjusted``, that a parameter was not used as
    sent)."""
    deals = await make_deals(client, caller, frozen_clock, 3)

    response = await client.get(LIST, params=params, headers=caller.headers)

    assert response.status_code == 200, response.text
    body = response.json()
    expected = page(size, number, -(-3 // size), 3)
    if adjusted:
        expected["adjusted"] = adjusted
    assert body["page"] == expected
    start = (number - 1) * size
    assert body["items"] == deals[start : start + size]


async def test_largest_page_size_is_accepted(frozen_clock, client, caller):
    deals = await make_deals(client, caller, frozen_clock, 2)

    body = await list_deals(client, caller, pageSize=100)

    assert body == {"page": page(100, 1, 1, 2), "items": deals}
