"""The sandbox's simulated eID (``DEALBROKER_EID_ISSUER=simulated``): a page of ours, labelled
as such, that plays the eID provider and checks nobody; refused outside the sandbox."""

import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy import select, update

from dealbroker.app import create_app
from dealbroker.core import i18n
from dealbroker.deals.models import Deal
from dealbroker.signatures.models import EidSignature
from tests.conftest import BASE_URL, SELLER, create_deal, make_settings
from tests.signatures.eid import FAILED_PAGE, flows_of, statuses
from tests.web.english import english_in
from tests.web.pages import path, status_of, submit


@pytest.fixture
async def app(db_url, engine) -> AsyncIterator[object]:
    application = create_app(make_settings(db_url, eid_issuer="simulated"), engine)
    async with application.router.lifespan_context(application):
        yield application


async def simulated_page_in(client, caller, language: str) -> tuple[dict, str, str, str]:
    """The seller of a new deal signs, and is on the simulated eID's page."""
    deal = await create_deal(client, caller, price=1000, seller=SELLER)
    seller = path(deal["url"])
    signed = await submit(client, seller, "sign", consent="yes")
    assert signed.status_code == 303, signed.text
    shown = await client.get(signed.headers["location"].removeprefix(BASE_URL))
    assert shown.status_code == 200, shown.text
    with i18n.using(language):
        assert i18n.gettext("Simulated eID") in shown.text
        assert i18n.gettext("Sandbox only.") in shown.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', shown.text).group(1)
    return deal, seller, csrf, shown.text


async def simulated_page(client, caller) -> tuple[dict, str, str, str]:
    return await simulated_page_in(client, caller, "en")


def confirmed(csrf: str, shown: str, **fields: str) -> dict[str, str]:
    """The simulated eID's form as its page posts it: who signs, and the flow's nonce."""
    nonce = re.search(r'name="nonce" value="([^"]+)"', shown).group(1)
    data = {"csrf": csrf, "name": "Kari Nordmann", "birthdate": "1980-01-02", "nonce": nonce}
    return {**data, "outcome": "confirm", **fields}


async def test_the_simulated_eid_signs_in_the_sandbox(client, caller, sessionmaker):
    deal, seller, csrf, shown = await simulated_page(client, caller)
    answer = await client.post("/eid/simulated", data=confirmed(csrf, shown))
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == f"{seller}?done=signed"
    assert await status_of(client, caller, deal) == ("Ad", None)
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Completed"]
    async with sessionmaker() as session:
        flow = (await session.scalars(select(EidSignature))).one()
    assert (flow.issuer, flow.name, flow.acr) == ("simulated", "Kari Nordmann", "simulated")


async def test_a_cancel_at_the_simulated_eid_fails(client, caller, sessionmaker):
    deal, _seller, csrf, _page = await simulated_page(client, caller)
    answer = await client.post("/eid/simulated", data={"csrf": csrf, "outcome": "cancel"})
    assert answer.status_code == 400
    assert "The signature did not go through" in answer.text
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Failed"]


async def test_the_simulated_eid_refuses_terms_changed_meanwhile(client, caller, sessionmaker):
    """As the real issuer's flow (``test_eid.test_a_deal_changed_meanwhile_is_another_nonce``):
    the price changed while the seller was at the simulated eID, so its answer carries the
    nonce of other terms, and nothing is signed; the same page, the same reason kept."""
    deal, _seller, csrf, shown = await simulated_page(client, caller)
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Deal).where(Deal.id == uuid.UUID(deal["id"])).values(price_minor=1)
        )
    answer = await client.post("/eid/simulated", data=confirmed(csrf, shown))
    assert answer.status_code == 400, answer.text
    assert FAILED_PAGE in answer.text
    assert "Back to the deal, to sign again" in answer.text
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Failed"]
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert flow.status == "Failed"
    assert "nonce" in flow.failure
    async with sessionmaker() as session:
        assert (await session.get(Deal, uuid.UUID(deal["id"]))).status == "Draft"


@pytest.mark.parametrize("nonce", ["", "made-up"])
async def test_the_simulated_eid_refuses_an_answer_without_the_flows_nonce(
    client, caller, sessionmaker, nonce
):
    """The nonce in the simulated issuer's answer is checked: one left out or made up signs
    nothing."""
    deal, _seller, csrf, shown = await simulated_page(client, caller)
    answer = await client.post("/eid/simulated", data=confirmed(csrf, shown, nonce=nonce))
    assert answer.status_code == 400, answer.text
    assert FAILED_PAGE in answer.text
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Failed"]


def test_the_simulated_eid_is_refused_outside_the_sandbox(db_url):
    with pytest.raises(ValidationError, match="simulated"):
        make_settings(db_url, environment="production", secret_key="p" * 40, eid_issuer="simulated")


async def test_production_has_no_simulated_eid_page(db_url, engine):
    settings = make_settings(
        db_url,
        environment="production",
        secret_key="p" * 40,
        eid_issuer="https://eid.example.com",
        eid_client_id="dealbroker",
    )
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            assert (await client.post("/eid/simulated")).status_code == 404
            # The real issuer's return is there (and refuses a browser with no signing).
            assert (await client.get("/eid/callback")).status_code == 400


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_the_eid_pages_read_without_english(client, caller, language):
    """The seller's sign card, the simulated eID's page and the refusal, in nb and sv."""
    client.cookies.set("lang", language)
    deal, seller, csrf, shown = await simulated_page_in(client, caller, language)
    assert english_in(shown) == []
    assert english_in((await client.get(seller)).text) == []
    refused = await client.post("/eid/simulated", data={"csrf": csrf, "outcome": "cancel"})
    assert refused.status_code == 400
    assert english_in(refused.text) == []
