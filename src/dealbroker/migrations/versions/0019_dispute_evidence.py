"""dispute evidence: statements and photos

The two parties of a disputed deal add statements (append-only) and photos until the operator
decides. A photo's row says where its bytes are: in ``evidence_photo_data`` (the database, the
default) or under its key in an S3-compatible object store.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 22:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_deal_table(
        "evidence_statements",
        sa.Column("party", sa.String(length=10), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        ddl.time_column("created_at"),
        integration_id=False,
    )
    ddl.create_index(
        "evidence_statements", "ix_evidence_statements_deal", ["deal_id", "created_at"]
    )
    ddl.create_deal_table(
        "evidence_photos",
        sa.Column("party", sa.String(length=10), nullable=False),
        sa.Column("storage", sa.String(length=10), nullable=False),
        sa.Column("storage_key", sa.String(length=200), nullable=False),
        sa.Column("content_type", sa.String(length=40), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("byte_size", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        ddl.time_column("created_at"),
        integration_id=False,
    )
    ddl.create_index(
        "evidence_photos", "ix_evidence_photos_deal", ["deal_id", "party", "created_at"]
    )
    ddl.create_table(
        "evidence_photo_data",
        sa.Column("storage_key", sa.String(length=200), nullable=False),
        ddl.uuid_column("photo_id"),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        ddl.cascade("photo_id", "evidence_photos.id"),
        key=("storage_key",),
    )


def downgrade() -> None:
    op.drop_table("evidence_photo_data")
    op.drop_index("ix_evidence_photos_deal", table_name="evidence_photos")
    op.drop_table("evidence_photos")
    op.drop_index("ix_evidence_statements_deal", table_name="evidence_statements")
    op.drop_table("evidence_statements")
