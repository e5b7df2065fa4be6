"""The conversation through the parties' pages of a real ``dealbroker serve`` (and, on
PostgreSQL, its ``worker``), over HTTP as a browser without JavaScript posts the forms:

* the story: two buyers ask on one ad and get answers; one offers and is approved, which closes
  the other's conversation; the winner agrees a pickup time by message, signs, pays (sandbox),
  the handover code completes the deal, and the conversation is read only;
* the limits: a message too long, the hourly rate (``DEALBROKER_MESSAGES_PER_HOUR=2``, said in
  Norwegian on a Norwegian page), a report's reason too long, a conversation full (its earlier
  messages written into the server's database, older than the hour);
* an approval that lapses (the sandbox clock moved past its deadline) opens the other buyers'
  conversations again.

One server per backend for the module; its demo integration's sandbox clock is moved by the
last test, so that test stays last."""

import html
import math
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest

from dealbroker.conversations import service as conversations
from dealbroker.conversations.models import ConversationMessage
from dealbroker.core import clock, i18n
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.settings import Settings
from tests.browser import LiveServer, serve_module
from tests.conftest import BACKENDS, advance_clock, create_deal
from tests.web.conversations import bodies, link_id, thread, write
from tests.web.english import english_in
from tests.web.pages import (
    BUYER_SIGNS,
    HOURS,
    field_error,
    forms,
    offer_link,
    paid,
    path,
    status_of,
    submit,
)

pytestmark = pytest.mark.server

PER_HOUR = 2  # messages one party may write in one conversation in an hour, here
MAX_CHARS = Settings().message_max_chars
CLOSED = "This conversation is closed: no more messages can be written."
ANOTHER_APPROVED = (
    "The seller accepted another buyer's offer: no more messages can be written here."
)
ENDED = "The deal has ended: you can read this conversation, but not write in it."


@dataclass
class Market:
    """The server's demo integration: its API token and its sandbox's webhook secret (what
    ``create_deal``, ``offer_link`` and ``advance_clock`` read of a caller)."""

    token: str
    webhook_secret: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The server, and its database's URL."""
    settings = {
        "DEALBROKER_DEFAULT_LOCALE": "en",  # the tests read the code's English, but where told
        "DEALBROKER_MESSAGES_PER_HOUR": str(PER_HOUR),
    }
    yield from serve_module(request, tmp_path_factory, "conv-pages", settings)


@pytest.fixture
def live(served: tuple[LiveServer, str]) -> LiveServer:
    return served[0]


@pytest.fixture
async def client(live: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=live.base, timeout=30) as person:
        yield person


@pytest.fixture
async def market(live: LiveServer, client: httpx.AsyncClient) -> Market:
    token = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(live.credential("client id"), live.credential("client secret")),
    )
    assert token.status_code == 200, token.text
    return Market(token.json()["access_token"], live.credential("webhook secret"))


def closed_note(page: str) -> str:
    found = re.search(r"data-closed>(.*?)</p>", page, re.S)
    assert found, "the conversation is not shown as closed"
    return html.unescape(found.group(1))


def said(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


async def approve_offer_of(client: httpx.AsyncClient, seller: str, email: str) -> None:
    """The seller approves the pending offer ``email`` made."""
    page = (await client.get(seller)).text
    offer = re.search(
        rf'data-offer="([^"]+)" data-offer-status="Pending">\s*<div><div class="who">{email}', page
    )
    assert offer is not None, f"no pending offer of {email}"
    assert (await submit(client, seller, "approve", offer=offer.group(1))).status_code == 303


async def test_two_buyers_ask_one_buys_agrees_the_pickup_and_completes(client, market):
    deal = await create_deal(client, market, name="Racersykkel", price=4500)
    seller = path(deal["url"])
    first = await offer_link(client, market, deal)
    second = await offer_link(client, market, deal)

    # Each buyer asks on their own page before offering; the seller answers each.
    assert (await write(client, first, "Is the frame 56 cm?")).status_code == 303
    assert (await write(client, second, "Any scratches on the frame?")).status_code == 303
    assert 'data-unanswered="2"' in (await client.get(seller)).text
    answered = await write(client, seller, "Yes, 56 cm.", link=link_id(first))
    assert answered.status_code == 303
    await write(client, seller, "A small one on the fork.", link=link_id(second))
    assert bodies((await client.get(first)).text) == [
        ("buyer", "Is the frame 56 cm?"),
        ("seller", "Yes, 56 cm."),
    ]
    assert bodies((await client.get(second)).text) == [
        ("buyer", "Any scratches on the frame?"),
        ("seller", "A small one on the fork."),
    ]

    # The first offers; the seller signs and approves it: the second's conversation closes.
    offered = await submit(
        client, first, "offer", price="4500", shippingType="Pickup", email="first@example.com"
    )
    assert offered.status_code == 303
    open_page = (await client.get(second)).text  # as a tab left open shows it
    assert (
        await submit(client, seller, "sign", full_name="Kari", consent="yes")
    ).status_code == 303
    await approve_offer_of(client, seller, "first@example.com")
    closed = (await client.get(second)).text
    assert "data-write" not in closed
    assert closed_note(closed) == ANOTHER_APPROVED
    assert "A small one on the fork." in closed  # still read
    refused = await write(client, second, "Still available?", page=open_page)
    assert refused.status_code == 400
    assert CLOSED in said(refused.text)
    assert "data-write" not in thread((await client.get(seller)).text, link_id(second))

    # The winner agrees a pickup time by message: a date and a time are no phone number.
    asked = await write(client, first, "Can I pick it up on 12.12.2026 at 17:30?")
    assert asked.status_code == 303
    await write(client, seller, "Yes, see you then.", link=link_id(first))
    talk = thread((await client.get(seller)).text, link_id(first))
    assert bodies(talk)[-2:] == [
        ("buyer", "Can I pick it up on 12.12.2026 at 17:30?"),
        ("seller", "Yes, see you then."),
    ]
    assert "data-warning" not in talk

    # Signs, pays in the sandbox, and the seller takes the handover code at the pickup.
    assert (await submit(client, first, "sign", **BUYER_SIGNS)).status_code == 303
    await paid(client, seller, first)
    assert await status_of(client, market, deal) == ("Pickup_Pending", "Paid")
    code = re.search(r"data-handover-code>(\d{6})<", (await client.get(first)).text).group(1)
    picked = await submit(client, seller, "pickup", code=code)
    assert "done=picked-up" in picked.headers["location"]
    assert await status_of(client, market, deal) == ("Completed", "PendingPayOut")

    # Read only now, for both, with the reason; a post from a page shown before is refused.
    before = (await client.get(first)).text
    assert "data-write" not in before
    assert closed_note(before) == ENDED
    assert [b for _, b in bodies(before)] == [
        "Is the frame 56 cm?",
        "Yes, 56 cm.",
        "Can I pick it up on 12.12.2026 at 17:30?",
        "Yes, see you then.",
    ]
    seller_page = (await client.get(seller)).text
    assert "data-write" not in seller_page
    assert ENDED in said(seller_page)
    csrf = forms(before)["report-message"]["csrf"]
    token, query = first.split("?")
    late = await client.post(f"{token}/-/message?{query}", data={"csrf": csrf, "message": "Hi"})
    assert late.status_code == 400
    assert CLOSED in said(late.text)
    assert len(bodies((await client.get(first)).text)) == 4


async def test_each_limit_is_refused_with_its_reason(client, market, live):
    deal = await create_deal(client, market, name="Lamp", price=100)
    seller = path(deal["url"])
    buyer = await offer_link(client, market, deal)

    # Too long: refused next to the field, what was typed kept to shorten.
    long = "y" * (MAX_CHARS + 1)
    refused = await write(client, buyer, long)
    assert refused.status_code == 400
    assert field_error(refused.text, "message") == (
        f"This is too long (at most {MAX_CHARS} characters)."
    )
    assert f">{long}</textarea>" in refused.text
    assert bodies((await client.get(buyer)).text) == []

    # The rate, on a Norwegian page: the third message in the hour is refused, kept, and the
    # page says when to write again, in Norwegian.
    async with httpx.AsyncClient(
        base_url=live.base, timeout=30, headers={"Accept-Language": "nb"}
    ) as nb:
        for n in range(PER_HOUR):
            assert (await write(nb, buyer, f"Spørsmål {n}")).status_code == 303
        limited = await write(nb, buyer, "Ett spørsmål til")
    assert limited.status_code == 429
    wait = int(limited.headers["retry-after"])
    assert 0 < wait <= 3600
    minutes = max(1, math.ceil(wait / 60))
    with i18n.using("nb"):
        explained = i18n.ngettext(
            "You have written many messages in a short time. You can write again in "
            "%(minutes)s minute.",
            "You have written many messages in a short time. You can write again in "
            "%(minutes)s minutes.",
            minutes,
        ) % {"minutes": minutes}
    assert explained.startswith("Du har skrevet mange meldinger")
    assert explained in said(limited.text)
    assert ">Ett spørsmål til</textarea>" in limited.text
    assert not english_in(limited.text), english_in(limited.text)
    # The seller's rate is their own.
    assert (await write(client, seller, "Ja.", link=link_id(buyer))).status_code == 303
    assert [b for _, b in bodies((await client.get(buyer)).text)] == [
        "Spørsmål 0",
        "Spørsmål 1",
        "Ja.",
    ]

    # A report's reason too long: refused next to its field, kept; the message is not reported.
    page = (await client.get(seller)).text
    theirs = re.search(r'data-message="([^"]+)" data-author="buyer"', page).group(1)
    form = forms(page)["report-message"]
    reason = "z" * 501
    too_long = await client.post(
        form.pop("action"), data={**form, "messageId": theirs, "reason": reason}
    )
    assert too_long.status_code == 400
    assert field_error(too_long.text, "reason") == "This is too long (at most 500 characters)."
    assert f">{reason}</textarea>" in too_long.text
    assert "data-reported" not in (await client.get(seller)).text


async def test_a_full_conversation_takes_no_more(client, market, served):
    deal = await create_deal(client, market, name="Lamp", price=100)
    seller = path(deal["url"])
    buyer = await offer_link(client, market, deal)
    assert (await write(client, buyer, "Hello?")).status_code == 303
    # The rest of a full conversation, written two hours ago (outside the hour's rate).
    engine = create_engine(served[1], pool_size=1)
    try:
        async with create_sessionmaker(engine)() as session, session.begin():
            (talk,) = await conversations.of_deal(session, uuid.UUID(deal["id"]))
            earlier = clock.now() - timedelta(hours=2)
            session.add_all(
                ConversationMessage(
                    id=uuid.uuid4(),
                    conversation_id=talk.id,
                    deal_id=talk.deal_id,
                    author="buyer" if n % 2 else "seller",
                    body=f"Earlier message {n}",
                    warnings=[],
                    created_at=earlier + timedelta(seconds=n),
                )
                for n in range(conversations.MAX_MESSAGES - 1)
            )
    finally:
        await engine.dispose()
    full = "This conversation is full. Write to our support if you need to say more."
    refused = await write(client, buyer, "One more?")
    assert refused.status_code == 400
    assert full in said(refused.text)
    assert ">One more?</textarea>" in refused.text
    answer = await write(client, seller, "Yes?", link=link_id(buyer))
    assert answer.status_code == 400
    assert full in said(answer.text)
    # Nothing stored: the newest message shown is still the one that filled the conversation.
    assert bodies((await client.get(buyer)).text)[-1] == ("buyer", "Hello?")


async def test_a_lapsed_approval_opens_the_other_conversations_again(client, market):
    """Last in the module: it moves the demo integration's sandbox clock."""
    deal = await create_deal(client, market, name="Lamp", price=100)
    seller = path(deal["url"])
    first = await offer_link(client, market, deal)
    second = await offer_link(client, market, deal)
    await write(client, second, "Would you take 70?")
    for page, email in ((first, "a@example.com"), (second, "b@example.com")):
        made = await submit(client, page, "offer", price="90", shippingType="Pickup", email=email)
        assert made.status_code == 303
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    open_page = (await client.get(second)).text
    await approve_offer_of(client, seller, "a@example.com")

    closed = (await client.get(second)).text
    assert "data-write" not in closed
    assert closed_note(closed) == ANOTHER_APPROVED
    refused = await write(client, second, "Still there?", page=open_page)
    assert refused.status_code == 400
    assert CLOSED in said(refused.text)

    # The approved buyer never signs nor pays: past the deadline the approval lapses.
    assert (await advance_clock(client, market, HOURS * 3600 + 1))["timersFired"] == 1
    assert await status_of(client, market, deal) == ("Ad", None)
    reopened = (await client.get(second)).text
    assert "data-write" in reopened
    assert "data-closed" not in reopened
    assert (await write(client, second, "Is it free again?")).status_code == 303
    assert (await write(client, seller, "Yes.", link=link_id(second))).status_code == 303
    assert (await write(client, first, "Sorry, I was away.")).status_code == 303  # the lapsed
    assert [b for _, b in bodies((await client.get(second)).text)] == [
        "Would you take 70?",
        "Is it free again?",
        "Yes.",
    ]
