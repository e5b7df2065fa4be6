"""Sellers and buyers: one user per email within an integration."""

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class User(Base):
    __tablename__ = "users"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("integrations.id"))
    email: Mapped[str] = mapped_column(String(254))
    name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        UniqueConstraint("integration_id", "email"),
        # The back office's deal search by e-mail, across integrations.
        Index("ix_users_email", "email"),
    )
