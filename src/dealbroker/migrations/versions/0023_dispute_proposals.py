"""dispute proposals: four eyes on large dispute decisions

A decision on a deal priced above ``DEALBROKER_DISPUTE_FOUR_EYES_MINOR`` is kept here as a
proposal until a second operator approves (executes) or rejects it.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27 01:50:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_deal_table(
        "dispute_proposals",
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("return_address", sa.Text(), nullable=True),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("proposed_by", sa.String(length=300), nullable=False),
        ddl.uuid_column("proposer_id", nullable=True),
        ddl.time_column("proposed_at"),
        sa.Column("decided_by", sa.String(length=300), nullable=True),
        ddl.uuid_column("decider_id", nullable=True),
        ddl.time_column("decided_at", nullable=True),
        integration_id=False,
    )
    ddl.create_index("dispute_proposals", "ix_dispute_proposals_deal", ["deal_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_dispute_proposals_deal", table_name="dispute_proposals")
    op.drop_table("dispute_proposals")
