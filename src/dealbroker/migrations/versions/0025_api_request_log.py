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

from dealbroker.migrations import ddl

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "api_requests",
        ddl.serial_column("seq"),
        ddl.uuid_column("integration_id"),
        ddl.time_column("at"),
        sa.Column("method", sa.String(length=10), nullable=False),
        sa.Column("route", sa.String(length=200), nullable=False),
        ddl.uuid_column("deal_id", nullable=True),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("request_id", sa.String(length=100), nullable=False),
        sa.Column("duration_us", sa.Integer(), nullable=False),
        ddl.cascade("integration_id", "integrations.id"),
        key=("seq",),
    )
    ddl.create_index("api_requests", "ix_api_requests_integration_at", ["integration_id", "at"])
    ddl.create_index("api_requests", "ix_api_requests_at", ["at"])


def downgrade() -> None:
    op.drop_index("ix_api_requests_at", table_name="api_requests")
    op.drop_index("ix_api_requests_integration_at", table_name="api_requests")
    op.drop_table("api_requests")
