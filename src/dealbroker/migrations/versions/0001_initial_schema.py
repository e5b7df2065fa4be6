"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-22 18:28:48.306751
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "deal_counters",
        ddl.uuid_column("integration_id"),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        key=(
            "integration_id",
            "slot",
        ),
    )
    ddl.create_table(
        "idempotency_keys",
        ddl.uuid_column("integration_id"),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("response_body", sa.LargeBinary(), nullable=True),
        ddl.time_column("created_at"),
        key=(
            "integration_id",
            "key",
        ),
    )
    ddl.create_table(
        "instance_settings",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=500), nullable=False),
        key=("key",),
    )
    ddl.create_table(
        "integrations",
        ddl.uuid_column("id"),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("client_id", sa.String(length=64), nullable=False),
        sa.Column("client_secret_hash", sa.String(length=64), nullable=False),
        sa.Column("webhook_secret", sa.String(length=100), nullable=False),
        sa.Column("scopes", sa.String(length=200), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        ddl.time_column("created_at"),
        ddl.time_column("updated_at"),
        sa.UniqueConstraint("client_id", name=op.f("uq_integrations_client_id")),
    )
    ddl.create_table(
        "access_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        ddl.uuid_column("integration_id"),
        sa.Column("scopes", sa.String(length=200), nullable=False),
        ddl.time_column("expires_at"),
        ddl.time_column("created_at"),
        ddl.cascade("integration_id", "integrations.id"),
        key=("token_hash",),
    )
    ddl.create_index("access_tokens", "ix_access_tokens_integration_id", ["integration_id"])

    ddl.create_table(
        "deals",
        ddl.uuid_column("id"),
        ddl.uuid_column("integration_id"),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("price_minor", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("images", sa.JSON(), nullable=False),
        sa.Column("package_type", sa.String(length=10), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("seller", sa.JSON(), nullable=True),
        sa.Column("payment_status", sa.String(length=32), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        ddl.time_column("created_at"),
        ddl.time_column("updated_at"),
        sa.ForeignKeyConstraint(
            ["integration_id"],
            ["integrations.id"],
            name=op.f("fk_deals_integration_id_integrations"),
        ),
    )
    ddl.create_index(
        "deals", "ix_deals_integration_created", ["integration_id", "created_at", "id"]
    )

    ddl.create_deal_table(
        "deal_status_history",
        sa.Column("from_status", sa.String(length=32), nullable=True),
        sa.Column("to_status", sa.String(length=32), nullable=False),
        sa.Column("trigger", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=32), nullable=False),
        ddl.time_column("created_at"),
    )
    ddl.create_index(
        "deal_status_history", "ix_deal_status_history_deal", ["deal_id", "created_at"]
    )

    ddl.create_deal_table(
        "offer_links",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("price_minor", sa.BigInteger(), nullable=True),
        sa.Column("buyer_name", sa.String(length=200), nullable=True),
        sa.Column("buyer_email", sa.String(length=254), nullable=True),
        sa.Column("buyer_redirect_url", sa.String(length=2048), nullable=True),
        sa.Column("seller_redirect_url", sa.String(length=2048), nullable=True),
        ddl.time_column("created_at"),
        unique=["token_hash"],
    )
    ddl.create_index("offer_links", "ix_offer_links_deal_id", ["deal_id"])


def downgrade() -> None:
    ddl.drop_indexes("offer_links", "ix_offer_links_deal_id")

    op.drop_table("offer_links")
    ddl.drop_indexes("deal_status_history", "ix_deal_status_history_deal")

    op.drop_table("deal_status_history")
    ddl.drop_indexes("deals", "ix_deals_integration_created")

    op.drop_table("deals")
    ddl.drop_indexes("access_tokens", "ix_access_tokens_integration_id")

    op.drop_table("access_tokens")
    op.drop_table("integrations")
    op.drop_table("instance_settings")
    op.drop_table("idempotency_keys")
    op.drop_table("deal_counters")
