"""Messages to sellers and buyers, kept in an outbox: written in the transaction of the change
they report, sent by e-mail afterwards by the worker, and shown by the sandbox's mailbox."""

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Index, Integer, String, Text, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class OutboxMessage(Base):
    __tablename__ = "outbox_messages"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    # None for a message about no deal (a developer portal login link).
    deal_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("deals.id", ondelete="CASCADE"), nullable=True
    )
    kind: Mapped[str] = mapped_column(String(40))
    to_email: Mapped[str] = mapped_column(String(254))
    subject: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Sending by e-mail: when it went out; how often it was tried; when to try next (also the
    # lease of the worker trying it now). ``next_attempt_at`` is empty once the message is sent
    # or given up, so the due index holds only messages still to send.
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer, server_default="0")
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(String(500))

    __table_args__ = (
        Index("ix_outbox_messages_deal", "deal_id", "created_at"),
        Index(
            "ix_outbox_messages_due",
            "next_attempt_at",
            postgresql_where=text("next_attempt_at IS NOT NULL"),
            sqlite_where=text("next_attempt_at IS NOT NULL"),
        ),
        # The retention purge's scan: sent messages only, oldest first.
        Index(
            "ix_outbox_messages_sent",
            "sent_at",
            postgresql_where=text("sent_at IS NOT NULL"),
            sqlite_where=text("sent_at IS NOT NULL"),
        ),
    )
