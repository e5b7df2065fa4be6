"""asking price kept while an offer is approved

Approving an offer makes its price the deal's; the seller's asking price is kept beside it, so
that an approval that lapses (the buyer did not sign and pay in time) gives the deal its asking
price back when it takes offers again. Empty while no offer is approved.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 19:35:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa

from dealbroker.migrations import ddl

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.add_columns("deals", sa.Column("asking_price_minor", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    ddl.drop_columns("deals", "asking_price_minor")
