"""dispute decisions: the decision date, the decision's reason, a return then refund

A dispute is decided by a date counted in business days from its opening (``decide_by``); the
operator's reason is kept with the decision (``decision_reason``); a decision to have the item
sent back before the refund keeps the return address, then the buyer's carrier and tracking
number (``dispute_return``). All empty on existing deals: a dispute opened before this revision
has no decision date (``disputes list`` lists it first).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 22:05:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa

from dealbroker.migrations import ddl

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.add_columns(
        "deals",
        ddl.time_column("decide_by", nullable=True),
        sa.Column("decision_reason", sa.Text(), nullable=True),
        sa.Column("dispute_return", sa.JSON(), nullable=True),
    )


def downgrade() -> None:
    ddl.drop_columns("deals", "dispute_return", "decision_reason", "decide_by")
