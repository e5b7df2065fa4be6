"""Pages and messages in the reader's language: each party reads their page in the language
their browser asks for (or the switch chose), and their messages in the language of the page
they last acted on; the API stays English."""

import re
import uuid

import httpx
import pytest

from dealbroker.core import i18n
from dealbroker.notifications import service as notifications
from tests.conftest import BASE_URL, SELLER, create_deal
from tests.web.pages import BUYER_SIGNS, offer_link, path, submit

NBSP = "\u00a0"


@pytest.fixture
async def in_language(app):
    """A client for one person whose browser asks for ``language``."""
    opened: list[httpx.AsyncClient] = []

    def open_client(language: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=app)
        client = httpx.AsyncClient(
            transport=transport, base_url=BASE_URL, headers={"Accept-Language": language}
        )
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        await client.aclose()


async def messages_of(sessionmaker, deal_id: str):
    async with sessionmaker() as session:
        return await notifications.of_deal(session, uuid.UUID(deal_id))


@pytest.mark.parametrize(
    ("language", "words", "amount"),
    [
        ("nb", ["Hva skjer videre", "Utkast"], f"4{NBSP}500,00{NBSP}kr"),
        ("sv", ["Nästa steg", "Utkast"], f"4{NBSP}500,00{NBSP}Nkr"),
        ("en", ["What happens next", "Draft"], "NOK\u00a04,500.00"),
    ],
)
async def test_the_seller_page_reads_in_the_browsers_language(
    client, caller, in_language, language, words, amount
):
    deal = await create_deal(client, caller, price=4500, seller=SELLER)
    page = (await in_language(language).get(path(deal["url"]))).text
    assert f'<html lang="{language}">' in page
    for word in words:
        assert word in page, word
    assert amount in page


async def test_a_refusal_reads_in_the_pages_language(client, caller, in_language):
    deal = await create_deal(client, caller, price=10, seller=SELLER)
    seller = in_language("sv")
    refused = await submit(seller, path(deal["url"]), "sign", full_name="", consent="yes")
    assert refused.status_code == 400
    alert = re.search(r'role="alert"[^>]*>(.*?)</', refused.text, re.S)
    assert alert
    with i18n.using("sv"):
        assert i18n.gettext("Type your full name to sign.") in alert.group(1)


async def test_each_party_is_written_to_in_the_language_of_their_own_page(
    client, caller, sessionmaker, in_language
):
    deal = await create_deal(client, caller, price=4500, seller=SELLER)
    seller, buyer = in_language("nb"), in_language("sv")
    seller_page, buyer_page = path(deal["url"]), await offer_link(client, caller, deal)
    await submit(seller, seller_page, "sign", full_name="Kari Nordmann", consent="yes")
    await submit(buyer, buyer_page, "offer", price="4500", shippingType="Pickup", email="b@x.no")
    offer_id = re.search(r'data-offer="([^"]+)"', (await seller.get(seller_page)).text).group(1)
    await submit(seller, seller_page, "approve", offer=offer_id)

    received, approved = await messages_of(sessionmaker, deal["id"])
    assert (received.kind, approved.kind) == ("offer_received", "offer_approved")
    # The seller acted on a Norwegian page, the buyer on a Swedish one.
    assert received.subject.startswith("Nytt bud på")
    assert f"4{NBSP}500,00{NBSP}kr" in received.body
    assert approved.subject.endswith("har godkänts") or "godkän" in approved.subject
    assert f"4{NBSP}500,00{NBSP}Nkr" in approved.body

    # The buyer switches to English for the rest of the deal: so do their messages.
    english = in_language("en")
    await submit(english, buyer_page, "sign", **BUYER_SIGNS)
    please_pay = (await messages_of(sessionmaker, deal["id"]))[-1]
    assert please_pay.kind == "please_pay"
    assert "Pay NOK\u00a04,500.00 on your offer page" in please_pay.body


async def test_the_api_answers_in_english_whatever_the_browser_asks(client, caller):
    refused = await client.post(
        "/deals/v1/deals",
        json={"name": "Bike", "price": 10.001},
        headers={**caller.headers, "Accept-Language": "nb"},
    )
    assert refused.status_code == 405, refused.text  # the interface's status for a bad body
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert "must have at most two decimals" in refused.json()["detail"]


@pytest.mark.parametrize("path", ["/", "/conditions"])
async def test_the_home_and_conditions_read_in_one_language(client, path):
    """Their words and their numbers come from the same choice, whatever the Accept header."""
    page = (await client.get(path, headers={"Accept-Language": "sv", "Accept": "*/*"})).text
    assert '<html lang="sv">' in page
    with i18n.using("sv"):
        heading = i18n.gettext(
            "The service's conditions"
            if path == "/conditions"
            else "Safe payment for second-hand deals"
        )
    assert heading.replace("'", "&#39;") in page  # as the template escapes it
