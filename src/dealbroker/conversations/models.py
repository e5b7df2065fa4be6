"""A conversation per deal and offer link, and its messages.

One conversation joins the seller of a deal and whoever holds one of its offer links (the
buyer): it starts with the first message either writes, and it is the same conversation before
the offer, after it and, for the approved buyer, after the approval. Messages are plain text,
never changed by their author; support may hide one (``hidden_at``), which keeps it for the
dispute's evidence and the audit trail but shows it to neither party any more.
"""

import uuid
from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, String, Text, UniqueConstraint, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class Conversation(Base):
    __tablename__ = "conversations"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    offer_link_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("offer_links.id", ondelete="CASCADE")
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_message_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # E-mail to each party, batched: when the next mail about this conversation is due (None:
    # nothing waits to be told), and when the last one was written; messages of the other party
    # after ``*_mailed_at`` are what the next mail carries.
    seller_mail_due_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    seller_mailed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    buyer_mail_due_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    buyer_mailed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Support stopped this party writing here (and, for the seller, on every conversation of
    # the deal): when, and who (the audit trail's actor label).
    seller_blocked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    buyer_blocked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The language of the page the buyer last wrote on: their e-mail's, before they have made an
    # offer (an offer's own ``locale`` wins after).
    buyer_locale: Mapped[str | None] = mapped_column(String(5))

    __table_args__ = (
        UniqueConstraint("deal_id", "offer_link_id"),
        Index("ix_conversations_offer_link", "offer_link_id"),
        # The retention purge's scan, oldest first.
        Index("ix_conversations_last_message_at", "last_message_at"),
        # The mail job's scans: only conversations with a mail to write.
        Index(
            "ix_conversations_seller_mail_due",
            "seller_mail_due_at",
            postgresql_where=text("seller_mail_due_at IS NOT NULL"),
            sqlite_where=text("seller_mail_due_at IS NOT NULL"),
        ),
        Index(
            "ix_conversations_buyer_mail_due",
            "buyer_mail_due_at",
            postgresql_where=text("buyer_mail_due_at IS NOT NULL"),
            sqlite_where=text("buyer_mail_due_at IS NOT NULL"),
        ),
    )


class ConversationMessage(Base):
    __tablename__ = "conversation_messages"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    conversation_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("conversations.id", ondelete="CASCADE")
    )
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    author: Mapped[str] = mapped_column(String(10))  # "seller" or "buyer"
    body: Mapped[str] = mapped_column(Text)
    # What the reader is warned about (``warnings.Warning`` values): found in a message written
    # before the deal was paid; empty after, when contact details are the handover's.
    warnings: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Reported by the other party to support, with their reason; ``report_closed_at`` once
    # support has dealt with it (hidden or left), so the queue holds open reports only.
    reported_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reported_by: Mapped[str | None] = mapped_column(String(10))
    report_reason: Mapped[str | None] = mapped_column(String(500))
    report_closed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    hidden_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    hidden_by: Mapped[str | None] = mapped_column(String(300))

    __table_args__ = (
        Index("ix_conversation_messages_conversation", "conversation_id", "created_at"),
        Index("ix_conversation_messages_deal", "deal_id", "created_at"),
        # Support's queue: open reports, oldest first.
        Index(
            "ix_conversation_messages_reported",
            "reported_at",
            postgresql_where=text("reported_at IS NOT NULL AND report_closed_at IS NULL"),
            sqlite_where=text("reported_at IS NOT NULL AND report_closed_at IS NULL"),
        ),
    )
