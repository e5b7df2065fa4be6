"""No English on a Norwegian or Swedish page: every page state of the seller's and the buyer's
pages, and every refusal an action on them can show, read in nb and in sv.

Each deal is taken to a status through the sandbox (the real flows), with a buyer who offered
through their own link, then both pages are read and every action of both parties is posted
(the page's own forms with nothing typed, and the actions the page does not offer, as a stale
bookmark or a crafted post would): whatever answers, and the page a success leads to, must hold
no English sentence. English is recognised by its common words that neither language shares.
"""

import time
import uuid

import httpx
import pytest

from dealbroker.core.statuses import DealStatus
from dealbroker.deals import flows
from dealbroker.web import buyer as buyer_pages
from dealbroker.web import seller as seller_pages
from tests.conftest import BASE_URL, create_deal
from tests.lifecycle_helpers import SETTINGS
from tests.sandbox.calls import fire
from tests.web.english import english_in
from tests.web.pages import forms, offer_link, path

SELLER_NB = {
    "firstname": "Kari",
    "lastname": "Nordmann",
    "phone": "+47 400 00 000",
    "email": "kari@eksempel.no",
    "address": "Storgata 1",
    "postcode": "0155",
    "town": "Oslo",
}


def test_the_detector_finds_english_and_passes_norwegian_and_swedish() -> None:
    assert english_in("<p>A deal in status Cancelled cannot move to paid_for_shipping</p>")
    assert english_in("<p>Ugyldig: The number's checksum or check digit is invalid.</p>")
    assert english_in('<input placeholder="Your offer">')
    assert not english_in("<p>Avtalen er kansellert. Ingen kan betale for den.</p>")
    assert not english_in("<p>Affären är avbruten; ingen kan betala för den.</p>")
    assert not english_in("<script>if (this.value) {}</script><a>English</a>")


@pytest.fixture
async def reader(app):
    """A client for one person whose browser asks for ``language``."""
    opened: list[httpx.AsyncClient] = []

    def open_client(language: str) -> httpx.AsyncClient:
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url=BASE_URL,
            headers={"Accept-Language": language},
        )
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        await client.aclose()


async def _deal_in(client, caller, person: httpx.AsyncClient, status: DealStatus):
    """A deal in ``status`` with a buyer who offered through their link: (seller, buyer) paths."""
    shipping = "Pickup" if status.value.startswith("Pickup") else "Carrier"
    deal = await create_deal(client, caller, name="Lampe", price=1000, seller=SELLER_NB)
    buyer = await offer_link(client, caller, deal)
    page = (await person.get(buyer)).text
    form = forms(page)["offer"]
    offered = await person.post(
        form.pop("action"),
        data={
            **form,
            "price": "1000",
            "shippingType": shipping,
            "name": "Ola Nordmann",
            "email": "ola@eksempel.no",
            "confirm": "yes",
        },
    )
    assert offered.status_code == 303, english_in(offered.text)
    if status is not DealStatus.DRAFT:
        if status is not DealStatus.AD:
            await fire(client, caller, "dealOfferApproved", {"dealId": deal["id"]})
        await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": status.value})
    return path(deal["url"]), buyer


async def _read(person: httpx.AsyncClient, url: str, where: str, found: dict) -> str:
    page = await person.get(url)
    assert page.status_code == 200, (where, page.status_code)
    for text in english_in(page.text):
        found.setdefault(text, where)
    return page.text


async def _post_every_action(
    person: httpx.AsyncClient, url: str, names, where: str, found: dict
) -> None:
    """Post each action to the page at ``url``: with the page's own form when it shows one,
    else with the hidden fields of any form on it; nothing typed."""
    for name in names:
        page = await _read(person, url, where, found)
        shown = forms(page)
        if not shown:
            return
        form = dict(shown.get(name) or next(iter(shown.values())))
        form.pop("action")
        base = url.split("?")[0]
        answer = await person.post(f"{base}/-/{name}", data=form)
        assert answer.status_code < 500, (where, name, answer.status_code)
        for text in english_in(answer.text):
            found.setdefault(text, f"{where}, {name}")
        if answer.status_code == 303:
            location = answer.headers["location"]
            if location.startswith("/"):
                await _read(person, location, f"{where} after {name}", found)


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_every_page_state_and_refusal_reads_without_english(
    client, caller, reader, language
) -> None:
    person = reader(language)
    found: dict[str, str] = {}  # each English text, and where it was first seen
    for status in DealStatus:
        seller, buyer = await _deal_in(client, caller, person, status)
        where = f"{language} {status.value}"
        await _read(person, seller, f"seller page, {where}", found)
        await _read(person, buyer, f"buyer page, {where}", found)
        await _post_every_action(person, seller, seller_pages.ACTIONS, f"seller, {where}", found)
        await _post_every_action(person, buyer, buyer_pages.ACTIONS, f"buyer, {where}", found)
    assert found == {}, "\n".join(f"{t!r}  <- {w}" for t, w in found.items())


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_refused_values_read_without_english(client, caller, reader, language) -> None:
    """Values a person typed and the page refused: the reason next to the field is in the
    page's language, also where a library gave it (the account number's check digits)."""
    person = reader(language)
    found: dict[str, str] = {}
    deal = await create_deal(client, caller, name="Lampe", price=1000, seller=SELLER_NB)
    seller, buyer = path(deal["url"]), await offer_link(client, caller, deal)
    for url, name, typed in (
        (seller, "details", {"price": "12,3,4", "name": "Lampe"}),
        (buyer, "offer", {"price": "1.500,123", "email": "ikke-en-adresse"}),
    ):
        form = dict(forms(await _read(person, url, name, found))[name])
        answer = await person.post(form.pop("action"), data={**form, **typed, "confirm": "yes"})
        assert answer.status_code == 400, (name, answer.status_code)
        for text in english_in(answer.text):
            found.setdefault(text, f"{language} {name}")
    seller, _ = await _deal_in(client, caller, person, DealStatus.COMPLETED)
    for number in ("NO93 8601 1117 948", "8601111794", "NO93 8601 1117 947 12"):
        form = dict(forms(await _read(person, seller, "account", found))["account"])
        answer = await person.post(
            form.pop("action"), data={**form, "holder": "Kari Nordmann", "account": number}
        )
        assert answer.status_code == 400, (number, answer.status_code)
        assert "account" in answer.text
        for text in english_in(answer.text):
            found.setdefault(text, f"{language} account {number}")
    assert found == {}, "\n".join(f"{t!r}  <- {w}" for t, w in found.items())


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_a_parcel_not_received_reads_without_english(client, caller, reader, language):
    """The transit states: the buyer's "not received" button once it is offered, and the
    dispute it opens (and the one the transit deadline opens), on both pages."""
    person = reader(language)
    found: dict[str, str] = {}
    clock = {"webhook-secret": caller.webhook_secret}
    for expired in (False, True):
        seller, buyer = await _deal_in(client, caller, person, DealStatus.SHIPPING_IN_PROGRESS)
        where = f"{language} {'transit deadline' if expired else 'not received'}"
        # A carrier event, which both pages list in the reader's words.
        deal_id = seller.split("/")[2]
        scanned = await client.post(
            f"/deals/v1/deals/{deal_id}/shipment-events",
            json={
                "type": "in_transit",
                "carrier": "Posten",
                "trackingNumber": "370712345678",
                "occurredAt": int(time.time() * 1000),
            },
            headers=caller.headers,
        )
        assert scanned.status_code == 200, scanned.text
        days = 15 if expired else 6
        moved = await client.post(
            "/sandbox/v1/clock/advance", json={"seconds": days * 24 * 3600}, headers=clock
        )
        assert moved.status_code == 200
        page = await _read(person, buyer, f"buyer page, {where}", found)
        if not expired:
            form = dict(forms(page)["not-received"])
            answer = await person.post(form.pop("action"), data={**form, "confirm": "yes"})
            assert answer.status_code == 303, english_in(answer.text)
            await _read(person, answer.headers["location"], f"after not-received, {where}", found)
        await _read(person, seller, f"seller page, {where}", found)
        await _read(person, buyer, f"buyer page, {where}", found)


# --- every deal ends ----------------------------------------------------------------------------


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_a_pickup_problem_the_seller_reports_reads_without_english(
    client, caller, reader, language
) -> None:
    """The seller's report (its refusals, its confirmation, the pages and the dispute after it,
    on both sides) in the reader's language; the fixed reason too."""
    person = reader(language)
    found: dict[str, str] = {}
    seller, buyer = await _deal_in(client, caller, person, DealStatus.PICKUP_PENDING)
    for typed in ({}, {"problem": "other"}, {"problem": "took"}):
        form = dict(forms(await _read(person, seller, "problem", found))["problem"])
        answer = await person.post(form.pop("action"), data={**form, **typed})
        assert answer.status_code in (200, 400), (typed, answer.status_code)
        for text in english_in(answer.text):
            found.setdefault(text, f"{language} problem {typed}")
    form = dict(forms(await _read(person, seller, "problem", found))["problem"])
    done = await person.post(form.pop("action"), data={**form, "problem": "took", "confirm": "yes"})
    assert done.status_code == 303
    await _read(person, done.headers["location"], f"{language} after the report", found)
    await _read(person, buyer, f"{language} buyer, seller's dispute", found)
    assert found == {}, "\n".join(f"{t!r}  <- {w}" for t, w in found.items())


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_an_approval_that_lapsed_reads_without_english(
    client, caller, reader, language
) -> None:
    """The approved buyer's deadline, then the lapse: both pages, in the reader's language."""
    person = reader(language)
    found: dict[str, str] = {}
    seller, buyer = await _deal_in(client, caller, person, DealStatus.AD)
    deal_id = seller.split("/")[2]
    await fire(client, caller, "dealOfferApproved", {"dealId": deal_id})
    await _read(person, seller, f"{language} seller, approved", found)
    await _read(person, buyer, f"{language} buyer, approved", found)
    moved = await client.post(
        "/sandbox/v1/clock/advance",
        json={"seconds": 100 * 24 * 3600},
        headers={"webhook-secret": caller.webhook_secret},
    )
    assert moved.json()["timersFired"] == 1
    await _read(person, seller, f"{language} seller, lapsed", found)
    await _read(person, buyer, f"{language} buyer, lapsed", found)
    assert found == {}, "\n".join(f"{t!r}  <- {w}" for t, w in found.items())


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_a_return_then_refund_reads_without_english(
    client, caller, reader, sessionmaker, language
) -> None:
    """Disputes decided on evidence: both pages at each stage of a return then refund, every
    action posted (the steps out of turn refused), in the page's language."""
    person = reader(language)
    found: dict[str, str] = {}
    seller, buyer = await _deal_in(client, caller, person, DealStatus.PICKUP_DENIED)
    await _read(person, seller, "seller page, decision date", found)
    deal_id = uuid.UUID(seller.split("/")[2])
    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session,
            deal_id,
            flows.DisputeOutcome.RETURN_THEN_REFUND,
            SETTINGS,
            return_address="Storgata 1, 0155 Oslo",
        )
    where = f"{language} return decided"
    await _post_every_action(person, seller, seller_pages.ACTIONS, f"seller, {where}", found)
    await _post_every_action(person, buyer, buyer_pages.ACTIONS, f"buyer, {where}", found)
    form = forms(await _read(person, buyer, f"buyer page, {where}", found))["return-sent"]
    sent = await person.post(
        form.pop("action"), data={**form, "carrier": "Posten", "tracking": "RR1NO"}
    )
    assert sent.status_code == 303
    where = f"{language} return sent"
    await _post_every_action(person, buyer, buyer_pages.ACTIONS, f"buyer, {where}", found)
    await _post_every_action(person, seller, seller_pages.ACTIONS, f"seller, {where}", found)
    assert found == {}, "\n".join(f"{t!r}  <- {w}" for t, w in found.items())
