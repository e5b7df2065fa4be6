"""A deal's parcels at a carrier, and the carrier events already taken."""

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime

# The statuses in which the parcel job still has work: a booking or a cancel to make.
BOOKING = "booking"
BOOKED = "booked"
FAILED = "failed"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
JOB_PENDING = f"status IN ('{BOOKING}', '{CANCELLING}')"
# Booked parcels the carrier has not finished with: followed (polled, reminded, counted lost).
FOLLOWED = f"status = '{BOOKED}' AND finished_at IS NULL"


class Parcel(Base):
    """One parcel booked (or being booked) at the deployment's carrier for a deal: the item to
    the buyer (``outbound``), or back to the seller in a return then refund (``return``).

    The row is written before the carrier is called, with ``reference`` (our id, which the
    carrier keeps with the booking): the parcel job books it outside any transaction and
    repeats a booking whose outcome it does not know with the same reference, so the carrier
    makes one parcel however often it is asked."""

    __tablename__ = "parcels"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    kind: Mapped[str] = mapped_column(String(10))  # outbound | return
    carrier: Mapped[str] = mapped_column(String(20))
    size: Mapped[str] = mapped_column(String(10))
    delivery: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(12))
    reference: Mapped[str] = mapped_column(String(35), unique=True)
    service: Mapped[str | None] = mapped_column(String(40))
    shipment_id: Mapped[str | None] = mapped_column(String(100))
    tracking_number: Mapped[str | None] = mapped_column(String(100))
    tracking_url: Mapped[str | None] = mapped_column(String(500))
    qr_code: Mapped[str | None] = mapped_column(String(500))
    qr_png: Mapped[bytes | None] = mapped_column(LargeBinary)  # the carrier's own QR image
    label_pdf: Mapped[bytes | None] = mapped_column(LargeBinary)
    # What the carrier charges for it (minor units); for a return, what the service pays.
    price_minor: Mapped[int | None] = mapped_column(BigInteger)
    # The job's bookkeeping: tries made, when the next is due, why the last one failed (for
    # the log and the operator; the pages word the parcel's status instead).
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    leased_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(String(500))
    # Whether the seller has been told the booking is delayed (once), and reminded to drop the
    # parcel off (once).
    delay_told_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reminded_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The carrier's last event, and when we last asked the carrier (the fallback to pushes).
    last_event: Mapped[str | None] = mapped_column(String(20))
    last_event_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    polled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    booked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Set when the carrier is done with it (delivered, returned, lost): no longer followed.
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_parcels_deal", "deal_id", "created_at"),
        Index("ix_parcels_shipment", "carrier", "shipment_id"),
        Index(
            "ix_parcels_job",
            "next_attempt_at",
            postgresql_where=text(JOB_PENDING),
            sqlite_where=text(JOB_PENDING),
        ),
        Index(
            "ix_parcels_followed",
            "booked_at",
            postgresql_where=text(FOLLOWED),
            sqlite_where=text(FOLLOWED),
        ),
    )


class ParcelEventSeen(Base):
    """A carrier event taken already: carriers push at least once, and polling finds what was
    pushed, so an event (its carrier's id) is applied once. Written in the transaction that
    applies it; goes with its parcel."""

    __tablename__ = "parcel_events_seen"

    carrier: Mapped[str] = mapped_column(String(20), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    parcel_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("parcels.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(20))
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime)
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
