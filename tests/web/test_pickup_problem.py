"""The pickup seller's recourse: a buyer who leaves with the item without giving the handover
code (or never comes) is reported by the seller before the 7 days run out, and the deal goes to
the manual dispute with the seller's reason instead of refunding the buyer.

Through the seller's page, on SQLite and PostgreSQL (the ``client`` fixture's backends)."""

import html
import re
import uuid

from dealbroker.deals import flows
from dealbroker.deals.models import Deal
from dealbroker.disputes import dossier
from tests.conftest import SELLER, advance_clock
from tests.lifecycle_helpers import SETTINGS, run_provider_calls
from tests.sandbox.calls import deal_events
from tests.web.pages import (
    confirmation_question,
    field_error,
    outbox_of,
    paid,
    signed_deal,
    status_of,
    submit,
)


async def _pickup_paid(client, caller) -> tuple[dict, str, str]:
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    await paid(client, seller, buyer)
    assert await status_of(client, caller, deal) == ("Pickup_Pending", "Paid")
    return deal, seller, buyer


async def test_the_pickup_page_says_not_to_hand_over_before_the_code(client, caller):
    _, seller, buyer = await _pickup_paid(client, caller)
    page = html.unescape((await client.get(seller)).text)
    assert "Do not hand the item over before the buyer's code is accepted here." in page
    assert "data-pickup-problem" in page
    assert "data-pickup-problem" not in (await client.get(buyer)).text  # the seller's alone


async def test_seller_reports_the_buyer_took_the_item_without_the_code(
    client, caller, sessionmaker
):
    deal, seller, buyer = await _pickup_paid(client, caller)
    page = await client.get(seller)
    form = {k: v for k, v in re.findall(r'name="(csrf|version)" value="([^"]*)"', page.text)}
    # Asked first: nothing changes until the seller says yes.
    asked = await client.post(f"{seller}/-/problem", data={**form, "problem": "took"})
    assert asked.status_code == 200
    assert "you can no longer confirm the handover" in html.unescape(
        confirmation_question(asked.text)
    )
    assert await status_of(client, caller, deal) == ("Pickup_Pending", "Paid")

    done = await submit(client, seller, "problem", problem="took")
    assert done.status_code == 303
    assert "done=problem-reported" in done.headers["location"]
    assert await status_of(client, caller, deal) == ("Pickup_Denied", "Paid")

    # The event is emitted; both parties are told, each in their own words.
    statuses = [
        e["data"]["status"] for e in await deal_events(client, caller, deal["id"], "deal.status")
    ]
    assert statuses[-1] == "Pickup_Denied"
    told = {m.to_email: m for m in await outbox_of(sessionmaker, deal) if m.kind == "deal_disputed"}
    seller_email = SELLER["email"]
    assert seller_email in told
    assert len(told) == 2
    (buyer_email,) = set(told) - {seller_email}
    reason = "The buyer took the item without giving the handover code."
    assert f"You reported a problem with the handover: “{reason}”" in told[seller_email].body
    assert f"The seller reported a problem with the handover: “{reason}”" in told[buyer_email].body

    # Each page says who reported it, and the reason.
    seller_page = html.unescape((await client.get(seller)).text)
    assert "You reported a problem" in seller_page
    assert f"“{reason}”" in seller_page
    assert "You reported a problem with the handover; the money stays held." in seller_page
    buyer_page = html.unescape((await client.get(buyer)).text)
    assert f"The seller reported a problem with the handover: “{reason}”" in buyer_page
    assert "The seller reported a problem with the handover; the money stays held." in buyer_page

    # The operator sees who opened it and why.
    async with sessionmaker() as session:
        shown = await dossier.dossier(session, uuid.UUID(deal["id"]))
        listed = await flows.in_dispute(session)
        opened = [await flows.dispute_opened_by(session, d) for d in listed]
    assert (shown["deal"]["disputeReason"], shown["deal"]["disputeOpenedBy"]) == (
        reason,
        "seller",
    )
    assert "seller" in opened
    assert shown["history"][-1]["trigger"] == "seller_reported_problem"


async def test_the_7_days_then_pass_without_a_refund(client, caller, sessionmaker):
    deal, seller, _ = await _pickup_paid(client, caller)
    await submit(client, seller, "problem", problem="no_show")
    await advance_clock(client, caller, 8 * 24 * 3600)
    # The pickup timer found the deal in dispute and changed nothing: the money stays held.
    assert await status_of(client, caller, deal) == ("Pickup_Denied", "Paid")
    async with sessionmaker() as session:
        stored = await session.get(Deal, uuid.UUID(deal["id"]))
        assert stored is not None
        assert stored.dispute_reason == "The buyer did not come to the handover."
    statuses = [
        e["data"]["status"] for e in await deal_events(client, caller, deal["id"], "deal.status")
    ]
    assert "Pickup_Expired" not in statuses
    assert "Refunded" not in statuses


async def test_another_problem_needs_the_sellers_words(client, caller):
    deal, seller, _ = await _pickup_paid(client, caller)
    refused = await submit(client, seller, "problem", problem="other", reason="")
    assert refused.status_code == 400
    assert field_error(refused.text, "reason") == "Say what happened, so we can look into it."
    nothing = await submit(client, seller, "problem")
    assert nothing.status_code == 400
    assert field_error(nothing.text, "problem") == "Choose what happened."
    assert await status_of(client, caller, deal) == ("Pickup_Pending", "Paid")

    said = "He paid, then sent his brother, who had no code."
    done = await submit(client, seller, "problem", problem="other", reason=said)
    assert done.status_code == 303
    assert await status_of(client, caller, deal) == ("Pickup_Denied", "Paid")
    assert f"“{said}”" in html.unescape((await client.get(seller)).text)


async def test_only_a_pickup_waiting_for_its_handover_takes_a_report(client, caller):
    deal, seller, buyer = await signed_deal(client, caller, "Carrier")
    await paid(client, seller, buyer)
    page = await client.get(seller)
    form = {k: v for k, v in re.findall(r'name="(csrf|version)" value="([^"]*)"', page.text)}
    refused = await client.post(
        f"{seller}/-/problem", data={**form, "problem": "took", "confirm": "yes"}
    )
    assert refused.status_code == 409
    assert await status_of(client, caller, deal) == ("Shipping_Pending", "Paid")


async def test_the_decision_says_the_seller_reported_it(client, caller, sessionmaker):
    """The operator refunds a dispute the seller opened: the messages name the seller as the one
    who reported the problem, and the money goes back in full."""
    deal, seller, _ = await _pickup_paid(client, caller)
    await submit(client, seller, "problem", problem="no_show")
    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session, uuid.UUID(deal["id"]), flows.DisputeOutcome.REFUND, SETTINGS
        )
    await run_provider_calls(sessionmaker)
    assert await status_of(client, caller, deal) == ("Refunded", "Refunded")
    told = {
        m.to_email: m.body for m in await outbox_of(sessionmaker, deal) if m.kind == "deal_refunded"
    }
    assert len(told) == 2
    seller_email = deal["seller"]["email"]
    for to, body in told.items():
        why = (
            "We looked into the problem you reported and decided to refund the buyer."
            if to == seller_email
            else "We looked into the problem the seller reported and decided to refund you."
        )
        assert why in body
