"""Swish's side of a payment

The hash of the callback identifier set on the Swish payment request, the request token that
opens the Swish app, and Swish's payment reference once paid (refunds name it).

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-06 17:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE on both backends, as 0030: a batch operation would reflect ``deals``, whose
# expression index SQLAlchemy cannot reflect.


def upgrade() -> None:
    op.add_column("payments", sa.Column("swish_callback_hash", sa.String(length=64)))
    op.add_column("payments", sa.Column("swish_request_token", sa.String(length=100)))
    op.add_column("payments", sa.Column("swish_payment_reference", sa.String(length=64)))


def downgrade() -> None:
    op.drop_column("payments", "swish_payment_reference")
    op.drop_column("payments", "swish_request_token")
    op.drop_column("payments", "swish_callback_hash")
