"""The e-mail that tells a party what the other wrote in a conversation, batched.

A message makes the reader's next mail about its conversation due (``service._schedule_mail``:
shortly, and at most once per ``Settings.message_mail_batch_seconds``). ``tell_next`` writes one
due mail: it claims the conversation (row locked; ``SKIP LOCKED`` on PostgreSQL, so several
workers share them; SQLite has one writer), gathers what the other party wrote since the
reader's last mail, and writes one outbox message (``notifications.conversation_news``) in the
reader's language with the link to their page, marking the mail written in the same
transaction: a mail is written once, or not at all.

What it carries: the other party's visible messages after the reader's last mail and after the
reader's own last message (writing, they have read the page). Hidden messages never; a message
with a warning only named, never quoted. A reader we have no address for gets no mail (the due
time is cleared).
"""

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.conversations import warnings
from dealbroker.conversations.models import Conversation, ConversationMessage
from dealbroker.conversations.service import Party
from dealbroker.core import clock
from dealbroker.deals.models import Deal
from dealbroker.notifications import service as notifications


async def _claim(session: AsyncSession, reader: Party, now: datetime) -> Conversation | None:
    """The conversation whose mail to ``reader`` has been due longest, row locked; those
    another worker holds (or a message being written holds) are skipped."""
    due = (
        Conversation.seller_mail_due_at
        if reader is Party.SELLER
        else Conversation.buyer_mail_due_at
    )
    return await session.scalar(
        select(Conversation)
        .where(due.is_not(None), due <= now)
        .order_by(due)
        .limit(1)
        .with_for_update(skip_locked=True)
    )


async def _since(
    session: AsyncSession, conversation: Conversation, reader: Party
) -> datetime | None:
    """What the reader has seen of the conversation up to: their last mail, or their own last
    message if later (they wrote it on their page, which showed everything before)."""
    mailed = (
        conversation.seller_mailed_at if reader is Party.SELLER else conversation.buyer_mailed_at
    )
    wrote = await session.scalar(
        select(ConversationMessage.created_at)
        .where(
            ConversationMessage.conversation_id == conversation.id,
            ConversationMessage.author == reader.value,
        )
        .order_by(ConversationMessage.created_at.desc())
        .limit(1)
    )
    seen = [t for t in (mailed, wrote) if t is not None]
    return max(seen) if seen else None


async def _news(
    session: AsyncSession, conversation: Conversation, reader: Party, now: datetime
) -> list[notifications.Said]:
    """The other party's visible messages the reader has not seen, oldest first."""
    query = select(ConversationMessage).where(
        ConversationMessage.conversation_id == conversation.id,
        ConversationMessage.author == reader.other.value,
        ConversationMessage.hidden_at.is_(None),
        ConversationMessage.created_at <= now,
    )
    since = await _since(session, conversation, reader)
    if since is not None:
        query = query.where(ConversationMessage.created_at > since)
    rows = await session.scalars(
        query.order_by(ConversationMessage.created_at, ConversationMessage.id)
    )
    return [notifications.Said(m.created_at, m.body, _not_mailed(m)) for m in rows]


def _not_mailed(message: ConversationMessage) -> bool:
    """Whether a message is told of but not quoted: one its reader is warned about, and any
    with an address or a link whenever it was written (a mail client would make it one that
    can be clicked, where our pages never do)."""
    return bool(message.warnings) or any(
        w in (warnings.Warning.EMAIL, warnings.Warning.LINK) for w in warnings.found(message.body)
    )


async def tell_next(session: AsyncSession) -> bool:
    """Write one due mail about a conversation (the seller's first, then the buyers'), in the
    caller's transaction; False when none is due. The mail's due time is cleared whether or not
    a mail was written (nothing new to tell, no address)."""
    for reader in (Party.SELLER, Party.BUYER):
        conversation = await _claim(session, reader, clock.now())
        if conversation is not None:
            break
    else:
        return False
    # Timed once the row is locked: every message written before is in (``service.post``
    # times its messages once it holds the same lock), every one after is the next mail's.
    now = clock.now()
    said = await _news(session, conversation, reader, now)
    deal = await session.get(Deal, conversation.deal_id)
    written = deal is not None and await notifications.conversation_news(
        session,
        deal,
        notifications.Party(reader.value),
        conversation.offer_link_id,
        said,
        conversation.buyer_locale,
    )
    if reader is Party.SELLER:
        conversation.seller_mail_due_at = None
        if written:
            conversation.seller_mailed_at = now
    else:
        conversation.buyer_mail_due_at = None
        if written:
            conversation.buyer_mailed_at = now
    await session.flush()
    return True
