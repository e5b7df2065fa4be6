"""provider calls

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 11:50:36.043024
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "provider_calls",
        ddl.uuid_column("id"),
        ddl.uuid_column("payment_id"),
        ddl.uuid_column("deal_id"),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        ddl.uuid_column("account_id", nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        ddl.time_column("next_attempt_at"),
        sa.Column("error", sa.String(length=500), nullable=True),
        ddl.time_column("created_at"),
        ddl.time_column("finished_at", nullable=True),
        ddl.cascade("payment_id", "payments.id"),
    )
    ddl.create_index(
        "provider_calls", "ix_provider_calls_due", ["next_attempt_at"], where="status = 'pending'"
    )
    ddl.create_index("provider_calls", "ix_provider_calls_payment_id", ["payment_id"])


def downgrade() -> None:
    ddl.drop_indexes("provider_calls", "ix_provider_calls_payment_id", "ix_provider_calls_due")

    op.drop_table("provider_calls")
