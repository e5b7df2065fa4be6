"""a sandbox test clock per deal: the deal's own offset

A sandbox test can move one deal's clock ahead on its own (``POST
/sandbox/v1/deals/{dealId}/clock/advance``): its deadlines come that much closer, and the deal
keeps how far its own clock has gone (``clock_offset_seconds``), which adds to its
integration's. Zero on existing deals.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27 02:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE on both backends (SQLite adds and drops a column in place): a batch
# operation would reflect ``deals``, whose expression index ``ix_deals_seller_email`` (0022)
# SQLAlchemy cannot reflect, and a copied table would lose it.


def upgrade() -> None:
    op.add_column(
        "deals",
        sa.Column("clock_offset_seconds", sa.BigInteger(), server_default="0", nullable=False),
    )


def downgrade() -> None:
    op.drop_column("deals", "clock_offset_seconds")
