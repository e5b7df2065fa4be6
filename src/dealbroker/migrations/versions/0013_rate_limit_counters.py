"""rate limit counters

The requests each key (an integration, a client id's failed token requests) made in a one-minute
window, summed over every server process, so a rate limit holds across processes on PostgreSQL.
Rows of past windows are deleted by the processes as they sync.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-23 18:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "rate_limit_counters",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("window", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        key=(
            "key",
            "window",
        ),
    )


def downgrade() -> None:
    op.drop_table("rate_limit_counters")
