"""The back office's reported messages over HTTP, on SQLite and PostgreSQL: the queue (oldest
report first, with its deal and whole conversation), the count on the home page, the deal's
page with its conversations, and each of support's actions (hide, dismiss, block, unblock):
allowed to support only, refused without the form's CSRF token, not found for another deal's
message or conversation, 400 for a form naming no party, each recorded in the audit trail
with the operator and the request id."""

import html
import re
import uuid

import pytest
from sqlalchemy import select

from dealbroker.audit.models import AuditRecord
from dealbroker.conversations.models import Conversation, ConversationMessage
from tests.conftest import create_deal
from tests.web.back_office import csrf, log_in, make_operator
from tests.web.conversations import OFF_PLATFORM, talked


def text(page) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.text)).split())


async def audit_of(sessionmaker, deal_id: str) -> list[AuditRecord]:
    async with sessionmaker() as session:
        return list(
            await session.scalars(
                select(AuditRecord)
                .where(
                    AuditRecord.target_id == deal_id,
                    AuditRecord.action.like("conversation.%"),
                )
                .order_by(AuditRecord.id)
            )
        )


async def message(sessionmaker, message_id: uuid.UUID) -> ConversationMessage:
    async with sessionmaker() as session:
        found = await session.get(ConversationMessage, message_id)
        assert found is not None
        return found


async def conversations_of(sessionmaker, deal_id: str) -> list[Conversation]:
    async with sessionmaker() as session:
        return list(
            await session.scalars(
                select(Conversation).where(Conversation.deal_id == uuid.UUID(deal_id))
            )
        )


async def test_support_works_the_queue(client, caller, sessionmaker, db_url):
    t = await talked(client, caller, sessionmaker, db_url)
    await make_operator(sessionmaker, "sue@example.com", "support")
    await log_in(client, sessionmaker, "sue@example.com")

    home = await client.get("/back-office/")
    assert 'data-open-reports="2"' in home.text
    assert 'href="/back-office/reports"' in home.text
    queue = await client.get("/back-office/reports")
    assert queue.status_code == 200
    assert queue.headers["cache-control"] == "no-store"
    # Oldest report first: the seller's, then the second buyer's.
    assert re.findall(r'data-report-of="([0-9a-f-]+)"', queue.text) == [
        str(t.off_platform),
        str(t.answer),
    ]
    assert f'href="/back-office/deals/{t.deal_id}"' in queue.text
    said = text(queue)
    assert "Wants me to pay outside" in said
    assert "Reported by the seller" in said
    assert "Reported by the buyer" in said
    # The whole conversation around each report, the question escaped, warnings marked.
    assert OFF_PLATFORM in said
    assert "Please pay in the deal." in said
    assert "Is it <b>brass</b>?" in said
    assert "<b>brass" not in queue.text
    assert 'data-warned="phone payment"' in queue.text

    hide = f"/back-office/deals/{t.deal_id}/messages/{t.off_platform}/hide"
    done = await client.post(hide, data={"csrf": csrf(queue.text), "back": "reports"})
    assert done.status_code == 303
    assert done.headers["location"] == "/back-office/reports?done=message-hidden"
    after = await client.get(done.headers["location"])
    assert "The message is hidden from both parties." in text(after)
    assert re.findall(r'data-report-of="([0-9a-f-]+)"', after.text) == [str(t.answer)]
    hidden = await message(sessionmaker, t.off_platform)
    assert hidden.hidden_at is not None
    assert hidden.report_closed_at is not None
    assert hidden.hidden_by == "operator:sue@example.com"

    dismiss = f"/back-office/deals/{t.deal_id}/messages/{t.answer}/dismiss"
    done = await client.post(dismiss, data={"csrf": csrf(after.text)})
    assert (
        done.headers["location"]
        == f"/back-office/deals/{t.deal_id}?done=report-dismissed#conversations"
    )
    left = await message(sessionmaker, t.answer)
    assert left.report_closed_at is not None
    assert left.hidden_at is None
    empty = await client.get("/back-office/reports")
    assert "data-empty" in empty.text
    assert 'data-open-reports="0"' in (await client.get("/back-office/")).text

    # The deal's page: both conversations, the approved buyer's first, the hidden one marked
    # (with who hid it), apart from the dispute's statements.
    deal = await client.get(f"/back-office/deals/{t.deal_id}")
    assert deal.status_code == 200
    shown = re.findall(r'data-conversation="([0-9a-f-]+)"( data-approved-buyer)?', deal.text)
    assert len(shown) == 2
    assert shown[0][1]
    assert not shown[1][1]
    assert re.search(rf'data-conversation-message="{t.off_platform}"[^>]*data-hidden', deal.text)
    assert "Hidden from both parties by sue@example.com" in text(deal)
    assert 'data-report="closed"' in deal.text

    # Block the seller from one conversation: every conversation of the deal; then unblock.
    first_id = shown[0][0]
    block = f"/back-office/deals/{t.deal_id}/conversations/{first_id}/block"
    token = csrf(deal.text)
    done = await client.post(block, data={"csrf": token, "party": "seller", "blocked": "1"})
    assert (
        done.headers["location"]
        == f"/back-office/deals/{t.deal_id}?done=party-blocked#conversations"
    )
    assert all(c.seller_blocked_at for c in await conversations_of(sessionmaker, t.deal_id))
    blocked = await client.get(f"/back-office/deals/{t.deal_id}")
    assert blocked.text.count('data-blocked-party="seller"') == 2
    await client.post(block, data={"csrf": token, "party": "seller", "blocked": "0"})
    await client.post(block, data={"csrf": token, "party": "buyer", "blocked": "1"})
    states = {str(c.id): c for c in await conversations_of(sessionmaker, t.deal_id)}
    assert not any(c.seller_blocked_at for c in states.values())
    assert [i for i, c in states.items() if c.buyer_blocked_at] == [first_id]

    records = await audit_of(sessionmaker, t.deal_id)
    assert [r.action for r in records] == [
        "conversation.message_hidden",
        "conversation.report_dismissed",
        "conversation.party_blocked",
        "conversation.party_unblocked",
        "conversation.party_blocked",
    ]
    assert {r.actor for r in records} == {"operator:sue@example.com"}
    assert all(r.request_id for r in records)


async def test_support_refuses_what_it_must(client, caller, sessionmaker, db_url):
    t = await talked(client, caller, sessionmaker, db_url)
    other = await create_deal(client, caller)
    await make_operator(sessionmaker, "fin@example.com", "finance")
    await make_operator(sessionmaker, "sue@example.com", "support")
    hide = f"/back-office/deals/{t.deal_id}/messages/{t.off_platform}/hide"

    # Nobody logged in: to the login page; finance only: the 403 page.
    assert (await client.get("/back-office/reports")).status_code in (303, 302)
    await log_in(client, sessionmaker, "fin@example.com")
    home = await client.get("/back-office/")
    assert 'href="/back-office/reports"' not in home.text
    assert (await client.get("/back-office/reports")).status_code == 403
    assert (await client.post(hide, data={"csrf": csrf(home.text)})).status_code == 403

    client.cookies.clear()
    await log_in(client, sessionmaker, "sue@example.com")
    page = await client.get(f"/back-office/deals/{t.deal_id}")
    token = csrf(page.text)
    # No CSRF token, or another's: the 403 page, nothing done.
    assert (await client.post(hide)).status_code == 403
    assert (await client.post(hide, data={"csrf": "x" + token})).status_code == 403
    # Another deal's message or conversation, or none: not found.
    for action in ("hide", "dismiss"):
        for url in (
            f"/back-office/deals/{other['id']}/messages/{t.off_platform}/{action}",
            f"/back-office/deals/{t.deal_id}/messages/{uuid.uuid4()}/{action}",
        ):
            missing = await client.post(url, data={"csrf": token})
            assert missing.status_code == 404, url
    conversation = re.search(r'data-conversation="([0-9a-f-]+)"', page.text).group(1)
    missing = await client.post(
        f"/back-office/deals/{other['id']}/conversations/{conversation}/block",
        data={"csrf": token, "party": "seller", "blocked": "1"},
    )
    assert missing.status_code == 404
    assert (
        await client.post(
            f"/back-office/deals/{t.deal_id}/messages/nothing/hide", data={"csrf": token}
        )
    ).status_code == 400  # a malformed id, as every page answers it
    # A form naming no party, or no choice: 400 on the page it came from.
    block = f"/back-office/deals/{t.deal_id}/conversations/{conversation}/block"
    for data in ({"party": "admin", "blocked": "1"}, {"party": "seller", "blocked": "yes"}):
        refused = await client.post(block, data={"csrf": token, **data})
        assert refused.status_code == 400
        assert "Nothing was changed" in text(refused)
        assert "data-dossier" in refused.text
    refused = await client.post(
        block, data={"csrf": token, "party": "x", "blocked": "1", "back": "reports"}
    )
    assert refused.status_code == 400
    assert "data-report-of" in refused.text

    assert await audit_of(sessionmaker, t.deal_id) == []
    still = await message(sessionmaker, t.off_platform)
    assert still.hidden_at is None
    assert still.report_closed_at is None
    assert not any(
        c.seller_blocked_at or c.buyer_blocked_at
        for c in await conversations_of(sessionmaker, t.deal_id)
    )


@pytest.mark.parametrize("twice", ["hide", "dismiss"])
async def test_an_action_done_twice_is_recorded_once(client, caller, sessionmaker, db_url, twice):
    t = await talked(client, caller, sessionmaker, db_url)
    await make_operator(sessionmaker, "sue@example.com", "support")
    await log_in(client, sessionmaker, "sue@example.com")
    token = csrf((await client.get("/back-office/reports")).text)
    url = f"/back-office/deals/{t.deal_id}/messages/{t.answer}/{twice}"
    for _ in range(2):
        assert (await client.post(url, data={"csrf": token})).status_code == 303
    assert len(await audit_of(sessionmaker, t.deal_id)) == 1
