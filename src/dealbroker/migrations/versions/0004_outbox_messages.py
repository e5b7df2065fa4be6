"""outbox messages

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 19:31:56.384127
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "outbox_messages",
        ddl.uuid_column("id"),
        ddl.uuid_column("integration_id"),
        ddl.uuid_column("deal_id"),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("to_email", sa.String(length=254), nullable=False),
        sa.Column("subject", sa.String(length=200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        ddl.time_column("created_at"),
        ddl.cascade("deal_id", "deals.id"),
    )
    ddl.create_index("outbox_messages", "ix_outbox_messages_deal", ["deal_id", "created_at"])


def downgrade() -> None:
    ddl.drop_indexes("outbox_messages", "ix_outbox_messages_deal")

    op.drop_table("outbox_messages")
