"""the pixels decoded for each party's evidence photos, for their hourly budget

Every photo a party uploads is charged the pixels its header claims before it is decoded,
whether it is then kept or refused; a party whose charges in the last hour would pass
``DEALBROKER_EVIDENCE_PIXELS_PER_PARTY_PER_HOUR`` is refused (429) before anything is decoded.
Rows past the hour are deleted at the party's next upload.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 07:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_deal_table(
        "evidence_pixel_charges",
        sa.Column("party", sa.String(length=10), nullable=False),
        sa.Column("pixels", sa.BigInteger(), nullable=False),
        ddl.time_column("created_at"),
        integration_id=False,
    )
    ddl.create_index(
        "evidence_pixel_charges",
        "ix_evidence_pixel_charges_deal",
        ["deal_id", "party", "created_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_evidence_pixel_charges_deal", table_name="evidence_pixel_charges")
    op.drop_table("evidence_pixel_charges")
