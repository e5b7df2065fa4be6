"""events, offers and users

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 18:37:12.848719
"""

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "events",
        ddl.serial_column("seq"),
        ddl.uuid_column("id"),
        ddl.uuid_column("integration_id"),
        ddl.uuid_column("deal_id", nullable=True),
        sa.Column("kind", sa.String(length=40), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        ddl.time_column("created_at"),
        sa.UniqueConstraint("id", name=op.f("uq_events_id")),
        key=("seq",),
    )
    ddl.create_index("events", "ix_events_deal_seq", ["deal_id", "seq"])
    ddl.create_index("events", "ix_events_integration_kind_seq", ["integration_id", "kind", "seq"])
    ddl.create_index("events", "ix_events_integration_seq", ["integration_id", "seq"])

    ddl.create_table(
        "users",
        ddl.uuid_column("id"),
        ddl.uuid_column("integration_id"),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        ddl.time_column("created_at"),
        sa.ForeignKeyConstraint(
            ["integration_id"],
            ["integrations.id"],
            name=op.f("fk_users_integration_id_integrations"),
        ),
        sa.UniqueConstraint("integration_id", "email", name=op.f("uq_users_integration_id")),
    )
    ddl.create_table(
        "webhook_endpoints",
        ddl.uuid_column("id"),
        ddl.uuid_column("integration_id"),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("description", sa.String(length=500), nullable=True),
        sa.Column("event_kinds", sa.JSON(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", sa.String(length=300), nullable=True),
        ddl.time_column("failing_since", nullable=True),
        ddl.time_column("created_at"),
        ddl.time_column("updated_at"),
        sa.ForeignKeyConstraint(
            ["integration_id"],
            ["integrations.id"],
            name=op.f("fk_webhook_endpoints_integration_id_integrations"),
        ),
    )
    ddl.create_index("webhook_endpoints", "ix_webhook_endpoints_integration_id", ["integration_id"])

    ddl.create_table(
        "deliveries",
        ddl.uuid_column("id"),
        sa.Column(
            "event_seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        ddl.uuid_column("endpoint_id"),
        ddl.uuid_column("integration_id"),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        ddl.time_column("next_attempt_at"),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        ddl.time_column("created_at"),
        ddl.time_column("updated_at"),
        ddl.cascade("endpoint_id", "webhook_endpoints.id"),
        ddl.cascade("event_seq", "events.seq"),
    )
    ddl.create_index(
        "deliveries", "ix_deliveries_due", ["next_attempt_at"], where="status = 'pending'"
    )
    ddl.create_index("deliveries", "ix_deliveries_endpoint_created", ["endpoint_id", "created_at"])
    ddl.create_index("deliveries", "ix_deliveries_event_seq", ["event_seq"])

    ddl.create_deal_table(
        "offers",
        ddl.uuid_column("offer_link_id", nullable=True),
        sa.Column("price_minor", sa.BigInteger(), nullable=False),
        sa.Column("shipping_type", sa.String(length=10), nullable=False),
        ddl.uuid_column("buyer_user_id"),
        sa.Column("buyer_name", sa.String(length=200), nullable=True),
        sa.Column("buyer_email", sa.String(length=254), nullable=False),
        sa.Column("buyer_redirect_url", sa.String(length=2048), nullable=True),
        sa.Column("seller_redirect_url", sa.String(length=2048), nullable=True),
        sa.Column("status", sa.String(length=10), nullable=False),
        ddl.time_column("created_at"),
        ddl.time_column("decided_at", nullable=True),
    )
    ddl.create_index("offers", "ix_offers_deal_id", ["deal_id"])

    ddl.create_table(
        "delivery_attempts",
        ddl.uuid_column("id"),
        ddl.uuid_column("delivery_id"),
        ddl.uuid_column("endpoint_id"),
        ddl.uuid_column("event_id"),
        ddl.uuid_column("integration_id"),
        ddl.time_column("attempted_at"),
        sa.Column("success", sa.Boolean(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("error", sa.String(length=500), nullable=True),
        sa.Column("response_excerpt", sa.Text(), nullable=True),
        ddl.cascade("delivery_id", "deliveries.id"),
    )
    ddl.create_index("delivery_attempts", "ix_delivery_attempts_delivery_id", ["delivery_id"])
    ddl.create_index(
        "delivery_attempts", "ix_delivery_attempts_endpoint", ["endpoint_id", "attempted_at"]
    )

    ddl.add_columns(
        "deals",
        ddl.uuid_column("seller_user_id", nullable=True),
        ddl.uuid_column("buyer_user_id", nullable=True),
        sa.Column("shipping_type", sa.String(length=10), nullable=True),
    )

    # Existing integrations get the hash of their webhook secret before the column is required.
    ddl.add_columns(
        "integrations", sa.Column("webhook_secret_hash", sa.String(length=64), nullable=True)
    )
    connection = op.get_bind()
    rows = connection.execute(sa.text("SELECT id, webhook_secret FROM integrations")).all()
    for row in rows:
        connection.execute(
            sa.text("UPDATE integrations SET webhook_secret_hash = :h WHERE id = :id"),
            {"h": hashlib.sha256(row.webhook_secret.encode()).hexdigest(), "id": row.id},
        )
    with op.batch_alter_table("integrations", schema=None) as batch_op:
        batch_op.alter_column(
            "webhook_secret_hash", existing_type=sa.String(length=64), nullable=False
        )
        batch_op.create_unique_constraint(
            batch_op.f("uq_integrations_webhook_secret_hash"), ["webhook_secret_hash"]
        )


def downgrade() -> None:
    with op.batch_alter_table("integrations", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_integrations_webhook_secret_hash"), type_="unique")
        batch_op.drop_column("webhook_secret_hash")

    ddl.drop_columns("deals", "shipping_type", "buyer_user_id", "seller_user_id")

    ddl.drop_indexes(
        "delivery_attempts", "ix_delivery_attempts_endpoint", "ix_delivery_attempts_delivery_id"
    )

    op.drop_table("delivery_attempts")
    ddl.drop_indexes("offers", "ix_offers_deal_id")

    op.drop_table("offers")
    ddl.drop_indexes(
        "deliveries",
        "ix_deliveries_event_seq",
        "ix_deliveries_endpoint_created",
        "ix_deliveries_due",
    )

    op.drop_table("deliveries")
    ddl.drop_indexes("webhook_endpoints", "ix_webhook_endpoints_integration_id")

    op.drop_table("webhook_endpoints")
    op.drop_table("users")
    ddl.drop_indexes(
        "events",
        "ix_events_integration_seq",
        "ix_events_integration_kind_seq",
        "ix_events_deal_seq",
    )

    op.drop_table("events")
