"""dispute reason

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 12:56:34.944249
"""

from collections.abc import Sequence

import sqlalchemy as sa

from dealbroker.migrations import ddl

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.add_columns("deals", sa.Column("dispute_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    ddl.drop_columns("deals", "dispute_reason")
