"""eid signatures: the parties' eID signing flows and their minimal evidence

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27 02:55:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_deal_table(
        "eid_signatures",
        sa.Column("signature_type", sa.String(length=10), nullable=False),
        sa.Column("purpose", sa.String(length=10), server_default="sign", nullable=False),
        ddl.uuid_column("payout_change_id", nullable=True),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("terms_salt", sa.String(length=64), nullable=False),
        sa.Column("state_hash", sa.String(length=64), nullable=True),
        ddl.time_column("started_at"),
        ddl.time_column("finished_at", nullable=True),
        sa.Column("failure", sa.String(length=300), nullable=True),
        sa.Column("issuer", sa.String(length=500), nullable=True),
        sa.Column("subject", sa.String(length=300), nullable=True),
        sa.Column("acr", sa.String(length=200), nullable=True),
        sa.Column("token_id", sa.String(length=300), nullable=True),
        ddl.time_column("token_issued_at", nullable=True),
        sa.Column("name", sa.String(length=300), nullable=True),
        sa.Column("birthdate", sa.Date(), nullable=True),
        sa.Column("national_id_hash", sa.String(length=64), nullable=True),
        integration_id=False,
        unique=["state_hash"],
    )
    ddl.create_index("eid_signatures", "ix_eid_signatures_deal", ["deal_id", "signature_type"])
    ddl.create_index("eid_signatures", "ix_eid_signatures_started_at", ["started_at"])
    ddl.create_index("eid_signatures", "ix_eid_signatures_finished_at", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_eid_signatures_finished_at", table_name="eid_signatures")
    op.drop_index("ix_eid_signatures_started_at", table_name="eid_signatures")
    op.drop_index("ix_eid_signatures_deal", table_name="eid_signatures")
    op.drop_table("eid_signatures")
