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
    op.create_table(
        "rate_limit_refusals",
        sa.Column("integration_id", sa.Uuid(), nullable=False),
        sa.Column("hour", sa.BigInteger(), nullable=False),
        sa.Column("limit_name", sa.String(length=32), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["integration_id"],
            ["integrations.id"],
            name=op.f("fk_rate_limit_refusals_integration_id_integrations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "integration_id", "hour", "limit_name", name=op.f("pk_rate_limit_refusals")
        ),
    )
    op.create_index("ix_rate_limit_refusals_hour", "rate_limit_refusals", ["hour"])
    op.create_index("ix_users_email", "users", ["email"])
    op.create_index("ix_deals_buyer_user_id", "deals", ["buyer_user_id"])
    dialect = op.get_bind().dialect.name
    op.execute(f"CREATE INDEX ix_deals_seller_email ON deals ({SELLER_EMAIL[dialect]})")


def downgrade() -> None:
    op.drop_index("ix_deals_seller_email", table_name="deals")
    op.drop_index("ix_deals_buyer_user_id", table_name="deals")
    op.drop_index("ix_users_email", table_name="users")
    op.drop_index("ix_rate_limit_refusals_hour", table_name="rate_limit_refusals")
    op.drop_table("rate_limit_refusals")
