"""A parcel in transit always resolves: both pages show the transit deadline, and the buyer's
page lets them report the parcel as not received once the usual delivery time has passed
(refused before), which opens the dispute, tells both parties and emits the event."""

import html
import time

from tests.conftest import advance_clock, row_counts
from tests.sandbox.calls import deal_events
from tests.web.pages import (
    HANDOVER,
    forms,
    next_card,
    outbox_of,
    paid,
    post_action,
    signed_deal,
    status_of,
    submit,
)

DAY = 24 * 3600


async def in_transit(client, caller) -> tuple[dict, str, str]:
    deal, seller, buyer = await signed_deal(client, caller, "Carrier")
    await paid(client, seller, buyer)
    assert (await submit(client, seller, "handover", **HANDOVER)).status_code == 303
    assert await status_of(client, caller, deal) == ("Shipping_In_Progress", "Paid")
    return deal, seller, buyer


def card(page_text: str) -> str:
    return " ".join(next_card(page_text).split())


async def test_both_pages_show_the_transit_deadline(client, caller):
    deal, seller, buyer = await in_transit(client, caller)
    for page in (seller, buyer):
        shown = card((await client.get(page)).text)
        assert "By " in shown
        assert "If not: If it has not arrived by then, we look into it with you both" in shown


async def test_the_buyer_reports_not_received_only_after_the_usual_delivery_time(
    client, caller, sessionmaker
):
    deal, seller, buyer = await in_transit(client, caller)
    page = (await client.get(buyer)).text
    assert "not-received" not in forms(page)
    assert "data-not-received-from" in page  # when the button comes, said in advance
    # A post before the 5 days (a crafted post, or a page left open) is refused; nothing moves.
    before = await row_counts(sessionmaker)
    early = await post_action(client, buyer, "not-received", {"confirm": "yes"})
    assert early.status_code == 409, early.text
    assert "you can report it from" in html.unescape(early.text)
    assert await row_counts(sessionmaker) == before
    assert await status_of(client, caller, deal) == ("Shipping_In_Progress", "Paid")

    # Four days of sandbox time: still too early. Five: the button is there.
    assert (await advance_clock(client, caller, 4 * DAY))["timersFired"] == 0
    assert "not-received" not in forms((await client.get(buyer)).text)
    assert (await advance_clock(client, caller, DAY + 60))["timersFired"] == 0
    page = (await client.get(buyer)).text
    assert "not-received" in forms(page)
    assert "The parcel has not arrived" in page
    # The seller has no such button.
    assert "not-received" not in forms((await client.get(seller)).text)

    reported = await submit(client, buyer, "not-received")
    assert reported.status_code == 303
    assert "done=not-received" in reported.headers["location"]
    assert await status_of(client, caller, deal) == ("Shipping_Review_Denied", "Paid")
    statuses = [
        e["data"]["status"] for e in await deal_events(client, caller, deal["id"], "deal.status")
    ]
    assert statuses[-2:] == ["Shipping_In_Progress", "Shipping_Review_Denied"]
    seller_page = html.unescape((await client.get(seller)).text)
    buyer_page = html.unescape((await client.get(buyer)).text)
    assert "The parcel did not arrive" in seller_page
    assert "The parcel did not arrive." in buyer_page
    assert "The buyer reported that the parcel has not arrived" in card(seller_page)
    assert "You reported that the parcel has not arrived" in card(buyer_page)
    told = [m for m in await outbox_of(sessionmaker, deal) if m.kind == "deal_disputed"]
    assert {m.subject.split(": ", 1)[1] for m in told} == {
        "the parcel has not arrived",
        "we are looking into the parcel that did not arrive",
    }
    # The 7-day shipping and the transit deadlines fall due but change nothing (skipped).
    assert (await advance_clock(client, caller, 30 * DAY))["timersFired"] == 2
    assert await status_of(client, caller, deal) == ("Shipping_Review_Denied", "Paid")


async def test_at_the_transit_deadline_the_deal_goes_to_dispute(client, caller, sessionmaker):
    deal, seller, buyer = await in_transit(client, caller)
    assert (await advance_clock(client, caller, 14 * DAY - 120))[
        "timersFired"
    ] == 1  # the 7-day one
    assert await status_of(client, caller, deal) == ("Shipping_In_Progress", "Paid")
    assert (await advance_clock(client, caller, 180))["timersFired"] == 1
    assert await status_of(client, caller, deal) == ("Shipping_Review_Denied", "Paid")
    for page in (seller, buyer):
        shown = card((await client.get(page)).text)
        assert "The parcel did not arrive by the deadline; the money stays held." in shown
    told = [m for m in await outbox_of(sessionmaker, deal) if m.kind == "deal_disputed"]
    assert len(told) == 2
    assert all("The parcel did not arrive by the deadline." in m.body for m in told)


# --- the carrier's word: the integration's events and the sandbox carrier, on both pages ---


async def test_carrier_events_show_on_both_pages_and_the_sandbox_carrier_reports_one(
    client, caller
):
    deal, seller, buyer = await in_transit(client, caller)
    scanned = await client.post(
        f"/deals/v1/deals/{deal['id']}/shipment-events",
        json={
            "type": "in_transit",
            "carrier": "Posten",
            "trackingNumber": "370712345678",
            "occurredAt": int(time.time() * 1000) - 60_000,
        },
        headers=caller.headers,
    )
    assert scanned.status_code == 200, scanned.text
    for page in (seller, buyer):
        shown = html.unescape((await client.get(page)).text)
        assert "The parcel is on its way with Posten" in shown
    # The sandbox carrier's button goes through the same path: recorded, shown and emitted.
    assert (await submit(client, seller, "carrier", outcome="delivered")).status_code == 303
    assert await status_of(client, caller, deal) == ("Shipping_Arrived", "Paid")
    for page in (seller, buyer):
        assert "Posten delivered the parcel" in html.unescape((await client.get(page)).text)
    emitted = [e["data"] for e in await deal_events(client, caller, deal["id"], "deal.shipment")]
    assert [(e["type"], e["carrier"]) for e in emitted] == [
        ("in_transit", "Posten"),
        ("delivered", "Posten"),
    ]
