"""the way the buyer chose to pay

Each payment keeps its method (card, vipps, swish) beside the provider that takes it; the
payments made before were all card payments.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-06 17:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE on both backends, as 0030: a batch operation would reflect ``deals``, whose
# expression index SQLAlchemy cannot reflect.


def upgrade() -> None:
    op.add_column(
        "payments",
        sa.Column("method", sa.String(length=10), server_default="card", nullable=False),
    )


def downgrade() -> None:
    op.drop_column("payments", "method")
