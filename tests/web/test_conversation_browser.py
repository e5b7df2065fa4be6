"""The conversation in Chromium: two buyers ask the seller about one ad, one of them with a phone
number, a payment link and "pay by transfer"; the seller is warned, answers the other, and
reports the message. In Swedish on a phone (390 px) and in Bokmål on a desktop (1280 px), every
state checked with axe-core; the message's link is text, and a long one does not widen the page.
Screenshots go to docs/screenshots/ with ``DEALBROKER_TEST_SCREENSHOTS=1``."""

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.browser import FLOW_SECONDS, WINDOWS, Integration, Person
from tests.conftest import SELLER
from tests.web.pages import forms

pytestmark = pytest.mark.server

QUESTION = {"nb": "Er rammen 56 cm?", "sv": "Är ramen 56 cm?"}
ANSWER = {"nb": "Ja, 56 cm, og nye dekk.", "sv": "Ja, 56 cm, och nya däck."}
# A way off the platform: a phone number, a payment link and a transfer.
LURE = {
    "nb": "Ring meg på 912 34 567. Betal med bankoverføring her: "
    "https://betaling-trygg.example.com/faktura/9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e",
    "sv": "Ring mig på 070 123 45 67. Betala med banköverföring här: "
    "https://betalning-trygg.example.com/faktura/9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e",
}


async def deal_with_two_links(market: Integration, email: str) -> tuple[str, str, str]:
    created = await market.api.post(
        "/deals/v1/deals",
        json={"name": "Racersykkel", "price": 4500, "seller": {**SELLER, "email": email}},
    )
    assert created.status_code == 201, created.text
    deal_id = created.json()["id"]
    links = []
    for _ in range(2):
        link = await market.api.post(f"/deals/v1/deals/{deal_id}/offer", json={})
        assert link.status_code == 201, link.text
        links.append(link.json()["url"])
    return created.json()["url"], links[0], links[1]


async def offer(market: Integration, buyer_url: str, email: str) -> None:
    """The buyer's offer on their link, as its form posts it (confirmed)."""
    form = forms((await market.api.get(buyer_url)).text)["offer"]
    sent = await market.api.post(
        form.pop("action"),
        data={**form, "price": "4500", "shippingType": "Pickup", "email": email, "confirm": "yes"},
    )
    assert sent.status_code == 303, sent.text


async def write(person: Person, text: str, within: str = "[data-conversation]") -> None:
    await person.page.locator(f"{within} textarea[name=message]").fill(text)
    await person.press("Send", within=within)
    assert person.t("Your message is sent.") in await person.page.inner_text(".flash.ok")


@pytest.mark.parametrize(("device", "language", "kind"), WINDOWS)
async def test_two_buyers_ask_and_the_seller_is_warned(
    browser: Any, integration: Integration, shots: Path, device: Any, language: str, kind: str
) -> None:
    width = 390 if kind == "phone" else 1280
    seller_url, first_url, second_url = await deal_with_two_links(
        integration, f"kari.{language}.{kind}@x.no"
    )
    first_link, second_link = first_url.split("offer=")[1], second_url.split("offer=")[1]
    seller = await Person.open(browser, shots, device, language=language)
    first = await Person.open(browser, shots, device, language=language)
    second = await Person.open(browser, shots, device, language=language)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            await seller.goto(seller_url)
            await seller.sign("Kari Nordmann")  # the ad is published
            await first.goto(first_url)
            await write(first, QUESTION[language])
            await second.goto(second_url)
            await write(second, LURE[language])
            # The writer is reminded, mildly; the reader will be warned.
            own = second.page.locator("[data-message] .message-warning")
            assert await own.count() == 1
            assert "strong" not in (await own.get_attribute("class") or "")

            await seller.goto(seller_url)
            awaiting = seller.page.locator("[data-unanswered]")
            assert await awaiting.get_attribute("data-unanswered") == "2"
            lure = seller.page.locator(f"[data-conversation='{second_link}']")
            warning = lure.locator(".message-warning.strong")
            assert await warning.get_attribute("data-warning") == "phone link payment"
            assert await warning.is_visible()
            # The address is text, not a link, and wraps within the window.
            assert await lure.locator(".body a").count() == 0
            assert "https://" in await lure.locator(".body").inner_text()
            await seller.shot(f"conversation-{width}-{language}-seller-warned")

            asked = f"[data-conversation='{first_link}']"
            await write(seller, ANSWER[language], within=asked)
            assert seller.page.url.endswith(f"#conversation-{first_link}")
            # The lure is reported to support, with a reason.
            await lure.locator("details.report summary").click()
            await lure.locator("textarea[name=reason]").fill("Svindel?")
            await seller.press("Report to support", within=f"[data-conversation='{second_link}']")
            thanks = seller.t("Thank you: our support will look at the message you reported.")
            assert thanks in await seller.page.inner_text(".flash.ok")
            assert await seller.page.locator("[data-reported]").count() == 1
            assert (
                await seller.page.locator("[data-unanswered]").get_attribute("data-unanswered")
                == "1"
            )
            await seller.shot(f"conversation-{width}-{language}-seller-answered")

            await first.goto(first_url)
            said = await first.page.locator("[data-conversation] ol.messages").inner_text()
            assert said.index(QUESTION[language]) < said.index(ANSWER[language])
            await first.shot(f"conversation-{width}-{language}-buyer")

            # The first buyer offers and the seller approves: the other's conversation closes.
            await offer(integration, first_url, f"ola.{language}.{kind}@x.no")
            await seller.page.reload()
            await seller.press("Approve", within="[data-offer]")
            await seller.press("Yes, approve the offer")
            await second.goto(second_url)
            closed = second.page.locator("[data-conversation] [data-closed]")
            assert await closed.inner_text() == second.t(
                "The seller accepted another buyer's offer: no more messages can be written here."
            )
            assert await second.page.locator("[data-conversation] textarea").count() == 0
            await second.shot(f"conversation-{width}-{language}-buyer-closed")
            for person in (seller, first, second):
                assert not person.errors, person.errors
    finally:
        for person in (seller, first, second):
            await person.context.close()
