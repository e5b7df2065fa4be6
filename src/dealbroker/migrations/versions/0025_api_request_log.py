"""the API's request log: each integration's requests of the last days

Every API request an integration makes (with its token, or a token request naming its client
id) is one row: method, route template, the deal the path named, status, request id, time and
duration, never a body, query string, header or token. Server processes write them in batches
(``integrations.request_log``); the retention job deletes the rows older than
``api_request_log_days``. Read by integration, newest first, and purged by time: one index each.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27 03:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import dealbroker.core.types

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_requests",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("integration_id", sa.Uuid(), nullable=False),
        sa.Column("at", dealbroker.core.types.UTCDateTime(timezone=True), nullable=False),
        sa.Column("method", sa.String(length=10), nullable=False),
        sa.Column("route", sa.String(length=200), nullable=False),
        sa.Column("deal_id", sa.Uuid(), nullable=True),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("request_id", sa.String(length=100), nullable=False),
        sa.Column("duration_us", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["integration_id"],
            ["integrations.id"],
            name=op.f("fk_api_requests_integration_id_integrations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_api_requests")),
    )
    op.create_index("ix_api_requests_integration_at", "api_requests", ["integration_id", "at"])
    op.create_index("ix_api_requests_at", "api_requests", ["at"])


def downgrade() -> None:
    op.drop_index("ix_api_requests_at", table_name="api_requests")
    op.drop_index("ix_api_requests_integration_at", table_name="api_requests")
    op.drop_table("api_requests")
