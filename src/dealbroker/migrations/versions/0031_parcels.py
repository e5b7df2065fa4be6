"""parcels booked at a carrier, and the carrier events taken

A Carrier deal's parcel booked by dealbroker itself (``DEALBROKER_CARRIER``): its booking, label
and tracking, and the carrier events applied already (each once).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-06 14:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_PENDING = "status IN ('booking', 'cancelling')"
FOLLOWED = "status = 'booked' AND finished_at IS NULL"


def upgrade() -> None:
    ddl.create_deal_table(
        "parcels",
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("carrier", sa.String(length=20), nullable=False),
        sa.Column("size", sa.String(length=10), nullable=False),
        sa.Column("delivery", sa.String(length=20), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("reference", sa.String(length=35), nullable=False),
        sa.Column("service", sa.String(length=40), nullable=True),
        sa.Column("shipment_id", sa.String(length=100), nullable=True),
        sa.Column("tracking_number", sa.String(length=100), nullable=True),
        sa.Column("tracking_url", sa.String(length=500), nullable=True),
        sa.Column("qr_code", sa.String(length=500), nullable=True),
        sa.Column("label_pdf", sa.LargeBinary(), nullable=True),
        sa.Column("price_minor", sa.BigInteger(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        ddl.time_column("next_attempt_at", nullable=True),
        ddl.time_column("leased_until", nullable=True),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        ddl.time_column("delay_told_at", nullable=True),
        ddl.time_column("reminded_at", nullable=True),
        sa.Column("last_event", sa.String(length=20), nullable=True),
        ddl.time_column("last_event_at", nullable=True),
        ddl.time_column("polled_at", nullable=True),
        ddl.time_column("booked_at", nullable=True),
        ddl.time_column("finished_at", nullable=True),
        ddl.time_column("created_at"),
        ddl.time_column("updated_at"),
        unique=("reference",),
    )
    ddl.create_index("parcels", "ix_parcels_deal", ["deal_id", "created_at"])
    ddl.create_index("parcels", "ix_parcels_shipment", ["carrier", "shipment_id"])
    ddl.create_index("parcels", "ix_parcels_job", ["next_attempt_at"], where=JOB_PENDING)
    ddl.create_index("parcels", "ix_parcels_followed", ["booked_at"], where=FOLLOWED)
    ddl.create_table(
        "parcel_events_seen",
        sa.Column("carrier", sa.String(length=20), nullable=False),
        sa.Column("event_id", sa.String(length=200), nullable=False),
        ddl.uuid_column("parcel_id"),
        sa.Column("kind", sa.String(length=20), nullable=False),
        ddl.time_column("occurred_at"),
        ddl.time_column("seen_at"),
        ddl.cascade("parcel_id", "parcels.id"),
        key=("carrier", "event_id"),
    )
    ddl.create_index("parcel_events_seen", "ix_parcel_events_seen_parcel_id", ["parcel_id"])


def downgrade() -> None:
    op.drop_table("parcel_events_seen")
    ddl.drop_indexes(
        "parcels", "ix_parcels_followed", "ix_parcels_job", "ix_parcels_shipment", "ix_parcels_deal"
    )
    op.drop_table("parcels")
