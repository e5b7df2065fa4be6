"""The conversation on the seller's and the buyer's pages, through their HTML forms: two buyers
ask on one ad and get answers, a message with contact or payment details warns its reader, links
are never links, messages are reported, the conversation of a buyer not approved closes, and a
message is written whatever the deal's version (no deal action), never on another deal's link.

On SQLite and PostgreSQL (the ``client`` fixture's backends)."""

import html
import re
import uuid

import httpx
from sqlalchemy import func, select

from dealbroker.conversations.models import ConversationMessage
from tests.conftest import BASE_URL, create_deal
from tests.web.conversations import bodies, link_id, message_forms, thread, write
from tests.web.english import english_in
from tests.web.pages import field_error, forms, offer_link, path, submit, two_buyers_one_approved


async def test_two_buyers_ask_on_one_ad_and_get_answers(client, caller, sessionmaker):
    deal = await create_deal(client, caller, name="Racersykkel", price=4500)
    seller = path(deal["url"])
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    first = await offer_link(client, caller, deal)
    second = await offer_link(client, caller, deal, buyer={"name": "Per"})

    # One asks before offering, the other after; each on their own page.
    asked = await write(client, first, "Is the frame 56 cm?")
    assert asked.status_code == 303
    assert asked.headers["location"].endswith(
        f"?offer={link_id(first)}&done=message-sent#conversation"
    )
    await submit(client, second, "offer", price="4000", shippingType="Pickup", email="p@x.no")
    assert (await write(client, second, "Can I pick it up on Saturday?")).status_code == 303
    sent = (await client.get(asked.headers["location"])).text
    assert "Your message is sent." in sent
    assert bodies(sent) == [("buyer", "Is the frame 56 cm?")]

    page = (await client.get(seller)).text
    assert 'data-unanswered="2"' in page
    # Named by the offer's (or link's) name, else by the order the buyers began.
    assert "Buyer 1" in thread(page, link_id(first))
    assert "Per" in thread(page, link_id(second))
    assert "data-awaits" in thread(page, link_id(first))

    answered = await write(client, seller, "Yes, 56 cm.", link=link_id(first))
    assert answered.status_code == 303
    assert answered.headers["location"].endswith(
        f"?done=message-sent#conversation-{link_id(first)}"
    )
    await write(client, seller, "Saturday at noon suits me.", link=link_id(second))
    page = (await client.get(seller)).text
    assert "data-unanswered" not in page
    assert bodies(thread(page, link_id(first))) == [
        ("buyer", "Is the frame 56 cm?"),
        ("seller", "Yes, 56 cm."),
    ]
    # Each buyer reads only their own conversation, newest last, the seller named as such.
    mine = (await client.get(first)).text
    assert bodies(mine) == [("buyer", "Is the frame 56 cm?"), ("seller", "Yes, 56 cm.")]
    assert "Saturday" not in mine
    assert re.findall(r"<p class=\"meta\"><strong>(\w+)</strong>", mine) == ["You", "Seller"]
    theirs = (await client.get(second)).text
    assert bodies(theirs)[-1] == ("seller", "Saturday at noon suits me.")


async def test_contact_and_payment_details_warn_the_reader_and_links_are_text(client, caller):
    deal = await create_deal(client, caller, name="Lamp", price=100)
    buyer = await offer_link(client, caller, deal)
    seller = path(deal["url"])
    text = (
        "Call me on 912 34 567 and pay by bank transfer instead: "
        "https://pay.example.com/" + "x" * 300 + " <b>now</b>\nthanks"
    )
    assert (await write(client, buyer, text)).status_code == 303

    page = (await client.get(seller)).text
    warning = re.search(
        r'<div class="message-warning strong" role="note" data-warning="([^"]+)"', page
    )
    assert warning, "the reader sees no strong warning"
    assert warning.group(1) == "phone link payment"
    said = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "Never pay, or take payment, outside dealbroker" in said
    assert "a phone number, a link, and talk of paying some other way" in said
    # Shown as typed: escaped, its line break kept, the address no link.
    assert bodies(page) == [("buyer", text)]
    assert "<b>now</b>" not in page
    assert 'href="https://pay.example.com' not in page
    # The author is reminded, not alarmed.
    own = (await client.get(buyer)).text
    assert 'class="message-warning" role="note" data-warning="phone link payment"' in own
    assert "Your message contains" in html.unescape(own)
    assert 'class="message-warning strong"' not in own

    # The buyer, reading the seller, is warned as strongly.
    await write(client, seller, "Mail me: kari@example.com", link=link_id(buyer))
    read = (await client.get(buyer)).text
    assert 'class="message-warning strong" role="note" data-warning="email"' in read
    # A plain question warns no one.
    await write(client, buyer, "Is the frame 56 cm, 2019 model?")
    assert (await client.get(seller)).text.count("data-warning=") == 2


async def test_a_message_is_written_from_an_out_of_date_page(client, caller):
    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    first, second = await offer_link(client, caller, deal), await offer_link(client, caller, deal)
    await write(client, first, "Still for sale?")
    seller_page, first_page = (await client.get(seller)).text, (await client.get(first)).text
    # The deal changes meanwhile: another buyer offers, the seller signs.
    await submit(client, second, "offer", price="90", shippingType="Pickup", email="b@x.no")
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    answered = await write(client, seller, "Yes.", link=link_id(first), page=seller_page)
    assert answered.status_code == 303, field_error(answered.text, "message") or answered.text
    again = await write(client, first, "Great, I offer tomorrow.", page=first_page)
    assert again.status_code == 303
    assert [b for _, b in bodies((await client.get(first)).text)] == [
        "Still for sale?",
        "Yes.",
        "Great, I offer tomorrow.",
    ]


async def test_refusals_keep_what_was_typed(client, caller, sessionmaker):
    deal = await create_deal(client, caller, name="Lamp", price=100)
    buyer = await offer_link(client, caller, deal)
    seller = path(deal["url"])
    empty = await write(client, buyer, "   \n ")
    assert empty.status_code == 400
    assert field_error(empty.text, "message") == "Write a message first."
    long = "y" * 2001
    refused = await write(client, buyer, long)
    assert refused.status_code == 400
    assert field_error(refused.text, "message") == "This is too long (at most 2000 characters)."
    assert long in refused.text  # kept, to shorten
    # The rate: 20 an hour in one conversation; the 21st is refused, kept, and says when.
    for n in range(20):
        assert (await write(client, buyer, f"Question {n}")).status_code == 303
    limited = await write(client, buyer, "One more question")
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) > 0
    assert "You can write again in 60 minutes." in html.unescape(limited.text)
    assert ">One more question</textarea>" in limited.text
    # The seller's own rate is their own: they can still answer.
    assert (await write(client, seller, "Slow down.", link=link_id(buyer))).status_code == 303
    # A bad CSRF token changes nothing.
    form = message_forms((await client.get(seller)).text)[0]
    forged = await client.post(form.pop("action"), data={**form, "csrf": "forged", "message": "Hi"})
    assert forged.status_code == 400
    async with sessionmaker() as session:
        stored = await session.scalar(
            select(func.count())
            .select_from(ConversationMessage)
            .where(ConversationMessage.deal_id == uuid.UUID(deal["id"]))
        )
    assert stored == 21


async def test_the_seller_cannot_write_on_another_deals_link(client, caller, sessionmaker):
    mine = await create_deal(client, caller, name="Lamp", price=100)
    other = await create_deal(client, caller, name="Chair", price=100)
    foreign = link_id(await offer_link(client, caller, other))
    seller = path(mine["url"])
    page = (await client.get(seller)).text
    csrf = forms(page)["sign"]["csrf"]
    for named in (foreign, "not-an-id", str(uuid.uuid4())):
        refused = await client.post(
            f"{seller}/-/message", data={"csrf": csrf, "offerLink": named, "message": "Hello"}
        )
        assert refused.status_code == 404
        assert "There is no such conversation on this deal." in html.unescape(refused.text)
    async with sessionmaker() as session:
        stored = await session.scalar(
            select(func.count())
            .select_from(ConversationMessage)
            .where(ConversationMessage.deal_id.in_([uuid.UUID(mine["id"]), uuid.UUID(other["id"])]))
        )
    assert stored == 0


async def test_the_seller_writes_first_to_a_buyer_who_offered(client, caller):
    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    buyer = await offer_link(client, caller, deal)
    await submit(client, buyer, "offer", price="90", shippingType="Pickup", email="b@x.no")
    page = (await client.get(seller)).text
    assert 'class="write-first"' in page
    assert (
        await write(client, seller, "When can you pick it up?", link=link_id(buyer))
    ).status_code == 303
    page = (await client.get(seller)).text
    assert 'class="write-first"' not in page  # the conversation is there now
    assert bodies((await client.get(buyer)).text) == [("seller", "When can you pick it up?")]


async def test_each_party_reports_the_others_message(client, caller, sessionmaker):
    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    buyer = await offer_link(client, caller, deal)
    await write(client, buyer, "Pay me on paypal")
    await write(client, seller, "No thanks.", link=link_id(buyer))
    page = (await client.get(seller)).text
    theirs = re.search(r'data-message="([^"]+)" data-author="buyer"', page).group(1)
    ours = re.search(r'data-message="([^"]+)" data-author="seller"', page).group(1)
    assert page.count("data-report>") == 1  # only the other party's message
    csrf = forms(page)["report-message"]["csrf"]
    reported = await client.post(
        f"{seller}/-/report-message", data={"csrf": csrf, "messageId": theirs, "reason": "Scam"}
    )
    assert reported.status_code == 303
    assert reported.headers["location"].endswith(f"done=message-reported#message-{theirs}")
    page = (await client.get(seller)).text
    assert "You reported this message to our support." in page
    assert "data-report>" not in page
    # One's own message cannot be reported, nor another deal's.
    own = await client.post(f"{seller}/-/report-message", data={"csrf": csrf, "messageId": ours})
    assert own.status_code == 404
    # The buyer reports the seller's answer.
    shown = (await client.get(buyer)).text
    form = forms(shown)["report-message"]
    action = form.pop("action")
    assert (await client.post(action, data={**form, "reason": ""})).status_code == 303
    async with sessionmaker() as session:
        rows = list(
            await session.scalars(
                select(ConversationMessage).where(
                    ConversationMessage.deal_id == uuid.UUID(deal["id"])
                )
            )
        )
    by_author = {m.author: m for m in rows}
    assert by_author["buyer"].reported_by == "seller"
    assert by_author["buyer"].report_reason == "Scam"
    assert by_author["seller"].reported_by == "buyer"


async def test_the_conversation_of_a_buyer_not_approved_closes(app, client, caller):
    deal, seller, winner, other = await two_buyers_one_approved(client, caller)
    page = (await client.get(other)).text
    assert "data-write" not in page
    # Nothing written yet: no section at all for them.
    assert "data-conversation" not in page
    # The approved buyer still talks with the seller; the other cannot write.
    assert (await write(client, winner, "Pickup Saturday at 12?")).status_code == 303
    assert (await write(client, seller, "Yes.", link=link_id(winner))).status_code == 303
    # The page has no form now; a post made with its token (as an old page had it) is refused.
    csrf = app.state.links.form_token(other.split("?")[0])
    refused = await client.post(
        f"{other.split('?')[0]}/-/message?{other.split('?')[1]}",
        data={"csrf": csrf, "message": "Still available?"},
    )
    assert refused.status_code == 400
    assert "This conversation is closed" in html.unescape(refused.text)
    assert ">Still available?</textarea>" not in refused.text  # no form to keep it in


async def test_a_conversation_read_only_once_another_buyer_is_approved(client, caller):
    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    first, second = await offer_link(client, caller, deal), await offer_link(client, caller, deal)
    await write(client, second, "Would you take 70?")
    await submit(client, first, "offer", price="90", shippingType="Pickup", email="a@x.no")
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    await submit(client, seller, "approve", offer=offer_id)
    page = (await client.get(second)).text
    assert "Would you take 70?" in page
    assert "data-write" not in page
    closed = re.search(r'<p class="closed" data-closed>(.*?)</p>', page, re.S).group(1)
    assert html.unescape(closed) == (
        "The seller accepted another buyer's offer: no more messages can be written here."
    )
    seller_side = thread((await client.get(seller)).text, link_id(second))
    assert "data-write" not in seller_side
    assert "You accepted another buyer's offer" in html.unescape(seller_side)


async def test_no_english_in_the_conversation_in_norwegian_and_swedish(app, client, caller):
    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    first, second = await offer_link(client, caller, deal), await offer_link(client, caller, deal)
    await write(client, first, "Ring meg på 912 34 567, betal med bankoverføring.")
    await write(client, second, "Er den fortsatt til salgs?")
    await write(client, seller, "Ja.", link=link_id(second))
    await write(client, seller, "Nei takk.", link=link_id(first))
    await submit(client, second, "offer", price="90", shippingType="Pickup", email="a@x.no")
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    await submit(client, seller, "approve", offer=offer_id)
    for language in ("nb", "sv"):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url=BASE_URL,
            headers={"Accept-Language": language},
        ) as reader:
            shown = {
                "seller": (await reader.get(seller)).text,
                "first": (await reader.get(first)).text,  # closed: another buyer approved
                "second": (await reader.get(second)).text,
                "refused": (await write(reader, second, " ")).text,
                "sent": (await reader.get(f"{second}&done=message-sent")).text,
            }
        for name, page in shown.items():
            section = re.search(r'<div class="card conversation".*?\n</div>', page, re.S)
            assert section, f"{name}: no conversation section"
            found = english_in(section.group(0))
            assert not found, (language, name, found)
        flash = re.search(r'<div class="flash ok".*?</div>', shown["sent"]).group(0)
        assert not english_in(flash)


async def test_a_suspended_deal_takes_no_message_and_keeps_what_was_typed(
    client, caller, sessionmaker
):
    from dealbroker.integrations import service as integrations

    deal = await create_deal(client, caller, name="Lamp", price=100)
    buyer = await offer_link(client, caller, deal)
    await write(client, buyer, "Still for sale?")
    shown = (await client.get(buyer)).text
    async with sessionmaker() as session, session.begin():
        await integrations.set_active(session, caller.client_id, False)
    try:
        refused = await write(client, buyer, "Hello again?", page=shown)
        assert refused.status_code == 403
        text = html.unescape(refused.text)
        assert "Nothing was changed: this deal is suspended." in text
        # Read only, with the reason; what was typed is shown, to copy, as not sent.
        assert "The deal is suspended: no messages can be written for now." in text
        assert "data-write" not in refused.text
        unsent = re.search(r"data-unsent>.*?<p class=\"body\">(.*?)</p>", refused.text, re.S)
        assert unsent is not None
        assert unsent.group(1) == "Hello again?"
    finally:
        async with sessionmaker() as session, session.begin():
            await integrations.set_active(session, caller.client_id, True)
    assert [b for _, b in bodies((await client.get(buyer)).text)] == ["Still for sale?"]


async def test_blocked_hidden_and_ended(client, caller, sessionmaker):
    from dealbroker.audit import service as audit
    from dealbroker.conversations import service as conversations

    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    buyer = await offer_link(client, caller, deal)
    await write(client, buyer, "Pay me on paypal")
    await write(client, buyer, "Is it still there?")
    page = (await client.get(seller)).text
    lure = re.search(r'data-message="([^"]+)" data-author="buyer"', page).group(1)
    actor = audit.Actor("operator:support@market.example.com")
    async with sessionmaker() as session, session.begin():
        deal_id = uuid.UUID(deal["id"])
        await conversations.hide(session, deal_id, uuid.UUID(lure), actor)
        (conversation,) = await conversations.of_deal(session, deal_id)
        await conversations.block(
            session, deal_id, conversation.id, conversations.Party.BUYER, actor
        )
    # Hidden: shown to neither party. Blocked: the buyer reads, and is told why.
    for page_url in (seller, buyer):
        assert [b for _, b in bodies((await client.get(page_url)).text)] == ["Is it still there?"]
    mine = (await client.get(buyer)).text
    assert "data-write" not in mine
    closed = html.unescape(re.search(r"data-closed>(.*?)</p>", mine, re.S).group(1))
    assert closed == "Our support has stopped you writing messages on this deal."
    refused = await write(client, seller, "Yes.", link=link_id(buyer))
    assert refused.status_code == 303  # the seller may still answer
    blocked = await client.post(
        f"{buyer.split('?')[0]}/-/message?{buyer.split('?')[1]}",
        data={"csrf": re.search(r'name="csrf" value="([^"]+)"', mine).group(1), "message": "Hi"},
    )
    assert blocked.status_code == 400
    # Once the deal has ended, every conversation is read only, with the reason.
    await submit(client, seller, "cancel")
    ended = (await client.get(seller)).text
    assert "data-write" not in ended
    assert "The deal has ended: you can read this conversation, but not write in it." in (
        html.unescape(ended)
    )


async def test_writing_records_the_readers_language(client, caller, sessionmaker):
    from dealbroker.deals.models import Deal
    from dealbroker.offers.models import Offer

    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    buyer = await offer_link(client, caller, deal)
    await submit(client, buyer, "offer", price="90", shippingType="Pickup", email="b@x.no")
    sv, nb = {"Accept-Language": "sv"}, {"Accept-Language": "nb"}
    shown = (await client.get(buyer, headers=sv)).text
    form = message_forms(shown)[0]
    sent = await client.post(form.pop("action"), data={**form, "message": "Hej"}, headers=sv)
    assert sent.status_code == 303
    shown = (await client.get(seller, headers=nb)).text
    form = message_forms(shown)[0]
    sent = await client.post(form.pop("action"), data={**form, "message": "Hei"}, headers=nb)
    assert sent.status_code == 303
    async with sessionmaker() as session:
        row = await session.get(Deal, uuid.UUID(deal["id"]))
        assert row is not None
        assert row.seller_locale == "nb"
        offer = await session.scalar(select(Offer).where(Offer.deal_id == row.id))
        assert offer is not None
        assert offer.locale == "sv"
