"""the back office's integrations and deal search: rate-limit refusals per integration and
hour, and the indexes the deal search reads through

Refusals were only a metric; the back office shows each integration's, so each server process
adds what it refused to one row per integration, limit and hour (``integrations.refusals``);
the retention job deletes the rows older than the page shows. The deal search finds a deal by
its seller's e-mail (in the deal's seller details, lower-cased) and by its buyer's (the user
the approved offer names): each would otherwise read every deal.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27 02:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The expression the deal search compares, as each backend spells it (deals.repository).
SELLER_EMAIL = {
    "postgresql": "lower(seller ->> 'email')",
    "sqlite": "lower(json_extract(seller, '$.email'))",
}


def upgrade() -> None:
    ddl.create_table(
        "rate_limit_refusals",
        ddl.uuid_column("integration_id"),
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("limit_name", sa.String(length=32), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        ddl.cascade("integration_id", "integrations.id"),
        key=(
            "integration_id",
            "hour",
            "limit_name",
        ),
    )
    ddl.create_index("rate_limit_refusals", "ix_rate_limit_refusals_hour", ["hour"])
    ddl.create_index("users", "ix_users_email", ["email"])
    ddl.create_index("deals", "ix_deals_buyer_user_id", ["buyer_user_id"])
    dialect = op.get_bind().dialect.name
    op.execute(f"CREATE INDEX ix_deals_seller_email ON deals ({SELLER_EMAIL[dialect]})")


def downgrade() -> None:
    op.drop_index("ix_deals_seller_email", table_name="deals")
    op.drop_index("ix_deals_buyer_user_id", table_name="deals")
    op.drop_index("ix_users_email", table_name="users")
    op.drop_index("ix_rate_limit_refusals_hour", table_name="rate_limit_refusals")
    op.drop_table("rate_limit_refusals")
