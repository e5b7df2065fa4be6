"""deal event sequence

Each event about a deal carries its place among that deal's events (1, 2, 3, ...), so a
receiver can put back in order what at-least-once delivery mixes: the deal counts the events it
has emitted, and each event keeps its number. Events emitted before this revision are numbered
here in the order they were emitted.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23 15:45:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.add_columns(
        "deals", sa.Column("events_emitted", sa.Integer(), server_default="0", nullable=False)
    )
    ddl.add_columns("events", sa.Column("deal_sequence", sa.Integer(), nullable=True))
    op.execute(
        """
        UPDATE events SET deal_sequence = (
            SELECT COUNT(*) FROM events AS earlier
            WHERE earlier.deal_id = events.deal_id AND earlier.seq <= events.seq
        )
        WHERE deal_id IS NOT NULL
        """
    )
    op.execute(
        """
        UPDATE deals SET events_emitted = (
            SELECT COUNT(*) FROM events WHERE events.deal_id = deals.id
        )
        """
    )
    ddl.create_index("events", "ux_events_deal_sequence", ["deal_id", "deal_sequence"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("events", schema=None) as batch_op:
        batch_op.drop_index("ux_events_deal_sequence")
        batch_op.drop_column("deal_sequence")
    ddl.drop_columns("deals", "events_emitted")
