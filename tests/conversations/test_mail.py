"""The e-mail about a conversation, written by the job on the services directly: batched per
window, in the reader's language with their page, warned messages named and never quoted,
hidden ones left out, none without an address; reminders and offers name the questions that
wait for an answer."""

import uuid
from datetime import timedelta

import httpx
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.audit.service import Actor
from dealbroker.conversations import service as conversations
from dealbroker.conversations.models import Conversation
from dealbroker.conversations.service import Party
from dealbroker.conversations.tasks import BATCH, MAX_EVERY, ConversationMailJob
from dealbroker.core import i18n
from dealbroker.core.i18n import _
from dealbroker.deals.lifecycle import Trigger
from dealbroker.deals.models import Deal
from dealbroker.notifications import messages
from dealbroker.notifications import service as notifications
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers import service as offers
from dealbroker.offers.models import Offer
from tests.conftest import Caller, create_deal, make_settings
from tests.conversations.helpers import resolved

OLA = "ola@example.com"
KARI = "kari@example.com"


async def _deal(client: httpx.AsyncClient, caller: Caller, **buyer: str) -> tuple[uuid.UUID, str]:
    """A deal of Kari's and an offer link (given with ``buyer``'s name and e-mail, if any)."""
    deal = await create_deal(client, caller)
    link = await client.post(
        f"/deals/v1/deals/{deal['id']}/offer",
        json={"buyer": buyer} if buyer else {},
        headers=caller.headers,
    )
    assert link.status_code == 201, link.text
    return uuid.UUID(deal["id"]), str(link.json()["url"])


async def _post(
    sessionmaker: async_sessionmaker[AsyncSession], url: str, author: Party, text: str, db_url: str
) -> uuid.UUID:
    async with sessionmaker() as session, session.begin():
        link, deal = await resolved(session, url)
        message = await conversations.post(session, deal, link, author, text, make_settings(db_url))
        return message.id


async def _run(sessionmaker: async_sessionmaker[AsyncSession], db_url: str) -> int:
    return await ConversationMailJob(sessionmaker, make_settings(db_url)).run_once()


async def _mails(
    sessionmaker: async_sessionmaker[AsyncSession], deal_id: uuid.UUID, kind: str
) -> list[OutboxMessage]:
    async with sessionmaker() as session:
        return [m for m in await notifications.of_deal(session, deal_id) if m.kind == kind]


async def _conversation(
    sessionmaker: async_sessionmaker[AsyncSession], deal_id: uuid.UUID
) -> Conversation:
    async with sessionmaker() as session:
        (found,) = await conversations.of_deal(session, deal_id)
        return found


async def test_the_seller_gets_one_mail_in_their_language_without_warned_or_hidden_words(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    db_url: str,
    frozen_clock: list,
) -> None:
    deal_id, url = await _deal(client, caller)
    async with sessionmaker() as session, session.begin():
        await session.execute(update(Deal).where(Deal.id == deal_id).values(seller_locale="nb"))
    await _post(sessionmaker, url, Party.BUYER, "Is the frame 56 cm?\nAnd the wheels?", db_url)
    await _post(sessionmaker, url, Party.BUYER, "Ring meg på 912 34 567, bank transfer?", db_url)
    rude = await _post(sessionmaker, url, Party.BUYER, "Something support hides", db_url)
    async with sessionmaker() as session, session.begin():
        await conversations.hide(session, deal_id, rude, Actor("operator:support@example.com"))
    assert await _run(sessionmaker, db_url) == 0  # not due yet: it gathers for a minute
    frozen_clock[0] += timedelta(minutes=1)
    assert await _run(sessionmaker, db_url) == 1
    (mail,) = await _mails(sessionmaker, deal_id, "conversation_message")
    assert mail.to_email == KARI
    assert "> Is the frame 56 cm?\n> And the wheels?" in mail.body
    assert "912" not in mail.body
    assert "transfer" not in mail.body
    assert "Something support hides" not in mail.body
    with i18n.using("nb"):
        page = _("Your deal page: %(url)s") % {
            "url": notifications._started().links.deal_url(deal_id)
        }
    assert page in mail.body
    assert page != _("Your deal page: %(url)s") % {"url": ""}  # Norwegian, not English
    conversation = await _conversation(sessionmaker, deal_id)
    assert conversation.seller_mail_due_at is None
    assert conversation.seller_mailed_at == frozen_clock[0]
    assert await _run(sessionmaker, db_url) == 0  # written once


async def test_one_mail_per_window_carrying_what_arrived_since(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    db_url: str,
    frozen_clock: list,
) -> None:
    deal_id, url = await _deal(client, caller)
    start = frozen_clock[0]
    await _post(sessionmaker, url, Party.BUYER, "first", db_url)
    frozen_clock[0] = start + timedelta(seconds=40)
    await _post(sessionmaker, url, Party.BUYER, "second", db_url)
    frozen_clock[0] = start + timedelta(seconds=61)
    assert await _run(sessionmaker, db_url) == 1
    frozen_clock[0] = start + timedelta(seconds=100)
    await _post(sessionmaker, url, Party.BUYER, "third", db_url)
    # Due a batch window (900 s) after the last mail, not before.
    assert (await _conversation(sessionmaker, deal_id)).seller_mail_due_at == start + timedelta(
        seconds=961
    )
    frozen_clock[0] = start + timedelta(seconds=960)
    assert await _run(sessionmaker, db_url) == 0
    frozen_clock[0] = start + timedelta(seconds=961)
    assert await _run(sessionmaker, db_url) == 1
    first, second = await _mails(sessionmaker, deal_id, "conversation_message")
    assert "> first" in first.body
    assert "> second" in first.body
    assert "third" not in first.body
    assert "> third" in second.body
    assert "first" not in second.body
    assert first.subject == "New messages about Road bike"
    assert second.subject == "New message about Road bike"


async def test_a_reader_who_wrote_since_and_a_buyer_without_address_get_no_mail(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    db_url: str,
    frozen_clock: list,
) -> None:
    deal_id, url = await _deal(client, caller)  # a link given without the buyer's address
    await _post(sessionmaker, url, Party.BUYER, "Is it still for sale?", db_url)
    frozen_clock[0] += timedelta(seconds=10)
    # The seller answers on their page before the mail is due: they have read the question.
    await _post(sessionmaker, url, Party.SELLER, "Yes.", db_url)
    frozen_clock[0] += timedelta(minutes=2)
    assert await _run(sessionmaker, db_url) == 2  # the seller's and the buyer's, both cleared
    assert await _mails(sessionmaker, deal_id, "conversation_message") == []
    conversation = await _conversation(sessionmaker, deal_id)
    assert conversation.seller_mail_due_at is None
    assert conversation.buyer_mail_due_at is None
    # Nothing was written, so no window was used up.
    assert conversation.seller_mailed_at is None
    assert conversation.buyer_mailed_at is None


async def test_the_buyer_reads_swedish_with_their_offer_page_and_questions_are_named(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    db_url: str,
    frozen_clock: list,
) -> None:
    settings = make_settings(db_url)
    deal_id, url = await _deal(client, caller, name="Ola", email=OLA)
    async with sessionmaker() as session, session.begin():
        link, deal = await resolved(session, url)
        await offers.submit(
            session,
            deal,
            price_minor=400_000,
            shipping_type="Pickup",
            buyer_name="Ola",
            buyer_email=OLA,
            offer_link_id=link.id,
            locale="sv",
        )
    await _post(sessionmaker, url, Party.SELLER, "Pickup on Sunday at 12?", db_url)
    frozen_clock[0] += timedelta(minutes=1)
    assert await _run(sessionmaker, db_url) == 1
    (mail,) = await _mails(sessionmaker, deal_id, "conversation_message")
    assert mail.to_email == OLA
    assert "> Pickup on Sunday at 12?" in mail.body
    with i18n.using("sv"):
        page = messages._buyer_page(url)
    assert page in mail.body
    assert page != messages._buyer_page(url)

    # The seller approves: the buyer's reminder to sign and pay names the seller's question.
    async with sessionmaker() as session, session.begin():
        link, deal = await resolved(session, url)
        offer = await session.scalar(select(Offer).where(Offer.deal_id == deal_id))
        assert offer is not None
        await offers.approve(session, deal, offer, settings)
        await notifications.remind(
            session, deal, Trigger.APPROVAL_LAPSED, frozen_clock[0] + timedelta(days=1)
        )
    (reminder,) = await _mails(sessionmaker, deal_id, "deadline_reminder")
    with i18n.using("sv"):
        waiting = messages.waiting_answer(1, seller=False)
    assert reminder.body.startswith(waiting)


async def test_a_new_offer_names_the_buyers_waiting_for_an_answer(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    db_url: str,
) -> None:
    deal_id, url = await _deal(client, caller)
    other = await client.post(f"/deals/v1/deals/{deal_id}/offer", json={}, headers=caller.headers)
    await _post(sessionmaker, url, Party.BUYER, "Is the frame 56 cm?", db_url)
    await _post(sessionmaker, other.json()["url"], Party.BUYER, "Any scratches?", db_url)
    async with sessionmaker() as session, session.begin():
        link, deal = await resolved(session, url)
        await offers.submit(
            session,
            deal,
            price_minor=400_000,
            shipping_type="Pickup",
            buyer_name="Ola",
            buyer_email=OLA,
            offer_link_id=link.id,
        )
    (mail,) = await _mails(sessionmaker, deal_id, "offer_received")
    assert mail.body.startswith(messages.waiting_answer(2, seller=True))
    assert "2 buyers wait for your answer" in mail.body


def test_the_mail_quotes_a_bounded_part_and_leaves_the_rest_to_the_page() -> None:
    said = [messages.Quoted("12:00", "x" * 600, False)] + [
        messages.Quoted(f"12:0{i}", f"message {i}", False) for i in range(1, 8)
    ]
    text = messages.conversation_news("Road bike", said, True, "https://deals.example/d")
    assert "> " + "x" * messages.QUOTED_CHARS + "…" in text.body
    assert "x" * (messages.QUOTED_CHARS + 1) not in text.body
    assert "> message 4" in text.body
    assert "message 5" not in text.body
    assert "And 3 more messages on your page." in text.body
    assert "(8 messages)" in text.body


def test_the_job_polls_within_a_quarter_of_the_window(db_url: str) -> None:
    job = ConversationMailJob(None, make_settings(db_url))  # type: ignore[arg-type]
    assert job.every == MAX_EVERY  # 900 s: every 30 s
    short = ConversationMailJob(None, make_settings(db_url, message_mail_batch_seconds=3))  # type: ignore[arg-type]
    assert short.every == 0.75
    assert BATCH > 1


async def test_after_payment_a_link_or_address_is_still_never_quoted_and_a_buyer_reads_their_page_language(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    db_url: str,
    frozen_clock: list,
) -> None:
    deal_id, url = await _deal(client, caller, name="Ola", email=OLA)
    async with sessionmaker() as session, session.begin():
        # Paid: contact details are the handover's, so the reader is warned of nothing.
        await session.execute(update(Deal).where(Deal.id == deal_id).values(payment_status="Paid"))
    async with sessionmaker() as session, session.begin():
        link, deal = await resolved(session, url)
        await conversations.post(
            session, deal, link, Party.BUYER, "Hi!", make_settings(db_url), locale="sv"
        )
    frozen_clock[0] += timedelta(seconds=5)
    await _post(sessionmaker, url, Party.SELLER, "See https://maps.example/abc", db_url)
    await _post(sessionmaker, url, Party.SELLER, "Or write to kari@example.com", db_url)
    await _post(sessionmaker, url, Party.SELLER, "Call 912 34 567 at the door", db_url)
    frozen_clock[0] += timedelta(minutes=1)
    await _run(sessionmaker, db_url)
    (mail,) = await _mails(sessionmaker, deal_id, "conversation_message")
    assert mail.to_email == OLA
    assert "maps.example" not in mail.body
    assert "kari@example.com" not in mail.body
    assert "> Call 912 34 567 at the door" in mail.body  # a number after payment is quoted
    with i18n.using("sv"):  # the page the buyer wrote on, before any offer
        assert _("Answer on your page: a reply to this e-mail does not reach them.") in mail.body
