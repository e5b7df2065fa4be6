"""stripe ids

Stripe's ids beside our payment rows (the PaymentIntent and its Customer) and beside our
provider calls (a refund's id), and the table of Stripe webhook events handled already, so a
delivery repeated by Stripe is applied once.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-23 18:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("payments", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("stripe_payment_intent_id", sa.String(length=255), nullable=True)
        )
        batch_op.add_column(sa.Column("stripe_customer_id", sa.String(length=255), nullable=True))
        batch_op.create_unique_constraint(
            batch_op.f("uq_payments_stripe_payment_intent_id"), ["stripe_payment_intent_id"]
        )
    ddl.add_columns(
        "provider_calls", sa.Column("provider_ref", sa.String(length=255), nullable=True)
    )
    ddl.create_table(
        "stripe_events",
        sa.Column("id", sa.String(length=255), nullable=False),
        sa.Column("type", sa.String(length=100), nullable=False),
        ddl.uuid_column("payment_id", nullable=True),
        ddl.time_column("received_at"),
    )


def downgrade() -> None:
    op.drop_table("stripe_events")
    ddl.drop_columns("provider_calls", "provider_ref")
    with op.batch_alter_table("payments", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_payments_stripe_payment_intent_id"), type_="unique")
        batch_op.drop_column("stripe_customer_id")
        batch_op.drop_column("stripe_payment_intent_id")
