"""webhook secret rotation

An integration's webhook secret can be rotated with an overlap window: the secret it replaces is
kept, readable (it keys the HMAC of the second signature on each delivery) and by its hash (the
sandbox triggers accept it), until the window ends.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23 15:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("integrations", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("previous_webhook_secret", sa.String(length=100), nullable=True)
        )
        batch_op.add_column(
            sa.Column("previous_webhook_secret_hash", sa.String(length=64), nullable=True)
        )
        batch_op.add_column(ddl.time_column("previous_webhook_secret_expires_at", nullable=True))
        batch_op.create_unique_constraint(
            batch_op.f("uq_integrations_previous_webhook_secret_hash"),
            ["previous_webhook_secret_hash"],
        )


def downgrade() -> None:
    with op.batch_alter_table("integrations", schema=None) as batch_op:
        batch_op.drop_constraint(
            batch_op.f("uq_integrations_previous_webhook_secret_hash"), type_="unique"
        )
        batch_op.drop_column("previous_webhook_secret_expires_at")
        batch_op.drop_column("previous_webhook_secret_hash")
        batch_op.drop_column("previous_webhook_secret")
