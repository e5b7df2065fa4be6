"""the request headers of each delivery attempt, as sent

The developer portal shows each attempt as the receiver got it: its headers (the signed
``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``; never a secret) are kept with
the attempt as a JSON object, and its body is the event's stored payload. Empty on attempts
made before this revision.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27 05:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("delivery_attempts", sa.Column("request_headers", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("delivery_attempts", "request_headers")
