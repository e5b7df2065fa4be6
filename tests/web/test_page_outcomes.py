"""Every page route answers a page, whatever happens: not found, conflict, a bug on our side.

A buyer paying on the checkout page of a deal the seller had cancelled meanwhile got a plain
"Internal Server Error"; `/` and unknown paths answered raw JSON to a browser; a cancelled
signed deal showed the buyer an empty card. A randomized walk over both pages, in two tabs each
(stale pages, double posts, any order), never meets a 5xx.
"""

import re
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dealbroker import parties
from dealbroker.app import create_app
from tests.conftest import BASE_URL, SELLER, create_deal, make_settings
from tests.web.pages import BUYER_SIGNS, HANDOVER, forms, offer_link, path, signed_deal, submit

HTML = "text/html"


def assert_page(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"].startswith(HTML)


async def test_paying_for_a_deal_cancelled_meanwhile_is_a_page_not_a_500(client, caller):
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    checkout = path((await submit(client, buyer, "pay", method="card")).headers["location"])
    shown = (await client.get(checkout)).text
    await submit(client, seller, "cancel")
    form = forms(shown)["pay"]
    response = await client.post(
        form["action"], data={"csrf": form["csrf"], "outcome": "succeeded"}
    )
    assert_page(response, 409)
    assert "Cancelled" in response.text
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    assert got["status"] == "Cancelled"
    buyer_page = await client.get(buyer)
    assert "data-cancelled" in buyer_page.text
    assert "No money was taken" in buyer_page.text


async def test_the_front_page_and_unknown_paths_answer_people_with_pages(client):
    assert_page(await client.get("/"), 200)
    lost = await client.get("/some/old/link", headers={"accept": "text/html,*/*;q=0.8"})
    assert_page(lost, 404)
    assert "This link is not valid" in lost.text
    assert_page(await client.get("/d/not-a-deal/x"), 404)
    assert_page(await client.get("/o/nothing"), 404)
    assert_page(await client.get("/d/x/y/-/cancel"), 404)  # a form's address, opened by hand
    # Programs still get problem+json.
    api = await client.get("/deals/v1/nothing", headers={"accept": "text/html"})
    assert (api.status_code, api.headers["content-type"]) == (404, "application/problem+json")
    plain = await client.get("/some/old/link")
    assert plain.headers["content-type"] == "application/problem+json"


async def test_a_bug_on_a_page_answers_a_page_with_the_request_id(
    db_url, engine, monkeypatch, caplog
):
    async def broken(*args: Any) -> None:
        raise RuntimeError("a bug")

    app = create_app(make_settings(db_url), engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            monkeypatch.setattr(parties, "shown", broken)
            deal_id = "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"
            signature = app.state.links.deal_url(uuid.UUID(deal_id)).rsplit("/", 1)[1]
            response = await client.get(f"/d/{deal_id}/{signature}")
            assert_page(response, 500)
            request_id = response.headers["x-request-id"]
            assert re.search(rf"data-request-id>{request_id}<", response.text)
            assert any(request_id in r.getMessage() for r in caplog.records)
            api = await client.get("/deals/v1/deals", headers={"Authorization": "Bearer x"})
            assert api.status_code == 401  # the API is untouched by the broken page


# --- a randomized walk over both pages ------------------------------------------------------

TABS = ("seller-1", "seller-2", "buyer-1", "buyer-2")
VALUES = {
    "price": ["10", "1 500", "abc", ""],
    "shippingType": ["Carrier", "Pickup"],
    "email": ["b@example.com", ""],
    "name": ["Ola"],
    "full_name": ["Kari", ""],
    "consent": ["yes", ""],
    "holder": ["Kari"],
    "account": ["NO9386011117947", "123"],
    "code": ["000000", ""],
    "outcome": ["succeeded", "failed", "cancelled", "delivered", "returned"],
    "confirm": ["yes", ""],
    "reason": ["It is broken", ""],
    **{k: [v] for k, v in {**BUYER_SIGNS, **HANDOVER}.items() if k not in ("full_name", "consent")},
}
STEP = st.tuples(
    st.sampled_from(TABS),
    st.sampled_from(["load", "post"]),
    st.integers(0, 10),
    st.integers(0, 3),
)


@pytest.fixture
async def walk_deal(client, caller) -> dict:
    deal = await create_deal(client, caller, price=10, seller=SELLER)
    return {
        "deal": deal,
        "seller": path(deal["url"]),
        "buyer": await offer_link(client, caller, deal),
    }


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, min_size=5, max_size=30))
async def test_no_sequence_of_clicks_yields_a_server_error(client, caller, walk_deal, steps):
    shown: dict[str, str] = {}  # what each tab shows, maybe stale
    for tab, op, which, choice in steps:
        home = walk_deal["seller" if tab.startswith("seller") else "buyer"]
        if op == "load" or tab not in shown:
            response = await client.get(home)
            assert_page(response, 200)
            shown[tab] = response.text
            continue
        found = list(forms(shown[tab]).values())
        if not found:
            continue
        form = dict(found[which % len(found)])
        action = form.pop("action")
        for name, values in VALUES.items():
            form.setdefault(name, values[choice % len(values)])
        response = await client.post(action, data=form)
        assert response.status_code < 500, response.text[:500]
        if response.status_code == 303:
            location = path(response.headers["location"])
            if location.startswith(("/d/", "/o/", "/pay/")):
                followed = await client.get(location)
                assert_page(followed, 200)
                shown[tab] = followed.text
        else:
            assert response.headers["content-type"].startswith(HTML)
            shown[tab] = response.text


async def test_every_page_sends_its_content_security_policy(client, caller):
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    checkout = path((await submit(client, buyer, "pay", method="card")).headers["location"])
    for url in (seller, buyer, checkout, "/", "/d/x/y"):
        response = await client.get(url)
        policy = response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy
        assert "default-src 'none'" in policy
        assert "script" not in policy  # no script source is allowed at all
        assert "unsafe-inline" not in policy
        assert response.headers["x-frame-options"] == "DENY"
        assert "<script" not in response.text
        assert "style=" not in response.text
    css = await client.get("/static/pages.css")
    assert (css.status_code, css.headers["content-type"].split(";")[0]) == (200, "text/css")
