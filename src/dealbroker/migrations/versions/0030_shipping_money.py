"""the shipping price: on the offer, on the deal, fixed on the payment

A buyer who offers Carrier shipping with a carrier configured is quoted the shipping price for
the deal's package size; the offer carries it, and the approved offer's price becomes the
deal's (``shipping_minor``, cleared again when the approval lapses). The payment fixes it with
amount and fee when it is created (0 without one), and notes a refund that keeps it (the buyer
did not collect the parcel, which travelled at their cost).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06 13:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE on both backends (SQLite adds and drops a column in place), as 0024: a
# batch operation would reflect ``deals`` (the other two tables refer to it), whose expression
# index ``ix_deals_seller_email`` (0022) SQLAlchemy cannot reflect, and a copied table would
# lose it.


def upgrade() -> None:
    op.add_column("offers", sa.Column("shipping_minor", sa.BigInteger(), nullable=True))
    op.add_column("deals", sa.Column("shipping_minor", sa.BigInteger(), nullable=True))
    op.add_column(
        "payments",
        sa.Column("shipping_minor", sa.BigInteger(), server_default="0", nullable=False),
    )
    op.add_column(
        "payments",
        sa.Column("refund_less_shipping", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("payments", "refund_less_shipping")
    op.drop_column("payments", "shipping_minor")
    op.drop_column("deals", "shipping_minor")
    op.drop_column("offers", "shipping_minor")
