"""deal timer reminders

A reminder goes to the party who must act a set time before each deadline, exactly once: the
timer row says when it is due (``remind_at``) and when it was handled (``reminded_at``), the
latter written in the transaction that writes the message. Timers set before this revision get
no ``remind_at``, so no reminder: their parties were told the deadline when it was set.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 19:40:00.000000
"""

from collections.abc import Sequence

from alembic import op

from dealbroker.migrations import ddl

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = "remind_at IS NOT NULL AND reminded_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("deal_timers") as batch:
        batch.add_column(ddl.time_column("remind_at", nullable=True))
        batch.add_column(ddl.time_column("reminded_at", nullable=True))
    ddl.create_index("deal_timers", "ix_deal_timers_remind", ["remind_at"], where=PENDING)


def downgrade() -> None:
    op.drop_index("ix_deal_timers_remind", table_name="deal_timers")
    with op.batch_alter_table("deal_timers") as batch:
        batch.drop_column("reminded_at")
        batch.drop_column("remind_at")
