"""handover details

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 12:41:14.941357
"""

from collections.abc import Sequence

import sqlalchemy as sa

from dealbroker.migrations import ddl

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.add_columns(
        "deals",
        sa.Column("buyer_contact", sa.JSON(), nullable=True),
        sa.Column("shipment", sa.JSON(), nullable=True),
        sa.Column("handover_code", sa.String(length=6), nullable=True),
        sa.Column("handover_attempts", sa.Integer(), server_default="0", nullable=False),
    )


def downgrade() -> None:
    ddl.drop_columns("deals", "handover_attempts", "handover_code", "shipment", "buyer_contact")
