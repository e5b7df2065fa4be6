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

from dealbroker.migrations import ddl

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.add_columns("deals", sa.Column("seller_locale", sa.String(length=5), nullable=True))
    ddl.add_columns("offers", sa.Column("locale", sa.String(length=5), nullable=True))


def downgrade() -> None:
    ddl.drop_columns("offers", "locale")
    ddl.drop_columns("deals", "seller_locale")
