"""a sandbox test clock per deal: the deal's own offset

A sandbox test can move one deal's clock ahead on its own (``POST
/sandbox/v1/deals/{dealId}/clock/advance``): its deadlines come that much closer, and the deal
keeps how far its own clock has gone (``clock_offset_seconds``), which adds to its
integration's. Zero on existing deals.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27 02:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("deals", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("clock_offset_seconds", sa.BigInteger(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("deals", schema=None) as batch_op:
        batch_op.drop_column("clock_offset_seconds")
