"""reader locales

The language each party reads their messages in: the seller's on the deal, each buyer's on
their offer, learnt from the page they last acted on. Rows written before this revision have
none, and their messages use the deployment's default locale.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 15:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("deals", schema=None) as batch_op:
        batch_op.add_column(sa.Column("seller_locale", sa.String(length=5), nullable=True))
    with op.batch_alter_table("offers", schema=None) as batch_op:
        batch_op.add_column(sa.Column("locale", sa.String(length=5), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("offers", schema=None) as batch_op:
        batch_op.drop_column("locale")
    with op.batch_alter_table("deals", schema=None) as batch_op:
        batch_op.drop_column("seller_locale")
