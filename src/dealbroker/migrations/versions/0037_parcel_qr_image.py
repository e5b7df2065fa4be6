"""a parcel's QR code as its carrier drew it

Bring answers a booking's ``generateQrCodes`` with a link to a PNG of the QR code its pickup
points scan to print the label; the code it encodes is Bring's, so the image is kept as given.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-07 00:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("parcels", sa.Column("qr_png", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    op.drop_column("parcels", "qr_png")
