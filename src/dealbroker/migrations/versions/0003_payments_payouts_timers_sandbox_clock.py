"""payments, payouts, timers, sandbox clock

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 19:22:16.788572
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_deal_table(
        "deal_timers",
        sa.Column("trigger", sa.String(length=64), nullable=False),
        ddl.time_column("due_at"),
        ddl.time_column("fired_at", nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        ddl.time_column("created_at"),
    )
    ddl.create_index("deal_timers", "ix_deal_timers_deal_id", ["deal_id"])
    ddl.create_index("deal_timers", "ix_deal_timers_due", ["due_at"], where="fired_at IS NULL")

    ddl.create_deal_table(
        "payments",
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("fee_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("provider", sa.String(length=20), nullable=False),
        sa.Column("provider_ref", sa.String(length=100), nullable=False),
        sa.Column("refunded_minor", sa.BigInteger(), nullable=False),
        sa.Column("paid_out_minor", sa.BigInteger(), nullable=False),
        ddl.time_column("created_at"),
        ddl.time_column("updated_at"),
        unique=["provider_ref"],
    )
    ddl.create_index("payments", "ix_payments_deal_id", ["deal_id"])

    ddl.create_table(
        "payout_accounts",
        ddl.uuid_column("id"),
        ddl.uuid_column("user_id"),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("number", sa.String(length=40), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        ddl.time_column("created_at"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_payout_accounts_user_id_users")
        ),
        sa.UniqueConstraint("user_id", name=op.f("uq_payout_accounts_user_id")),
    )
    ddl.add_columns(
        "deal_status_history",
        sa.Column("deal_version", sa.Integer(), server_default="0", nullable=False),
    )

    ddl.add_columns(
        "integrations",
        sa.Column("clock_offset_seconds", sa.BigInteger(), server_default="0", nullable=False),
    )


def downgrade() -> None:
    ddl.drop_columns("integrations", "clock_offset_seconds")

    ddl.drop_columns("deal_status_history", "deal_version")

    op.drop_table("payout_accounts")
    ddl.drop_indexes("payments", "ix_payments_deal_id")

    op.drop_table("payments")
    ddl.drop_indexes("deal_timers", "ix_deal_timers_due", "ix_deal_timers_deal_id")

    op.drop_table("deal_timers")
