"""A decision waiting for a second operator (four eyes)."""

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class DisputeProposal(Base):
    """A dispute decision on a deal above ``dispute_four_eyes_minor``, proposed by one operator
    and executed only when another approves it. ``status``: pending, then approved or
    rejected, once (the change is a conditional update: two approvals racing, one wins)."""

    __tablename__ = "dispute_proposals"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    outcome: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    return_address: Mapped[str | None] = mapped_column(Text)
    # The deal's price when proposed, as the approver reads it.
    amount_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    status: Mapped[str] = mapped_column(String(10))
    proposed_by: Mapped[str] = mapped_column(String(300))
    proposer_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    proposed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    decided_by: Mapped[str | None] = mapped_column(String(300))
    decider_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_dispute_proposals_deal", "deal_id", "status"),)
