"""Operators, their one-time login links and their back office sessions.

Links and sessions are random 256-bit tokens stored only as their SHA-256 (``core.security``):
a copy of the database logs nobody in.
"""

import uuid
from datetime import datetime

from sqlalchemy import JSON, Boolean, ForeignKey, Index, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.login import LinkColumns, SessionColumns
from dealbroker.core.types import UTCDateTime

# What each role may do: support decides disputes and reads deals; finance runs payouts,
# reconciliation and refunds; admin manages integrations, webhooks and the operators.
ROLES = ("support", "finance", "admin")


class Operator(Base):
    __tablename__ = "operators"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    email: Mapped[str] = mapped_column(String(254))
    # The address lower-cased: unique, so Ann@x and ann@x are one operator.
    email_key: Mapped[str] = mapped_column(String(254), unique=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    roles: Mapped[list[str]] = mapped_column(JSON)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class OperatorLoginLink(LinkColumns, Base):
    """A one-time link printed by ``dealbroker operators login-link``: valid for minutes, used
    once (``core.login``)."""

    __tablename__ = "operator_login_links"

    operator_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("operators.id", ondelete="CASCADE"), index=True
    )


class OperatorSession(SessionColumns, Base):
    """A logged-in back office browser (``core.login``: its timeouts and fresh login)."""

    __tablename__ = "operator_sessions"

    operator_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("operators.id", ondelete="CASCADE"), index=True
    )

    __table_args__ = (Index("ix_operator_sessions_expires_at", "expires_at"),)
