"""outbox sending

Messages in the outbox are now sent by e-mail by the worker: when each was sent, how often it was
tried, when to try next, and the last error. Messages written before this revision get no next
attempt: they were never meant to be mailed, and news that old would mislead.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 12:47:23.405286
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("outbox_messages", schema=None) as batch_op:
        batch_op.add_column(ddl.time_column("sent_at", nullable=True))
        batch_op.add_column(sa.Column("attempts", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(ddl.time_column("next_attempt_at", nullable=True))
        batch_op.add_column(sa.Column("last_error", sa.String(length=500), nullable=True))
        batch_op.create_index(
            "ix_outbox_messages_due",
            ["next_attempt_at"],
            unique=False,
            postgresql_where=sa.text("next_attempt_at IS NOT NULL"),
            sqlite_where=sa.text("next_attempt_at IS NOT NULL"),
        )


def downgrade() -> None:
    with op.batch_alter_table("outbox_messages", schema=None) as batch_op:
        batch_op.drop_index(
            "ix_outbox_messages_due",
            postgresql_where=sa.text("next_attempt_at IS NOT NULL"),
            sqlite_where=sa.text("next_attempt_at IS NOT NULL"),
        )
        batch_op.drop_column("last_error")
        batch_op.drop_column("next_attempt_at")
        batch_op.drop_column("attempts")
        batch_op.drop_column("sent_at")
