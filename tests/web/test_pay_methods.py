"""The buyer's ways to pay: one button per method the deployment offers, in its order; the button
pressed decides the method the payment keeps and the checkout it goes to."""

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from sqlalchemy import select

from dealbroker.app import create_app
from dealbroker.payments.models import Payment
from tests.conftest import BASE_URL, make_caller, make_settings
from tests.web.pages import forms, path, signed_deal, status_of, submit

BUTTON = re.compile(r'<button type="submit" name="method" value="(\w+)"[^>]*>.*?</button>', re.S)


@asynccontextmanager
async def client_of(db_url, engine, **settings) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the sandbox app with ``settings`` (its currency decides its methods)."""
    app = create_app(make_settings(db_url, **settings), engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            yield client


def buttons(page: str) -> list[str]:
    """The methods the pay form's buttons name, in the page's order."""
    (form,) = [body for action, body in _pay_forms(page)]
    return BUTTON.findall(form)


def _pay_forms(page: str) -> list[tuple[str, str]]:
    found = re.findall(r'<form method="post" action="([^"]+)"[^>]*>(.*?)</form>', page, re.S)
    return [(a, b) for a, b in found if "/-/pay" in a]


async def _payment(sessionmaker, deal) -> Payment:
    async with sessionmaker() as session:
        return (
            await session.scalars(select(Payment).where(Payment.deal_id == uuid.UUID(deal["id"])))
        ).one()


async def test_nok_offers_vipps_then_card_and_the_button_pressed_is_the_payment_s_method(
    client, caller, sessionmaker
):
    deal, _seller, buyer = await signed_deal(client, caller)
    page = (await client.get(buyer)).text
    assert buttons(page) == ["vipps", "card"]
    assert "Pay with Vipps</span></button>" in page
    assert "Pay by card</span></button>" in page
    # The marks are decoration: the button's words are its name.
    assert page.count('aria-hidden="true" focusable="false"') == 2

    checkout = path((await submit(client, buyer, "pay", method="vipps")).headers["location"])
    shown = (await client.get(checkout)).text
    assert 'data-simulated-method="vipps"' in shown
    assert "Vipps MobilePay" in shown
    assert "Declined (fails)" in shown
    assert "Card declined" not in shown
    payment = await _payment(sessionmaker, deal)
    assert (payment.method, payment.provider) == ("vipps", "simulated")

    assert (await submit(client, checkout, "pay", outcome="succeeded")).status_code == 303
    assert await status_of(client, caller, deal) == ("Pickup_Pending", "Paid")


async def test_sek_offers_swish_then_card(db_url, engine, sessionmaker):
    async with client_of(db_url, engine, currency="SEK") as client:
        caller = await make_caller(client, sessionmaker)
        deal, _seller, buyer = await signed_deal(client, caller)
        page = (await client.get(buyer, headers={"Accept-Language": "sv"})).text
        assert buttons(page) == ["swish", "card"]
        # The amount in Swedish kronor as a Swede writes it.
        assert "10,00\u00a0kr" in page
        assert "Nkr" not in page
        checkout = path((await submit(client, buyer, "pay", method="swish")).headers["location"])
        assert 'data-simulated-method="swish"' in (await client.get(checkout)).text
        assert (await _payment(sessionmaker, deal)).method == "swish"


async def test_the_listed_methods_in_their_order(db_url, engine, sessionmaker):
    async with client_of(db_url, engine, payment_methods="card,vipps") as client:
        caller = await make_caller(client, sessionmaker)
        _deal, _seller, buyer = await signed_deal(client, caller)
        assert buttons((await client.get(buyer)).text) == ["card", "vipps"]
    async with client_of(db_url, engine, currency="EUR") as client:
        caller = await make_caller(client, sessionmaker, "Euro marketplace")
        _deal, _seller, buyer = await signed_deal(client, caller)
        assert buttons((await client.get(buyer)).text) == ["card"]


async def test_a_method_not_offered_is_refused_next_to_the_buttons_in_every_language(
    client, caller, sessionmaker
):
    deal, _seller, buyer = await signed_deal(client, caller)
    for lang in ("nb", "sv", "en"):
        refused = await submit(
            client, f"{buyer}&lang={lang}", "pay", method="swish"
        )  # Swish takes SEK only
        assert refused.status_code == 400, refused.text
        assert f'<html lang="{lang}">' in refused.text
        error = re.search(
            r'<p class="field-error" id="method-error" role="alert"[^>]*>(.*?)</p>', refused.text
        )
        assert error, refused.text
        assert error.group(1).strip()
        # The buttons are still there, described by the reason; the first one has the focus.
        assert buttons(refused.text) == ["vipps", "card"]
        assert refused.text.count('aria-describedby="method-error"') == 2
        assert 'aria-describedby="method-error" autofocus' in refused.text
        assert "Traceback" not in refused.text
    assert await status_of(client, caller, deal) == ("Signed", None)
    async with sessionmaker() as session:
        assert (await session.scalars(select(Payment))).first() is None


async def test_a_form_naming_no_method_pays_by_card(client, caller, sessionmaker):
    """A page loaded before the methods came posts no method: a card payment, as before."""
    deal, _seller, buyer = await signed_deal(client, caller)
    form = forms((await client.get(buyer)).text)["pay"]
    action = form.pop("action")
    response = await client.post(action, data=form)
    assert response.status_code == 303
    assert (
        'data-simulated-method="card"'
        in (await client.get(path(response.headers["location"]))).text
    )
    assert (await _payment(sessionmaker, deal)).method == "card"
