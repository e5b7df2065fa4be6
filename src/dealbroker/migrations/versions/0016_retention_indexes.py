"""retention indexes

The worker's retention purge deletes, oldest first and in bounded batches, what has outlived
its keep time; each of its scans needs an index on the time it compares, or every batch would
read the whole table. ``IF NOT EXISTS`` lets an operator with large tables build them first
with ``CREATE INDEX CONCURRENTLY`` (docs/operations/backup-restore.md), so the upgrade blocks no writes.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-23 18:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SENT = "sent_at IS NOT NULL"


def upgrade() -> None:
    op.create_index("ix_events_created_at", "events", ["created_at"], if_not_exists=True)
    op.create_index(
        "ix_outbox_messages_sent",
        "outbox_messages",
        ["sent_at"],
        postgresql_where=sa.text(SENT),
        sqlite_where=sa.text(SENT),
        if_not_exists=True,
    )
    op.create_index(
        "ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"], if_not_exists=True
    )
    op.create_index(
        "ix_access_tokens_expires_at", "access_tokens", ["expires_at"], if_not_exists=True
    )


def downgrade() -> None:
    op.drop_index("ix_access_tokens_expires_at", table_name="access_tokens")
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys")
    op.drop_index("ix_outbox_messages_sent", table_name="outbox_messages")
    op.drop_index("ix_events_created_at", table_name="events")
