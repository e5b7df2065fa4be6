"""Deals, their status history and the per-integration deal counters."""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    Row,
    String,
    Text,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.statuses import DealStatus
from dealbroker.core.types import UTCDateTime, enum_column
from dealbroker.deals import lifecycle
from dealbroker.payments.escrow import Escrow


class Deal(Base):
    __tablename__ = "deals"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("integrations.id"))
    name: Mapped[str | None] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    price_minor: Mapped[int | None] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    images: Mapped[list[str]] = mapped_column(JSON)
    package_type: Mapped[str | None] = mapped_column(String(10))
    status: Mapped[DealStatus] = mapped_column(enum_column(DealStatus, 32))
    seller: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    payment_status: Mapped[str | None] = mapped_column(String(32))
    seller_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    buyer_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    # Set when the seller approves an offer: ``Carrier`` or ``Pickup``.
    shipping_type: Mapped[str | None] = mapped_column(String(10))
    # What the winning buyer gave when signing: name, phone and, for Carrier, the delivery
    # address. Shown to the seller only once the buyer has paid.
    buyer_contact: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # What the seller gave when handing a Carrier deal over: carrier and tracking number.
    shipment: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Pickup: the code the buyer's page shows and the seller enters to confirm the handover,
    # and how many wrong codes were entered (a few at most: it must not be guessed).
    handover_code: Mapped[str | None] = mapped_column(String(6))
    handover_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The seller's asking price while an offer is approved (``price_minor`` is then the offer's):
    # given back when the approval lapses. None while no offer is approved.
    asking_price_minor: Mapped[int | None] = mapped_column(BigInteger)
    # The approved offer's shipping price (its Carrier quote), carried with its price; cleared
    # when the approval lapses. None without one: no carrier, Pickup, or no offer approved.
    shipping_minor: Mapped[int | None] = mapped_column(BigInteger)
    # Why the buyer opened a dispute, in their words: shown to both parties and the operator.
    dispute_reason: Mapped[str | None] = mapped_column(Text)
    # Disputes decided on evidence: when the operator decides the open dispute by (set as it
    # opens, ``dispute_decision_business_days`` business days on), and why they decided as they
    # did (the reason sent to both parties with the decision; None without one).
    decide_by: Mapped[datetime | None] = mapped_column(UTCDateTime)
    decision_reason: Mapped[str | None] = mapped_column(Text)
    # Return then refund (``deals.returns``): the seller's return address the operator gave
    # with the decision, then the buyer's carrier and tracking number and when they sent it.
    # None unless the operator decided a return; the deal stays in its dispute status meanwhile.
    dispute_return: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The sandbox: how far this deal's own test clock has been moved ahead (seconds), on top of
    # its integration's ``clock_offset_seconds``. Moving it brings the deal's deadlines closer
    # (``deals.flows.advance_deal_clock``); 0 for a deal whose clock was never moved.
    clock_offset_seconds: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The language the seller reads their messages in: that of the page they last acted on
    # (None until then: the deployment's default).
    seller_locale: Mapped[str | None] = mapped_column(String(5))
    # How many events this deal has emitted: the last one's ``deal_sequence``. 1 when created
    # (``repository.add`` writes the first event with it), then counted by
    # ``events.service.emit`` with one UPDATE that also locks the row (never through the ORM,
    # so it does not bump ``version``).
    events_emitted: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Optimistic lock: every UPDATE checks and bumps it, so two racing changes cannot both win.
    version: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __mapper_args__ = {"version_id_col": version}
    __table_args__ = (
        # Serves "this integration's deals, newest first" without sorting.
        Index("ix_deals_integration_created", "integration_id", "created_at", "id"),
        # The back office's deal search by the buyer's e-mail (through ``users``); by the
        # seller's, it reads ``ix_deals_seller_email`` on the lower-cased e-mail in ``seller``
        # (an expression each backend spells its own way: migration 0022).
        Index("ix_deals_buyer_user_id", "buyer_user_id"),
    )

    @property
    def escrow(self) -> Escrow:
        """What the deal lets escrow do with the buyer's money now (payments reads this)."""
        return lifecycle.escrow(DealStatus(self.status))


@dataclass(slots=True)
class NewDeal:
    """A deal being created (``deals.service.create``): the values its row is inserted with
    (``deals.repository.add``; the other columns start empty), under ``Deal``'s attribute
    names, which is all rendering it reads. Not an ORM object: building one costs a fraction
    of a ``Deal``'s construction, and nothing but the insert's statement stores it."""

    id: uuid.UUID
    integration_id: uuid.UUID
    name: str | None
    description: str | None
    price_minor: int | None
    currency: str
    images: list[str]
    package_type: str | None
    status: DealStatus
    seller: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime
    seller_user_id: uuid.UUID | None = None  # set when stored: the seller's user, if any
    payment_status: None = None
    buyer_user_id: None = None
    shipping_minor: None = None
    shipment: None = None


# What renders a deal (``deals.schemas.deal_out``, ``deals.actions.allowed_actions``) reads: a
# ``Deal``, a row of the read queries (``deals.repository``) with the same attribute names, or
# a deal just created.
DealFields = Deal | Row[Any] | NewDeal


class DealStatusChange(Base):
    """One row per status change: who moved the deal from where to where, and when."""

    __tablename__ = "deal_status_history"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    from_status: Mapped[str | None] = mapped_column(String(32))
    to_status: Mapped[str] = mapped_column(String(32))
    trigger: Mapped[str] = mapped_column(String(64))
    actor: Mapped[str] = mapped_column(String(32))
    # The deal's version after the change: orders changes made within one instant.
    deal_version: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_deal_status_history_deal", "deal_id", "created_at"),)


class DealCounter(Base):
    """Deal counts per integration, spread over slots so concurrent creates rarely contend.

    The exact total is the sum of an integration's slots: a read of at most ``SLOTS`` rows,
    whatever the number of deals, where ``COUNT(*)`` would scan them all.
    """

    __tablename__ = "deal_counters"

    SLOTS = 8

    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    slot: Mapped[int] = mapped_column(Integer, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)


REMIND_PENDING = "remind_at IS NOT NULL AND reminded_at IS NULL"


class DealTimer(Base):
    """A deadline on a deal (7 days to ship or pick up, the transit deadline, 24 hours to
    review). The worker fires a due timer once: in one transaction it applies the timer's
    transition, if still legal, and sets ``fired_at``; a timer whose deal has moved on is closed
    without a change."""

    __tablename__ = "deal_timers"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("deals.id", ondelete="CASCADE"), index=True
    )
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    trigger: Mapped[str] = mapped_column(String(64))
    due_at: Mapped[datetime] = mapped_column(UTCDateTime)
    fired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    outcome: Mapped[str | None] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The reminder to the party who must act (``notifications.reminders``): when it is due
    # (``due_at`` less the lead time; empty when the deadline was set shorter than that, as the
    # message of the change that set it names the deadline already), and when it was handled,
    # sent or skipped (``reminded_at``, set in the transaction that wrote the message).
    remind_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reminded_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index(
            "ix_deal_timers_due",
            "due_at",
            postgresql_where=text("fired_at IS NULL"),
            sqlite_where=text("fired_at IS NULL"),
        ),
        Index(
            "ix_deal_timers_remind",
            "remind_at",
            postgresql_where=text(REMIND_PENDING),
            sqlite_where=text(REMIND_PENDING),
        ),
    )
