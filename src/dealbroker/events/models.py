"""The transactional outbox: events, webhook endpoints, deliveries and their attempts.

An event row is written in the same transaction as the change that causes it, together with
one delivery row per subscribed endpoint. The worker sends deliveries after commit.
"""

import uuid
from datetime import datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime

# SQLite only auto-increments an INTEGER PRIMARY KEY, PostgreSQL wants BIGINT for a long life.
Sequence64 = BigInteger().with_variant(Integer, "sqlite")


class Event(Base):
    __tablename__ = "events"

    # Order of emission, for the events API's cursor; the public id is ``id``.
    seq: Mapped[int] = mapped_column(Sequence64, primary_key=True, autoincrement=True)
    id: Mapped[uuid.UUID] = mapped_column(Uuid, unique=True)
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    deal_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    kind: Mapped[str] = mapped_column(String(40))
    # Its place among its deal's events (1, 2, ...); None for an event about no deal.
    deal_sequence: Mapped[int | None] = mapped_column(Integer)
    # The envelope exactly as sent, serialised once: every attempt sends the same bytes.
    payload: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_events_integration_seq", "integration_id", "seq"),
        Index("ix_events_integration_kind_seq", "integration_id", "kind", "seq"),
        Index("ix_events_deal_seq", "deal_id", "seq"),
        Index("ux_events_deal_sequence", "deal_id", "deal_sequence", unique=True),
        # The retention purge's scan, oldest first.
        Index("ix_events_created_at", "created_at"),
    )


class WebhookEndpoint(Base):
    __tablename__ = "webhook_endpoints"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    integration_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("integrations.id"), index=True
    )
    url: Mapped[str] = mapped_column(String(2048))
    description: Mapped[str | None] = mapped_column(String(500))
    # Event kinds this endpoint receives; ``None`` means all of them.
    event_kinds: Mapped[list[str] | None] = mapped_column(JSON)
    enabled: Mapped[bool] = mapped_column(Boolean)
    disabled_reason: Mapped[str | None] = mapped_column(String(300))
    # Start of the current run of failures; cleared by any success.
    failing_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Delivery(Base):
    """One event to one endpoint. ``pending`` until a 2xx (``succeeded``) or the retry schedule
    runs out (``failed``). A worker claims a due delivery by pushing ``next_attempt_at`` forward
    by its lease, so a worker that dies mid-send leaves it due again when the lease ends."""

    __tablename__ = "deliveries"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    event_seq: Mapped[int] = mapped_column(
        Sequence64, ForeignKey("events.seq", ondelete="CASCADE"), index=True
    )
    endpoint_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("webhook_endpoints.id", ondelete="CASCADE")
    )
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    status: Mapped[str] = mapped_column(String(10))
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        # The worker's claim: due pending deliveries, oldest first; small because it only
        # holds pending rows on PostgreSQL.
        Index(
            "ix_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
        Index("ix_deliveries_endpoint_created", "endpoint_id", "created_at"),
    )


class DeliveryAttempt(Base):
    __tablename__ = "delivery_attempts"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    delivery_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("deliveries.id", ondelete="CASCADE"), index=True
    )
    endpoint_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    event_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    attempted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    success: Mapped[bool] = mapped_column(Boolean)
    status_code: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(500))
    response_excerpt: Mapped[str | None] = mapped_column(Text)
    # The headers as sent (signature included, never a secret), as a JSON object; the body as
    # sent is the event's payload. None for attempts recorded before they were kept.
    request_headers: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_delivery_attempts_endpoint", "endpoint_id", "attempted_at"),)
