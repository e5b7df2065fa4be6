"""What a seller, a buyer and an operator read off the happy path, over HTTP on SQLite and
PostgreSQL (the ``client`` fixture's backends): one true story per page. A seller whose payout
account is in is not asked for one; the operator's reason for a decision and who pays a return's
postage are on both parties' pages; a lapsed buyer is told one thing; a pickup in dispute shows
no meeting; a refunded deal's dossier lists no payout; the back office names reasons, history
steps and audit values in the operator's language; the seller's own card speaks to them."""

import html
import re
import uuid

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.deals import flows
from tests.conftest import SELLER, advance_clock, create_deal
from tests.lifecycle_helpers import SETTINGS
from tests.sandbox.calls import fire
from tests.web.back_office import log_in, make_operator
from tests.web.pages import (
    HOURS,
    forms,
    money_at,
    next_card,
    offer_link,
    outbox_of,
    paid,
    signed_deal,
    status_of,
    submit,
    two_buyers_one_approved,
)
from tests.web.returns import decide_return, disputed

ACCOUNT = {"holder": "Kari Nordmann", "account": "NO9386011117947"}
# The operator's own words, with markup that must reach the parties as text.
REASON = "The photos show the crack <b>before</b> the handover & after."
BUYER_POSTAGE = (
    "You pay the postage for sending it back: the refund is the price you paid, without the "
    "postage."
)
SELLER_POSTAGE = "The buyer pays the postage for sending it back; you pay nothing for the return."


def card(page_text: str) -> str:
    return " ".join(next_card(page_text).split())


def text(page_text: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page_text)).split())


async def _completed(client, caller) -> tuple[dict, str, str]:
    """A pickup deal the buyer approved at the handover: completed, its payout pending."""
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    await paid(client, seller, buyer)
    assert (await submit(client, buyer, "approve")).status_code == 303
    assert await status_of(client, caller, deal) == ("Completed", "PendingPayOut")
    return deal, seller, buyer


async def test_a_seller_whose_payout_account_is_in_is_not_asked_for_one(client, caller):
    """On the bank-file rail a payout stays ``PendingPayOut`` until the bank confirms the file:
    the provider's call is queued, not made (here: the calls are not run)."""
    deal, seller, buyer = await _completed(client, caller)
    assert "You: Add the payout account" in card((await client.get(seller)).text)
    assert "The seller: Add the payout account" in card((await client.get(buyer)).text)

    assert (await submit(client, seller, "account", **ACCOUNT)).status_code == 303
    assert await status_of(client, caller, deal) == ("Completed", "PendingPayOut")
    page = (await client.get(seller)).text
    assert money_at(page) == "On its way to your account ending 7947."
    assert "Add the payout account" not in card(page)
    assert card(page).endswith("The deal is complete. Your payout is on its way.")
    assert "data-who" not in next_card(page)  # nobody has anything left to do
    assert card((await client.get(buyer)).text).endswith("The seller's payout is on its way.")


async def test_the_decision_reason_and_the_return_postage_reach_both_pages(
    client, caller, sessionmaker
):
    deal, seller, buyer = await disputed(client, caller)
    await decide_return(sessionmaker, deal, reason=REASON)
    for page, postage in ((buyer, BUYER_POSTAGE), (seller, SELLER_POSTAGE)):
        shown = (await client.get(page)).text
        assert "<b>before</b>" not in shown  # the operator's text, escaped as theirs
        said = text(shown)
        assert f"Our reasons for the decision: {REASON}" in said
        assert postage in said
    # The mails of the decision say the same.
    told = {
        m.to_email: " ".join(m.body.split())
        for m in await outbox_of(sessionmaker, deal)
        if m.kind == "dispute_return"
    }
    assert BUYER_POSTAGE in told["b@example.com"]
    assert SELLER_POSTAGE in told[SELLER["email"]]

    # The return comes back: the deal ends refunded, and both pages still give the reason.
    assert (
        await submit(client, buyer, "return-sent", carrier="Posten", tracking="RR123")
    ).status_code == 303
    assert (await submit(client, seller, "return-received")).status_code == 303
    assert (await status_of(client, caller, deal))[0] == "Refunded"
    for page in (buyer, seller):
        assert f"Our reasons for the decision: {REASON}" in text((await client.get(page)).text)


async def test_a_release_gives_its_reason_on_both_pages(client, caller, sessionmaker):
    deal, seller, buyer = await disputed(client, caller)
    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session,
            uuid.UUID(deal["id"]),
            flows.DisputeOutcome.RELEASE,
            SETTINGS,
            reason="The item was as described.",
        )
    for page in (buyer, seller):
        said = text((await client.get(page)).text)
        assert "Our reasons for the decision: The item was as described." in said
    assert "We looked into the problem and decided to pay you." in card(
        (await client.get(seller)).text
    )


async def test_a_lapsed_buyer_is_told_one_thing(client, caller):
    deal, seller, first, second = await two_buyers_one_approved(client, caller)
    assert (await advance_clock(client, caller, HOURS * 3600 + 1))["timersFired"] == 1
    # The deal takes offers again: the lapsed buyer may offer again, and is told so.
    page = (await client.get(first)).text
    assert "You may make a new offer." in html.unescape(page)
    assert "another buyer" not in card(page)
    assert "offer" in forms(page)

    # Another buyer's offer is approved: the item went to them, and nothing invites an offer.
    await submit(client, second, "offer", price="95", shippingType="Pickup", email="b@example.com")
    pending = re.findall(
        r'data-offer="([^"]+)" data-offer-status="Pending"', (await client.get(seller)).text
    )
    assert (await submit(client, seller, "approve", offer=pending[0])).status_code == 303
    page = (await client.get(first)).text
    assert "The item went to another buyer." in card(page)
    said = text(page)
    assert "it was not signed and paid in time." in said
    assert "You may make a new offer." not in said
    assert "offer" not in forms(page)


async def test_a_pickup_in_dispute_shows_the_buyer_no_meeting(client, caller):
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    await paid(client, seller, buyer)
    assert "data-seller-contact" in (await client.get(buyer)).text  # meet for the handover
    assert (await submit(client, seller, "problem", problem="no_show")).status_code == 303
    page = (await client.get(buyer)).text
    assert "data-seller-contact" not in page
    assert "Meet the seller" not in page
    assert "The seller reported a problem with the handover" in html.unescape(page)


async def _operator(client, sessionmaker, *roles: str) -> None:
    await make_operator(sessionmaker, "ann@example.com", *roles)
    await log_in(client, sessionmaker, "ann@example.com")


async def test_a_refunded_deals_dossier_lists_no_payout(client, caller, sessionmaker):
    deal, _seller, _buyer = await disputed(client, caller)
    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session, uuid.UUID(deal["id"]), flows.DisputeOutcome.REFUND, SETTINGS
        )
    await _operator(client, sessionmaker, "support")
    page = (await client.get(f"/back-office/deals/{deal['id']}")).text
    money = re.search(r"<div class=\"card\" data-money>.*?</div>", page, re.S)
    assert money is not None
    assert "Payout to the seller" not in money.group(0)
    assert "data-refunded" in money.group(0)


async def test_a_completed_deals_dossier_lists_its_payout(client, caller, sessionmaker):
    deal, _seller, _buyer = await _completed(client, caller)
    await _operator(client, sessionmaker, "support")
    page = (await client.get(f"/back-office/deals/{deal['id']}")).text
    assert "Payout to the seller" in page
    assert "data-refunded" not in page


async def test_the_back_office_names_reasons_steps_and_values_in_norwegian(
    client, caller, sessionmaker
):
    # A parcel that never came (the transit deadline), and a buyer who did not come to a pickup.
    parcel = await create_deal(client, caller, name="Lampe", price=100, seller=SELLER)
    await offer_link(client, caller, parcel)
    await fire(
        client, caller, "dealStatus", {"dealId": parcel["id"], "status": "Shipping_In_Progress"}
    )
    await advance_clock(client, caller, 15 * 24 * 3600)
    assert (await status_of(client, caller, parcel))[0] == "Shipping_Review_Denied"
    pickup, seller, _buyer = await signed_deal(client, caller, "Pickup")
    await paid(client, seller, _buyer)
    assert (await submit(client, seller, "problem", problem="no_show")).status_code == 303
    async with sessionmaker() as session, session.begin():
        await audit.record(
            session,
            Actor("ann@example.com"),
            "test.action",
            "deal",
            pickup["id"],
            before={"town": "Jönköping"},
            after={"town": "Tromsø"},
        )
    await _operator(client, sessionmaker, "support", "admin")
    await client.get("/back-office/?lang=nb")

    queue = text((await client.get("/back-office/disputes")).text)
    assert "not received" not in queue
    assert "“Pakken kom ikke fram.”" in queue
    assert "The buyer did not come" not in queue
    assert "“Kjøperen kom ikke til overleveringen.”" in queue
    for deal, reason in ((parcel, "Pakken kom ikke fram."), (pickup, "Kjøperen kom ikke")):
        page = (await client.get(f"/back-office/deals/{deal['id']}")).text
        said = text(page)
        assert reason in said
        history = re.search(r"data-history>.*?</ol>", page, re.S)
        assert history is not None
        steps = text(history.group(0))
        assert "(markedsplass: handelen opprettet)" in steps
        assert "created" not in steps
    shown = (await client.get("/back-office/audit")).text
    assert "Jönköping" in shown
    assert "Tromsø" in shown
    assert "\\u00f6" not in shown
    assert "\\u00f8" not in shown


async def test_the_sellers_card_speaks_to_the_seller(client, caller):
    """Every state of a carrier deal up to the 24 hours of review, and a pickup problem: the
    seller's own card never speaks of them as "the seller"."""
    deal, seller, buyer = await signed_deal(client, caller, "Carrier")
    await paid(client, seller, buyer)
    await submit(client, seller, "handover", carrier="Posten", tracking="370712345678")
    await submit(client, buyer, "arrived")
    assert await status_of(client, caller, deal) == ("Shipping_Arrived", "Paid")
    shown = card((await client.get(seller)).text)
    assert "If not: The item counts as approved and you are paid." in shown
    assert "seller" not in shown.lower()
    assert "the seller is paid" in card((await client.get(buyer)).text)
