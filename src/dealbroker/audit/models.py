"""The audit trail's table. Rows are only ever added: the ORM refuses to change or delete one
(``audit.service``), and on PostgreSQL a trigger refuses it too (migration 0021)."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class AuditRecord(Base):
    __tablename__ = "audit_records"

    # Increasing: the trail's order, newest first by id (SQLite numbers only INTEGER keys).
    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    # "operator:<email>" in the back office, "member:<email>" in the developer portal,
    # "system:<unix user>" for the CLI.
    actor: Mapped[str] = mapped_column(String(300))
    operator_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)
    action: Mapped[str] = mapped_column(String(80))
    target_type: Mapped[str] = mapped_column(String(40))
    target_id: Mapped[str] = mapped_column(String(200))
    before: Mapped[Any] = mapped_column(JSON, nullable=True)
    after: Mapped[Any] = mapped_column(JSON, nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    # The integration the action was on (its secrets, its members, a member's login): its
    # owners read these rows in the developer portal. None for the rest.
    integration_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, nullable=True)

    __table_args__ = (
        Index("ix_audit_records_target", "target_type", "target_id"),
        Index("ix_audit_records_integration", "integration_id", "id"),
    )
