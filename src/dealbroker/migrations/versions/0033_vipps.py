"""a reservation and its capture (Vipps MobilePay)

A payment that the provider only reserves (Vipps MobilePay ePayment) keeps until when the
reservation holds (``reserved_until``) and when it was captured (``captured_at``): its payout
waits for the capture, and its deal's hand-over deadline for the reservation. Payments that were
charged at once (cards, Swish) leave both empty.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06 17:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.core.types import UTCDateTime

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE on both backends, as 0030 and 0032 (no batch: ``deals`` cannot be reflected).


def upgrade() -> None:
    op.add_column("payments", sa.Column("reserved_until", UTCDateTime(), nullable=True))
    op.add_column("payments", sa.Column("captured_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    op.drop_column("payments", "captured_at")
    op.drop_column("payments", "reserved_until")
