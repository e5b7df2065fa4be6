"""The rules of a deal's conversations: who may write, what a message may be, how fast, what
the reader is warned about, and support's moderation. The one place a message is written.

Who writes where:

* before an offer is approved, whoever holds an offer link of the deal and its seller, one
  conversation per link (a question before offering, then about the offer);
* once one is approved, only the approved buyer's conversation stays open; the others are read
  only (the item is promised), and open again if the approval lapses;
* once the deal has ended (completed, cancelled, refunded), or while it is suspended, every
  conversation is read only;
* a party support has blocked writes no more (the seller on the whole deal, a buyer in their
  conversation).

A message is plain text: control characters other than line breaks are dropped, it is trimmed
and bounded (``Settings.message_max_chars``) before anything else reads it, and a party writes
at most ``Settings.messages_per_hour`` in one conversation per hour. Its words are never logged.
Writing it schedules the other party's e-mail (batched: ``Settings.message_mail_batch_seconds``)
and emits the opt-in ``deal.message`` event, in the same transaction.
"""

import math
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit import service as audit
from dealbroker.auth.service import Principal
from dealbroker.conversations import warnings
from dealbroker.conversations.models import Conversation, ConversationMessage
from dealbroker.core import clock
from dealbroker.core.errors import BadRequest, FieldError, NotFound, TooManyRequests
from dealbroker.core.i18n import N_, _, ngettext
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus, PaymentStatus
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import FINAL_STATUSES
from dealbroker.deals.models import Deal
from dealbroker.events import envelope
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind
from dealbroker.offers import service as offers
from dealbroker.offers.models import OfferLink, OfferStatus

# The form field (and the API's) that carries a message's text.
FIELD = "message"
# A conversation holds at most this many messages: past it, even within the hourly rate, a
# party must ask support (a conversation this long is no longer about one second-hand item).
MAX_MESSAGES = 500
# The longest reason a party gives when reporting a message.
MAX_REPORT_REASON = 500
RATE_WINDOW = timedelta(hours=1)
# Why a report is refused on a page: the message is gone (support hid it), or not the reader's.
GONE = N_("This message can no longer be reported.")
# Once the deal is paid, contact details are the handover's: no warning any more.
PAID = frozenset(
    {
        PaymentStatus.PAID,
        PaymentStatus.PENDING_PAYOUT,
        PaymentStatus.PAID_OUT,
        PaymentStatus.PAYOUT_FAILED,
        PaymentStatus.PAYOUT_CANCELLED,
    }
)
# Control characters but line feed and tab (C0, DEL, C1), and the invisible ones that hide or
# reorder text: zero-width and direction marks, embeddings and isolates, line and paragraph
# separators, word joiners, the byte order mark.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)


class Party(StrEnum):
    SELLER = "seller"
    BUYER = "buyer"

    @property
    def other(self) -> "Party":
        return Party.BUYER if self is Party.SELLER else Party.SELLER


class MessageRateExceeded(TooManyRequests):
    """The party has written as many messages in this conversation as an hour allows."""

    reason = "message_rate"

    def __init__(self, retry_after: int) -> None:
        super().__init__("This party has written as many messages as an hour allows.", retry_after)
        minutes = max(1, math.ceil(retry_after / 60))
        self.page_detail = ngettext(
            "You have written many messages in a short time. You can write again in "
            "%(minutes)s minute.",
            "You have written many messages in a short time. You can write again in "
            "%(minutes)s minutes.",
            minutes,
        ) % {"minutes": minutes}


def is_paid(deal: Deal) -> bool:
    """Whether the buyer's money is held (or paid out): the point after which contact details
    are the handover's, not a way off the platform."""
    return deal.payment_status in PAID


def cleaned(text: str | None, settings: Settings) -> str:
    """``text`` as a message keeps it: line breaks unified, control and direction-changing
    characters dropped, trimmed. Refused (``FieldError`` on ``FIELD``) when empty or longer than
    ``Settings.message_max_chars``; the length is checked before any other work on it."""
    raw = text or ""
    limit = settings.message_max_chars
    # Bounded first: a form field may hold far more than a message (the body limit allows it).
    if len(raw) > limit * 2:
        raise _too_long(limit)
    value = _CONTROL.sub("", raw.replace("\r\n", "\n").replace("\r", "\n")).strip()
    if not value:
        raise FieldError(FIELD, _("Write a message first."))
    if len(value) > limit:
        raise _too_long(limit)
    return value


def _too_long(limit: int) -> FieldError:
    return FieldError(FIELD, _("This is too long (at most %(max)s characters).") % {"max": limit})


async def is_winner(session: AsyncSession, link: OfferLink, deal: Deal) -> bool:
    """Whether ``link``'s latest offer is the one the seller approved."""
    mine = await offers.offers_from_link(session, link)
    return (
        deal.buyer_user_id is not None
        and bool(mine)
        and mine[0].status == OfferStatus.APPROVED
        and mine[0].buyer_user_id == deal.buyer_user_id
    )


def open_for(deal: Deal, winner: bool) -> bool:
    """Whether a conversation of ``deal`` takes messages, for the link that is (or is not) the
    approved buyer's. Suspension and blocks are the caller's (``post`` checks both)."""
    if DealStatus(deal.status) in FINAL_STATUSES:
        return False
    return deal.buyer_user_id is None or winner


async def of_link(session: AsyncSession, link: OfferLink) -> Conversation | None:
    """The conversation behind ``link``, if either party has written."""
    return await session.scalar(
        select(Conversation).where(
            Conversation.deal_id == link.deal_id, Conversation.offer_link_id == link.id
        )
    )


async def get(
    session: AsyncSession, deal_id: uuid.UUID, conversation_id: uuid.UUID
) -> Conversation:
    """One of ``deal_id``'s conversations; another deal's is NotFound."""
    found = await session.scalar(
        select(Conversation).where(
            Conversation.id == conversation_id, Conversation.deal_id == deal_id
        )
    )
    if found is None:
        raise NotFound(
            f"No conversation {conversation_id} on this deal.",
            page_detail=_("There is no such conversation on this deal."),
        )
    return found


async def of_deal(session: AsyncSession, deal_id: uuid.UUID) -> list[Conversation]:
    """The deal's conversations, the one with the latest message first."""
    return list(
        await session.scalars(
            select(Conversation)
            .where(Conversation.deal_id == deal_id)
            .order_by(Conversation.last_message_at.desc(), Conversation.id)
        )
    )


async def messages_of(
    session: AsyncSession, conversation_ids: list[uuid.UUID], *, hidden: bool = False
) -> dict[uuid.UUID, list[ConversationMessage]]:
    """Each conversation's messages, oldest first (newest last, as a page shows them); those
    support hid only when ``hidden`` (the back office's and the dossier's view)."""
    result: dict[uuid.UUID, list[ConversationMessage]] = {c: [] for c in conversation_ids}
    if not conversation_ids:
        return result
    query = select(ConversationMessage).where(
        ConversationMessage.conversation_id.in_(conversation_ids)
    )
    if not hidden:
        query = query.where(ConversationMessage.hidden_at.is_(None))
    rows = await session.scalars(
        query.order_by(ConversationMessage.created_at, ConversationMessage.id)
    )
    for row in rows:
        result[row.conversation_id].append(row)
    return result


@dataclass(frozen=True)
class ConversationPage:
    """A page of a deal's conversations for its integration: each with every message (those
    support hid too, for the API to show as hidden) and its buyer's name where known."""

    conversations: list[Conversation]
    messages: dict[uuid.UUID, list[ConversationMessage]]
    buyer_names: dict[uuid.UUID, str | None]
    total_count: int


async def page_of_deal(
    session: AsyncSession, principal: Principal, deal_id: uuid.UUID, page_number: int, size: int
) -> ConversationPage:
    """A page of the caller's deal's conversations, the one with the latest message first;
    another integration's deal is NotFound, as the other deal reads answer."""
    deal = await deals.get(session, principal, deal_id)
    total = int(
        await session.scalar(
            select(func.count()).select_from(Conversation).where(Conversation.deal_id == deal.id)
        )
        or 0
    )
    offset = (page_number - 1) * size
    found: list[Conversation] = []
    if offset < total:
        found = list(
            await session.scalars(
                select(Conversation)
                .where(Conversation.deal_id == deal.id)
                .order_by(Conversation.last_message_at.desc(), Conversation.id)
                .offset(offset)
                .limit(size)
            )
        )
    messages = await messages_of(session, [c.id for c in found], hidden=True)
    names = await offers.buyer_names(session, [c.offer_link_id for c in found])
    return ConversationPage(found, messages, names, total)


async def _conversation_locked(
    session: AsyncSession, deal: Deal, link: OfferLink, now: datetime
) -> Conversation:
    """The link's conversation, made on the first message, row locked until the transaction
    ends: two messages racing are counted one after the other against the rate."""
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    seller_blocked = await session.scalar(
        select(func.max(Conversation.seller_blocked_at)).where(Conversation.deal_id == deal.id)
    )
    await session.execute(
        insert(Conversation)
        .values(
            id=uuid.uuid4(),
            deal_id=deal.id,
            integration_id=deal.integration_id,
            offer_link_id=link.id,
            created_at=now,
            last_message_at=now,
            seller_blocked_at=seller_blocked,  # a seller blocked on the deal is blocked here too
        )
        .on_conflict_do_nothing(index_elements=["deal_id", "offer_link_id"])
    )
    conversation = await session.scalar(
        select(Conversation)
        .where(Conversation.deal_id == deal.id, Conversation.offer_link_id == link.id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    assert conversation is not None
    return conversation


async def post(
    session: AsyncSession,
    deal: Deal,
    link: OfferLink,
    author: Party,
    text: str | None,
    settings: Settings,
    locale: str | None = None,
) -> ConversationMessage:
    """Write ``author``'s message in the conversation of ``deal`` and ``link``, in the
    caller's transaction (the deal's suspension is the caller's to check); a buyer's
    ``locale`` (their page's) is kept for their e-mail. Refused:
    ``FieldError`` for the text, ``BadRequest`` when the conversation takes no messages or
    the author is blocked, ``MessageRateExceeded`` past the hourly rate."""
    body = cleaned(text, settings)
    # Read before anything is locked (it is linear in the bounded text, but not free).
    warned = [] if is_paid(deal) else [w.value for w in warnings.found(body)]
    if link.deal_id != deal.id:
        raise NotFound(
            "No such conversation.", page_detail=_("There is no such conversation on this deal.")
        )
    if not open_for(deal, await is_winner(session, link, deal)):
        raise BadRequest(_("This conversation is closed: no more messages can be written."))
    conversation = await _conversation_locked(session, deal, link, clock.now())
    # Timed once the conversation is locked: a mail about it that committed before is older
    # than this message (and does not carry it), one that commits after it carries it.
    now = clock.now()
    blocked = (
        conversation.seller_blocked_at if author is Party.SELLER else conversation.buyer_blocked_at
    )
    if blocked is not None:
        raise BadRequest(_("Our support has stopped you writing messages on this deal."))
    await _within_rate(session, conversation, author, now, settings)
    message = ConversationMessage(
        id=uuid.uuid4(),
        conversation_id=conversation.id,
        deal_id=deal.id,
        author=author.value,
        body=body,
        warnings=warned,
        created_at=now,
    )
    session.add(message)
    conversation.last_message_at = now
    if author is Party.BUYER and locale is not None:
        conversation.buyer_locale = locale
    _schedule_mail(conversation, author.other, now, settings)
    await events.emit(
        session,
        deal.integration_id,
        EventKind.DEAL_MESSAGE,
        envelope.deal_message(
            deal_id=deal.id,
            conversation_id=conversation.id,
            offer_link_id=link.id,
            message_id=message.id,
            author=author.value,
            warnings=message.warnings,
            at=now,
        ),
        deal_id=deal.id,
    )
    await session.flush()
    return message


async def _within_rate(
    session: AsyncSession,
    conversation: Conversation,
    author: Party,
    now: datetime,
    settings: Settings,
) -> None:
    total = await session.scalar(
        select(func.count()).where(ConversationMessage.conversation_id == conversation.id)
    )
    if (total or 0) >= MAX_MESSAGES:
        raise BadRequest(
            _("This conversation is full. Write to our support if you need to say more.")
        )
    recent = list(
        await session.scalars(
            select(ConversationMessage.created_at)
            .where(
                ConversationMessage.conversation_id == conversation.id,
                ConversationMessage.author == author.value,
                ConversationMessage.created_at > now - RATE_WINDOW,
            )
            .order_by(ConversationMessage.created_at)
        )
    )
    if len(recent) >= settings.messages_per_hour:
        # Free again when the oldest message that counts leaves the window.
        oldest = recent[len(recent) - settings.messages_per_hour]
        raise MessageRateExceeded(max(1, math.ceil((oldest + RATE_WINDOW - now).total_seconds())))


# A mail waits this long after the message that makes it due (or the batch window, when that
# is shorter): a question is often written as a few messages in a row, told in one mail.
MAIL_GATHER = timedelta(minutes=1)


def _schedule_mail(
    conversation: Conversation, reader: Party, now: datetime, settings: Settings
) -> None:
    """Make the reader's next mail about this conversation due: shortly (``MAIL_GATHER``), and
    not before a batch window after the last one (a mail already due stays due when it was,
    and carries this message too): at most one mail per window, carrying what arrived since."""
    batch = timedelta(seconds=settings.message_mail_batch_seconds)
    soon = now + min(MAIL_GATHER, batch)
    if reader is Party.SELLER:
        if conversation.seller_mail_due_at is None:
            last = conversation.seller_mailed_at
            conversation.seller_mail_due_at = soon if last is None else max(soon, last + batch)
    elif conversation.buyer_mail_due_at is None:
        last = conversation.buyer_mailed_at
        conversation.buyer_mail_due_at = soon if last is None else max(soon, last + batch)


async def _message_of_deal(
    session: AsyncSession, deal_id: uuid.UUID, message_id: uuid.UUID, *, lock: bool = False
) -> ConversationMessage:
    query = select(ConversationMessage).where(
        ConversationMessage.id == message_id, ConversationMessage.deal_id == deal_id
    )
    if lock:
        query = query.with_for_update()
    found = await session.scalar(query)
    if found is None:
        raise NotFound(
            f"No message {message_id} on this deal.",
            page_detail=_("There is no such message on this deal."),
        )
    return found


async def report(
    session: AsyncSession,
    deal: Deal,
    reader: Party,
    message_id: uuid.UUID,
    reason: str | None,
    link: OfferLink | None = None,
) -> ConversationMessage:
    """``reader`` reports a message the other party wrote to them to support: the seller any
    buyer's message on their deal, a buyer (``link``) the seller's in their conversation. A
    second report of the same message changes nothing. Hidden messages cannot be reported (no
    one sees them)."""
    if reason is not None and len(reason) > MAX_REPORT_REASON:
        raise FieldError(
            "reason",
            _("This is too long (at most %(max)s characters).") % {"max": MAX_REPORT_REASON},
        )
    message = await _message_of_deal(session, deal.id, message_id, lock=True)
    if message.author == reader.value or message.hidden_at is not None:
        raise NotFound(f"No message {message_id} to report.", page_detail=_(GONE))
    if reader is Party.BUYER:
        conversation = None if link is None else await of_link(session, link)
        if conversation is None or conversation.id != message.conversation_id:
            raise NotFound(f"No message {message_id} to report.", page_detail=_(GONE))
    if message.reported_at is None:
        message.reported_at = clock.now()
        message.reported_by = reader.value
        message.report_reason = _CONTROL.sub("", reason or "").strip() or None
    return message


@dataclass(frozen=True)
class Report:
    """An open report in support's queue: the message, its conversation and its deal."""

    message: ConversationMessage
    conversation: Conversation


async def open_reports(session: AsyncSession, limit: int = 100) -> list[Report]:
    """Reports support has not dealt with yet, oldest first."""
    rows = await session.execute(
        select(ConversationMessage, Conversation)
        .join(Conversation, Conversation.id == ConversationMessage.conversation_id)
        .where(
            ConversationMessage.reported_at.is_not(None),
            ConversationMessage.report_closed_at.is_(None),
        )
        .order_by(ConversationMessage.reported_at)
        .limit(limit)
    )
    return [Report(message, conversation) for message, conversation in rows.all()]


async def count_open_reports(session: AsyncSession) -> int:
    """How many reports wait for support (the back office's home shows it)."""
    count = await session.scalar(
        select(func.count()).where(
            ConversationMessage.reported_at.is_not(None),
            ConversationMessage.report_closed_at.is_(None),
        )
    )
    return count or 0


async def hide(
    session: AsyncSession,
    deal_id: uuid.UUID,
    message_id: uuid.UUID,
    actor: audit.Actor,
    request_id: str | None = None,
) -> ConversationMessage:
    """Support hides a message from both parties (kept for the evidence), closing its report;
    recorded in the audit trail. Hiding a hidden message changes nothing and records nothing."""
    message = await _message_of_deal(session, deal_id, message_id, lock=True)
    if message.hidden_at is not None:
        return message
    now = clock.now()
    message.hidden_at, message.hidden_by = now, actor.label[:300]
    if message.reported_at is not None and message.report_closed_at is None:
        message.report_closed_at = now
    await audit.record(
        session,
        actor,
        "conversation.message_hidden",
        "deal",
        deal_id,
        before={"message": str(message_id), "hidden": False},
        after={"message": str(message_id), "hidden": True},
        request_id=request_id,
    )
    return message


async def dismiss_report(
    session: AsyncSession,
    deal_id: uuid.UUID,
    message_id: uuid.UUID,
    actor: audit.Actor,
    request_id: str | None = None,
) -> ConversationMessage:
    """Support leaves a reported message as it is and closes the report (audit trail)."""
    message = await _message_of_deal(session, deal_id, message_id, lock=True)
    if message.reported_at is None or message.report_closed_at is not None:
        return message
    message.report_closed_at = clock.now()
    await audit.record(
        session,
        actor,
        "conversation.report_dismissed",
        "deal",
        deal_id,
        before={"message": str(message_id), "report": "open"},
        after={"message": str(message_id), "report": "dismissed"},
        request_id=request_id,
    )
    return message


async def block(
    session: AsyncSession,
    deal_id: uuid.UUID,
    conversation_id: uuid.UUID,
    party: Party,
    actor: audit.Actor,
    *,
    blocked: bool = True,
    request_id: str | None = None,
) -> None:
    """Support stops ``party`` writing (or, ``blocked`` False, lets them write again): a buyer
    in their conversation, the seller in every conversation of the deal. Audit trail; a block
    that is already so records nothing."""
    conversation = await get(session, deal_id, conversation_id)
    # The deal's row first, as a party's message takes it (``parties.messaging``): a first
    # message on another link, making its conversation now, waits for this block and copies it.
    await session.execute(select(Deal.id).where(Deal.id == deal_id).with_for_update())
    column = (
        Conversation.seller_blocked_at if party is Party.SELLER else Conversation.buyer_blocked_at
    )
    where = (
        Conversation.deal_id == deal_id
        if party is Party.SELLER
        else Conversation.id == conversation.id
    )
    state = column.is_(None) if blocked else column.is_not(None)
    changed = await session.execute(
        update(Conversation)
        .where(and_(where, state))
        .values({column.key: clock.now() if blocked else None})
        .execution_options(synchronize_session=False)
    )
    if not changed.rowcount:  # type: ignore[attr-defined]
        return
    await audit.record(
        session,
        actor,
        "conversation.party_blocked" if blocked else "conversation.party_unblocked",
        "deal",
        deal_id,
        before={"conversation": str(conversation_id), "party": party.value, "blocked": not blocked},
        after={"conversation": str(conversation_id), "party": party.value, "blocked": blocked},
        request_id=request_id,
    )


async def unanswered(
    session: AsyncSession,
    deal_id: uuid.UUID,
    reader: Party,
    offer_link_id: uuid.UUID | None = None,
) -> int:
    """How many of the deal's conversations (or, with ``offer_link_id``, of that link's one)
    end on a visible message of the other party: the questions ``reader`` has not answered (for
    reminders and the pages)."""
    scope = [ConversationMessage.deal_id == deal_id, ConversationMessage.hidden_at.is_(None)]
    if offer_link_id is not None:
        scope.append(
            ConversationMessage.conversation_id.in_(
                select(Conversation.id).where(
                    Conversation.deal_id == deal_id, Conversation.offer_link_id == offer_link_id
                )
            )
        )
    latest = (
        select(
            ConversationMessage.conversation_id,
            func.max(ConversationMessage.created_at).label("at"),
        )
        .where(*scope)
        .group_by(ConversationMessage.conversation_id)
        .subquery()
    )
    count = await session.scalar(
        select(func.count(func.distinct(ConversationMessage.conversation_id)))
        .join(
            latest,
            and_(
                latest.c.conversation_id == ConversationMessage.conversation_id,
                latest.c.at == ConversationMessage.created_at,
            ),
        )
        .where(
            ConversationMessage.hidden_at.is_(None),
            ConversationMessage.author == reader.other.value,
        )
    )
    return count or 0


async def waiting(session: AsyncSession, deal: Deal, reader: Party) -> int:
    """The questions ``reader`` can answer now (``unanswered`` in the conversations that take
    messages): before an approval every buyer's, after it the approved buyer's alone, none once
    the deal has ended (for the reminders and the messages that mention them)."""
    if DealStatus(deal.status) in FINAL_STATUSES:
        return 0
    if deal.buyer_user_id is None:
        return await unanswered(session, deal.id, reader)
    approved = [
        o for o in await offers.offers_of(session, deal) if o.status == OfferStatus.APPROVED
    ]
    if not approved or approved[0].offer_link_id is None:
        return 0
    return await unanswered(session, deal.id, reader, approved[0].offer_link_id)
