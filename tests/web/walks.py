"""Steps the browser walks of tests/web share: a one-time login link from the operator's command
and an operator logged in with it, the link a portal member was emailed, a deal taken into
dispute through the API, a paid Carrier deal and its label waited for, and the evidence photos a
page shows."""

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import httpx

from dealbroker.core.db import create_engine, create_sessionmaker
from tests.browser import (
    Integration,
    LiveServer,
    Person,
)
from tests.conftest import SELLER
from tests.processes import cli
from tests.web.pages import forms, paid, signed_deal, status_of
from tests.web.portal_helpers import last_link

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass


def login_path(db_url: str, email: str) -> str:
    printed = cli(db_url, "operators", "login-link", email)
    assert printed.returncode == 0, printed.stderr
    link = json.loads(printed.stdout)["link"]
    return "/back-office/login/" + link.rsplit("/", 1)[1]


async def operator(
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    db_url: str,
    live: LiveServer,
    email: str,
    *roles: str,
) -> Person:
    """An operator with ``roles`` added by the operator's command, logged in to the back office
    with the one-time link it prints, reading it in ``language``."""
    args = [a for role in roles for a in ("--role", role)]
    added = cli(db_url, "operators", "add", email, *args)
    assert added.returncode == 0, added.stderr
    person = await Person.open(browser, shots, device, language=language)
    await person.goto(live.base + login_path(db_url, email))
    await person.press("Log in")
    return person


async def emailed_link(db_url: str, email: str) -> str:
    engine = create_engine(db_url, pool_size=1)
    try:
        for _ in range(50):
            path = await last_link(create_sessionmaker(engine), email)
            if path is not None:
                return path
            await asyncio.sleep(0.1)
    finally:
        await engine.dispose()
    raise AssertionError(f"no login link for {email} in the outbox")


async def disputed_deal(market: Integration, email: str) -> tuple[str, str]:
    """A pickup deal with a buyer's offer made on its link, taken to dispute by the sandbox's
    dealStatus trigger (which approves that offer): the seller's page and the buyer's."""
    api = market.api
    created = await api.post(
        "/deals/v1/deals",
        json={"name": "Racersykkel", "price": 4500, "seller": {**SELLER, "email": email}},
    )
    assert created.status_code == 201, created.text
    deal_id = created.json()["id"]
    link = await api.post(f"/deals/v1/deals/{deal_id}/offer", json={})
    assert link.status_code == 201, link.text
    buyer = link.json()["url"]
    page = await api.get(buyer)
    form = forms(page.text)["offer"]
    offered = await api.post(
        form.pop("action"),
        data={
            **form,
            "price": "4500",
            "shippingType": "Pickup",
            "name": "Ola Nordmann",
            "email": f"buyer.{email}",
            "confirm": "yes",
        },
    )
    assert offered.status_code == 303, offered.text
    moved = await api.post(
        "/webhooks/v1/dealStatus",
        json={"dealId": deal_id, "status": "Pickup_Denied"},
        headers={"webhook-secret": market.webhook_secret},
    )
    assert moved.status_code == 200, moved.text
    return created.json()["url"], buyer


async def photos_shown(person: Person) -> None:
    """Scroll to the evidence photos (loaded lazily) and wait until each has loaded."""
    images = person.page.locator("[data-evidence] [data-photo] img")
    for i in range(await images.count()):
        await images.nth(i).scroll_into_view_if_needed()
    await person.page.wait_for_function(
        "[...document.querySelectorAll('[data-photo] img')]"
        ".every(img => img.complete && img.naturalWidth > 0)"
    )


async def disputed_with_return(
    live: LiveServer, language: str, price: int = 1000
) -> tuple[str, str, str]:
    """A paid pickup deal of ``price`` NOK whose buyer offered through their link and reported
    a problem: its id, the seller's and the buyer's page URLs."""
    async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
        token = await api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(live.credential("client id"), live.credential("client secret")),
        )
        api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        created = await api.post(
            "/deals/v1/deals",
            json={
                "name": "Sykkel",
                "price": price,
                "seller": {**SELLER, "email": "kari@example.com"},
            },
        )
        assert created.status_code == 201, created.text
        deal = created.json()
        link = (await api.post(f"/deals/v1/deals/{deal['id']}/offer", json={})).json()["url"]
        person = httpx.AsyncClient(timeout=10, headers={"Accept-Language": language})
        async with person:
            form = forms((await person.get(link)).text)["offer"]
            offered = await person.post(
                form.pop("action")
                if form["action"].startswith("http")
                else live.base + form.pop("action"),
                data={
                    **form,
                    "price": str(price),
                    "shippingType": "Pickup",
                    "name": "Ola Nordmann",
                    "email": "ola@example.com",
                    "confirm": "yes",
                },
            )
            assert offered.status_code == 303, offered.text
        secret = {"webhook-secret": live.credential("webhook secret")}
        for name, body in (
            ("dealOfferApproved", {"dealId": deal["id"]}),
            ("dealStatus", {"dealId": deal["id"], "status": "Pickup_Denied"}),
        ):
            fired = await api.post(f"/webhooks/v1/{name}", json=body, headers=secret)
            assert fired.status_code == 200, fired.text
    return deal["id"], deal["url"], link


# A server's settings that ship with the sandbox's simulated carrier (its buttons on the seller's
# page send the carrier's events).
SIMULATED_CARRIER = {
    "DEALBROKER_CARRIER": "simulated",
    "DEALBROKER_SECRET_KEY": "parcel-walk-" + "k" * 32,
}


async def shipping_pending(live: LiveServer) -> tuple[str, str, str]:
    """A Carrier deal the buyer has paid, through the pages: its id, the seller's and the
    buyer's URLs."""
    async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
        token = await api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(live.credential("client id"), live.credential("client secret")),
        )
        assert token.status_code == 200, token.text
        caller = SimpleNamespace(
            headers={"Authorization": f"Bearer {token.json()['access_token']}"}
        )
        deal, seller, buyer = await signed_deal(api, caller, "Carrier", price=450)
        await paid(api, seller, buyer)
        assert await status_of(api, caller, deal) == ("Shipping_Pending", "Paid")
    return deal["id"], live.base + seller, live.base + buyer


async def label_shown(seller: Person, timeout: float = 20.0) -> None:
    """Follow the page's "Show my label" link (as the seller would) until the label is there."""
    step = seller.page.locator("[data-ship-it]")
    deadline = asyncio.get_running_loop().time() + timeout
    while await step.get_attribute("data-parcel-status") == "booking":
        assert asyncio.get_running_loop().time() < deadline, "the parcel was never booked"
        await asyncio.sleep(0.5)
        async with seller.page.expect_navigation():
            await step.get_by_role("link", name=seller.t("Show my label")).click()
        await seller.audit()
    await expect(step).to_have_attribute("data-parcel-status", "booked")
