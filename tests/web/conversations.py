"""The conversation on the parties' pages: writing through a page's message form and reading
the messages it shows (for the page tests, in process or against a real server); and a deal
whose parties have talked and reported messages, for the back office's tests (``talked``): two
buyers asked before offering, the first was approved; the seller reported the first buyer's
message, the second buyer the seller's answer to them."""

import html
import re
import uuid
from dataclasses import dataclass

from dealbroker.conversations import service as conversations
from dealbroker.conversations.service import Party
from tests.conftest import create_deal, make_settings
from tests.conversations.helpers import resolved
from tests.web.pages import FORM, HIDDEN, offer_link, path, submit

OFF_PLATFORM = "Call me on 912 34 567, I prefer a bank transfer."


def message_forms(page: str) -> list[dict[str, str]]:
    """Every form of the page that writes a message, with its hidden fields and action."""
    found = []
    for action, body in FORM.findall(page):
        if html.unescape(action).split("?")[0].endswith("/-/message"):
            fields = {k: html.unescape(v) for k, v in HIDDEN.findall(body)}
            found.append({"action": html.unescape(action), **fields})
    return found


async def write(client, page_url: str, text: str, link: str | None = None, page: str | None = None):
    """Post the page's message form (the one for offer link ``link`` on the seller's page); the
    form as the page at ``page`` (its text, as loaded earlier) had it, else as it is now."""
    shown = page if page is not None else (await client.get(page_url)).text
    chosen = [f for f in message_forms(shown) if link is None or f.get("offerLink") == link]
    assert chosen, "no message form on the page"
    form = dict(chosen[0])
    return await client.post(form.pop("action"), data={**form, "message": text})


def bodies(page: str) -> list[tuple[str, str]]:
    """(author, text) of each message the page shows, in its order."""
    return [
        (author, html.unescape(text))
        for author, text in re.findall(
            r'data-author="(\w+)">\s*<p class="meta">.*?</p>\s*<p class="body">(.*?)</p>',
            page,
            re.S,
        )
    ]


def thread(page: str, link: str) -> str:
    found = re.search(rf'<section class="thread" id="conversation-{link}".*?</section>', page, re.S)
    assert found, f"no conversation {link} on the page"
    return found.group(0)


def link_id(buyer_url: str) -> str:
    return buyer_url.split("offer=")[1]


@dataclass(frozen=True)
class Talked:
    deal_id: str
    first: str  # the approved buyer's page
    second: str
    off_platform: uuid.UUID  # the first buyer's message the seller reported
    answer: uuid.UUID  # the seller's answer to the second buyer, which they reported
    question: uuid.UUID  # the second buyer's question, not reported


async def _post(sessionmaker, db_url: str, page: str, author: Party, text: str) -> uuid.UUID:
    async with sessionmaker() as session, session.begin():
        link, deal = await resolved(session, page)
        message = await conversations.post(session, deal, link, author, text, make_settings(db_url))
        return message.id


async def _report(sessionmaker, buyer: str, reader: Party, message_id: uuid.UUID, why: str):
    """``reader`` reports a message of the conversation behind ``buyer``'s offer link."""
    async with sessionmaker() as session, session.begin():
        link, deal = await resolved(session, buyer)
        mine = link if reader is Party.BUYER else None
        await conversations.report(session, deal, reader, message_id, why, mine)


async def talked(client, caller, sessionmaker, db_url: str) -> Talked:
    deal = await create_deal(client, caller, name="Lamp", price=100)
    seller = path(deal["url"])
    first, second = await offer_link(client, caller, deal), await offer_link(client, caller, deal)
    off = await _post(sessionmaker, db_url, first, Party.BUYER, OFF_PLATFORM)
    await _post(sessionmaker, db_url, first, Party.SELLER, "Please pay in the deal.")
    question = await _post(sessionmaker, db_url, second, Party.BUYER, "Is it <b>brass</b>?")
    answer = await _post(sessionmaker, db_url, second, Party.SELLER, "Yes. Idiot.")
    await _report(sessionmaker, first, Party.SELLER, off, "Wants me to pay outside")
    await _report(sessionmaker, second, Party.BUYER, answer, "Rude")
    await submit(client, first, "offer", price="90", shippingType="Pickup", email="a@example.com")
    await submit(client, seller, "sign", full_name="Kari", consent="yes")
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    await submit(client, seller, "approve", offer=offer_id)
    return Talked(deal["id"], first, second, off, answer, question)
