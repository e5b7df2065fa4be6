"""Disputes decided on evidence, on the parties' pages: the date we decide by, then a return
then refund (the buyer's form for the carrier and tracking number, the seller's confirmation
of receipt), refused steps shown on the page with nothing changed. On SQLite and PostgreSQL
(the ``client`` fixture's backends)."""

import html
import re
import uuid

from dealbroker.deals import flows
from tests.conftest import SELLER, row_counts
from tests.lifecycle_helpers import run_provider_calls
from tests.sandbox.calls import deal_events
from tests.web.pages import (
    field_error,
    forms,
    next_card,
    outbox_of,
    post_action,
    status_of,
    submit,
)
from tests.web.returns import ADDRESS, decide_return, disputed


def text(page) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.text)).split())


async def test_both_pages_show_the_decision_date(client, caller, sessionmaker):
    deal, seller, buyer = await disputed(client, caller)
    async with sessionmaker() as session:
        decide_by = (await flows.operator_view(session, uuid.UUID(deal["id"]))).decide_by
    assert decide_by is not None
    for page in (seller, buyer):
        shown = (await client.get(page)).text
        assert f'data-decide-by="{decide_by.isoformat()}"' in shown
        assert "We decide by" in html.unescape(shown)
        assert "data-return" not in shown  # no return decided


async def test_return_then_refund_through_the_pages(client, caller, sessionmaker):
    deal, seller, buyer = await disputed(client, caller)
    await decide_return(sessionmaker, deal, reason="The photos show the crack.")
    # The buyer sees where to send it, by when, and the form; the seller where it comes.
    buyer_page = await client.get(buyer)
    assert "data-decide-by" not in buyer_page.text  # decided
    assert "return-sent" in forms(buyer_page.text)
    said = text(buyer_page)
    assert f"Send it to: {ADDRESS}" in said
    assert "If it is not sent by then, the money is released to the seller." in said
    assert "You: Send the item back" in " ".join(next_card(buyer_page.text).split())
    seller_page = await client.get(seller)
    assert f"They send it to: {ADDRESS}" in text(seller_page)
    assert "return-received" not in forms(seller_page.text)
    told = [m for m in await outbox_of(sessionmaker, deal) if m.kind == "dispute_return"]
    assert len(told) == 2
    assert all("Our reasons: The photos show the crack." in m.body for m in told)

    # The seller cannot confirm an item not sent yet: refused on the page, nothing stored.
    before = await row_counts(sessionmaker)
    early = await post_action(client, seller, "return-received", {"confirm": "yes"})
    assert early.status_code == 409, early.text
    assert "The buyer has not sent the item back yet" in html.unescape(early.text)
    assert await row_counts(sessionmaker) == before

    # The buyer forgets the tracking number: told next to the field, nothing stored.
    missing = await submit(client, buyer, "return-sent", carrier="Posten", tracking="")
    assert missing.status_code == 400
    assert field_error(missing.text, "tracking") == "Give the package's tracking number."
    assert await row_counts(sessionmaker) == before
    form = forms((await client.get(buyer)).text)["return-sent"]
    action = form.pop("action")
    typed = {**form, "carrier": "Posten", "tracking": "RR123456785NO"}
    sent = await client.post(action, data=typed)
    assert sent.status_code == 303
    assert "done=return-sent" in sent.headers["location"]
    assert await status_of(client, caller, deal) == ("Pickup_Denied", "Paid")
    buyer_page = await client.get(buyer)
    assert "You sent it back with Posten, tracking number RR123456785NO" in text(buyer_page)
    assert "return-sent" not in forms(buyer_page.text)
    # Sent once: the same form again (a page left open, a double click) changes nothing.
    again = await client.post(action, data={**typed, "tracking": "RR2"})
    assert again.status_code == 409
    assert "RR2" not in text(await client.get(seller))

    seller_page = await client.get(seller)
    assert "The buyer sent it back with Posten, tracking number RR123456785NO" in text(seller_page)
    assert "You: Confirm that the item is back" in " ".join(next_card(seller_page.text).split())
    confirmed = await submit(client, seller, "return-received")
    assert confirmed.status_code == 303
    assert "done=return-received" in confirmed.headers["location"]
    await run_provider_calls(sessionmaker)
    assert await status_of(client, caller, deal) == ("Refunded", "Refunded")
    assert "data-return" not in (await client.get(seller)).text
    assert "The seller confirmed that the item sent back has come." in text(await client.get(buyer))
    # Each step is a deal.status event: the dispute's status while the item travels.
    statuses = [
        e["data"]["status"] for e in await deal_events(client, caller, deal["id"], "deal.status")
    ]
    assert statuses[-4:] == ["Pickup_Denied", "Pickup_Denied", "Pickup_Denied", "Refunded"]
    refunded = {
        m.to_email: m.body for m in await outbox_of(sessionmaker, deal) if m.kind == "deal_refunded"
    }
    assert "You confirmed that you have the item back." in refunded[SELLER["email"]]
