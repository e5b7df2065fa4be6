"""Payments (the buyer's money in escrow, then paid out or refunded) and payout accounts."""

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class Payment(Base):
    """One attempt by the buyer to pay for a deal. Amount and fee are fixed when it is created:
    the seller's payout is exactly ``amount_minor - fee_minor``; a refund returns the amount."""

    __tablename__ = "payments"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("deals.id", ondelete="CASCADE"), index=True
    )
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    amount_minor: Mapped[int] = mapped_column(BigInteger)
    fee_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    status: Mapped[str] = mapped_column(String(20))
    provider: Mapped[str] = mapped_column(String(20))
    # What the provider calls it; for the simulated provider, the hash of the test page's token.
    provider_ref: Mapped[str] = mapped_column(String(100), unique=True)
    refunded_minor: Mapped[int] = mapped_column(BigInteger)
    paid_out_minor: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class PayoutAccount(Base):
    """Where a seller (a user) is paid: an IBAN or a domestic account number, validated."""

    __tablename__ = "payout_accounts"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("users.id"))
    kind: Mapped[str] = mapped_column(String(10))  # "iban" or "account"
    number: Mapped[str] = mapped_column(String(40))
    holder: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (UniqueConstraint("user_id"),)
