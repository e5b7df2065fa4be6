"""Fuzzing the string fields of the API and the pages with any Unicode text, on SQLite and on
PostgreSQL (which cannot store U+0000 where SQLite can): never a 5xx; what is accepted comes
back exactly (the pages strip surrounding white space, as ``_field`` does); what is refused is
the endpoint's documented answer. The delivery worker is off, so no generated URL is dialled.
"""

from typing import Any

import markupsafe
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dealbroker.core.errors import TYPE_BASE
from tests.conftest import create_deal
from tests.web.pages import forms, path

NUL = "\x00"
DEALS = "/deals/v1/deals"
MARKET = "https://market.example.com/"
# Any code point JSON and forms can carry (hypothesis leaves out surrogates). One branch forces
# NUL in, so the case that matters is never left to chance; one leaves it out, so that enough
# examples are taken and read back.
TEXT = st.one_of(
    st.text(max_size=250),
    st.tuples(st.text(max_size=20), st.text(max_size=20)).map(NUL.join),
    st.text(st.characters(exclude_characters=NUL), min_size=1, max_size=250),
)
fuzz = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,  # the same examples on every run, so CI is reproducible
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
async def deal(client, caller) -> dict:
    """A draft whose seller has an email (so it takes offers): one per test, not per example."""
    return await create_deal(client, caller)


def fits(value: str, max_length: int) -> bool:
    """Whether a JSON text field takes ``value``: 1 to ``max_length`` characters, no NUL."""
    return NUL not in value and 1 <= len(value) <= max_length


def fits_url(suffix: str) -> bool:
    """Whether an http(s) URL field takes ``MARKET + suffix``: no control character (C0, C1,
    DEL) and no white space (Python's or JSON Schema's, which adds U+FEFF)."""
    return not any(
        ch.isspace() or ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch == "\ufeff" for ch in suffix
    )


def nested(dotted: str, value: str) -> dict[str, Any]:
    head, _, rest = dotted.partition(".")
    return {head: nested(rest, value) if rest else value}


def lookup(body: dict[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        body = body[key]
    return body


def assert_refused(response: Any, status: int, field: str) -> None:
    """The endpoint's invalid-input problem, naming ``field``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == TYPE_BASE + "invalid-input"
    assert problem["status"] == status
    assert field in {e["field"] for e in problem["errors"]}, problem


# --- the API: create deal, offer link, a sandbox trigger --------------------------------------

CREATE_FIELDS = {
    "name": 200,
    "description": 5000,
    "seller.firstname": 100,
    "seller.address": 200,
    "seller.postcode": 20,
    "seller.town": 100,
}


@fuzz
@given(field=st.sampled_from(sorted(CREATE_FIELDS)), value=TEXT)
async def test_create_deal_keeps_or_refuses_any_text(client, caller, field, value):
    response = await client.post(DEALS, json=nested(field, value), headers=caller.headers)

    if not fits(value, CREATE_FIELDS[field]):
        assert_refused(response, 405, field)
        return
    assert response.status_code == 201, response.text
    got = await client.get(f"{DEALS}/{response.json()['id']}", headers=caller.headers)
    assert lookup(got.json(), field) == value


@fuzz
@given(value=TEXT)
async def test_offer_link_keeps_or_refuses_any_buyer_name(client, caller, deal, value):
    response = await client.post(
        f"{DEALS}/{deal['id']}/offer", json={"buyer": {"name": value}}, headers=caller.headers
    )

    if not fits(value, 200):
        assert_refused(response, 405, "buyer.name")
        return
    assert response.status_code == 201, response.text
    page = await client.get(path(response.json()["url"]))
    assert f'value="{markupsafe.escape(value)}"' in page.text  # the buyer's name, prefilled


TRIGGER_FIELDS = {
    "buyer.name": ("buyerName", lambda v: v, lambda v: fits(v, 200)),
    "buyerRedirectUrl": ("buyerRedirectUrl", MARKET.__add__, fits_url),
    "sellerRedirectUrl": ("sellerRedirectUrl", MARKET.__add__, fits_url),
}


@fuzz
@given(field=st.sampled_from(sorted(TRIGGER_FIELDS)), value=TEXT)
async def test_sandbox_deal_offer_keeps_or_refuses_any_text(client, caller, field, value):
    data_key, sent, accepted = TRIGGER_FIELDS[field]
    response = await client.post(
        "/webhooks/v1/dealOffer",
        json=nested(field, sent(value)),
        headers={"webhook-secret": caller.webhook_secret},
    )

    if not accepted(value):
        assert_refused(response, 405, field)
        return
    assert response.status_code == 204, response.text
    events = await client.get(
        "/events/v1/events", params={"event": "deal.offer", "pageSize": 1}, headers=caller.headers
    )
    assert events.json()["items"][0]["data"][data_key] == sent(value)


# --- the pages: the seller's details form and the buyer's offer form --------------------------

PAGE_REFUSALS = ("a character that cannot be saved", "is too long")


async def post_form(client, page_url: str, form_name: str, data: dict[str, str]) -> Any:
    page = await client.get(page_url)
    assert page.status_code == 200, page.text
    form = forms(page.text)[form_name]
    response = await client.post(form.pop("action"), data={**form, **data})
    if response.status_code == 200 and "data-confirm" in response.text:
        # The offer shows the amount understood and asks first: say yes, as the buyer would.
        (confirm,) = forms(response.text).values()
        response = await client.post(confirm.pop("action"), data=confirm)
    return response


def assert_page_answer(response: Any, value: str, max_length: int) -> bool:
    """Check the answer to a form holding ``value``; whether it was taken (a 303)."""
    assert response.status_code < 500, response.text
    kept = value.strip()
    if NUL in value or len(kept) > max_length:
        assert response.status_code == 400, response.text
        assert any(reason in response.text for reason in PAGE_REFUSALS)
        return False
    assert response.status_code == 303, response.text
    return True


SELLER_FIELDS = {"name": 200, "description": 5000, "firstname": 200, "town": 200}


@fuzz
@given(field=st.sampled_from(sorted(SELLER_FIELDS)), value=TEXT)
async def test_seller_details_form_keeps_or_refuses_any_text(client, caller, deal, field, value):
    response = await post_form(client, path(deal["url"]), "details", {field: value})

    if assert_page_answer(response, value, SELLER_FIELDS[field]):
        got = (await client.get(f"{DEALS}/{deal['id']}", headers=caller.headers)).json()
        stored = got[field] if field in ("name", "description") else got["seller"][field]
        assert stored == (value.strip() or None)


@fuzz
@given(value=TEXT)
async def test_buyer_offer_form_keeps_or_refuses_any_name(client, caller, deal, value):
    link = await client.post(f"{DEALS}/{deal['id']}/offer", json={}, headers=caller.headers)
    offer = {"price": "10", "shippingType": "Pickup", "email": "b@example.com", "name": value}

    response = await post_form(client, path(link.json()["url"]), "offer", offer)

    if assert_page_answer(response, value, 200):
        events = await client.get(
            "/events/v1/events",
            params={"event": "deal.offer", "pageSize": 1},
            headers=caller.headers,
        )
        assert events.json()["items"][0]["data"]["buyerName"] == (value.strip() or None)
