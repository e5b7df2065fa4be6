"""back office: operators, their login links and sessions, the audit trail

Operators have roles (support, finance, admin) and log in by a one-time link or OpenID
Connect; their sessions are kept here, hashed. The audit trail is append-only: on PostgreSQL a
trigger refuses every UPDATE and DELETE of its rows (the ORM refuses them on both backends).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26 23:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.core.types import UTCDateTime

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operators",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("email_key", sa.String(length=254), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("roles", sa.JSON(), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operators")),
        sa.UniqueConstraint("email_key", name=op.f("uq_operators_email_key")),
    )
    for table in ("operator_login_links", "operator_sessions"):
        columns: list[sa.schema.SchemaItem] = [
            sa.Column("token_hash", sa.String(length=64), nullable=False),
            sa.Column("operator_id", sa.Uuid(), nullable=False),
            sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
            sa.Column("expires_at", UTCDateTime(timezone=True), nullable=False),
        ]
        if table == "operator_login_links":
            columns.append(sa.Column("used_at", UTCDateTime(timezone=True), nullable=True))
        else:
            columns += [
                sa.Column("last_seen_at", UTCDateTime(timezone=True), nullable=False),
                sa.Column("authenticated_at", UTCDateTime(timezone=True), nullable=False),
                sa.Column("method", sa.String(length=10), nullable=False),
            ]
        op.create_table(
            table,
            *columns,
            sa.ForeignKeyConstraint(
                ["operator_id"],
                ["operators.id"],
                name=op.f(f"fk_{table}_operator_id_operators"),
                ondelete="CASCADE",
            ),
            sa.PrimaryKeyConstraint("token_hash", name=op.f(f"pk_{table}")),
        )
        op.create_index(op.f(f"ix_{table}_operator_id"), table, ["operator_id"], unique=False)
    op.create_index(
        "ix_operator_sessions_expires_at", "operator_sessions", ["expires_at"], unique=False
    )
    op.create_table(
        "audit_records",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=300), nullable=False),
        sa.Column("operator_id", sa.Uuid(), nullable=True),
        sa.Column("action", sa.String(length=80), nullable=False),
        sa.Column("target_type", sa.String(length=40), nullable=False),
        sa.Column("target_id", sa.String(length=200), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.Column("request_id", sa.String(length=100), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_records")),
    )
    op.create_index(
        "ix_audit_records_target", "audit_records", ["target_type", "target_id"], unique=False
    )
    if op.get_context().dialect.name == "postgresql":
        # Append-only, whatever the client: a row is never changed or removed (TRUNCATE, an
        # owner's deliberate act on the whole table, is not a row change and stays possible).
        op.execute(
            "CREATE FUNCTION audit_records_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'audit_records is append-only'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_records_append_only BEFORE UPDATE OR DELETE ON audit_records "
            "FOR EACH ROW EXECUTE FUNCTION audit_records_append_only()"
        )


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_records_append_only ON audit_records")
        op.execute("DROP FUNCTION audit_records_append_only()")
    op.drop_index("ix_audit_records_target", table_name="audit_records")
    op.drop_table("audit_records")
    op.drop_index("ix_operator_sessions_expires_at", table_name="operator_sessions")
    for table in ("operator_sessions", "operator_login_links"):
        op.drop_index(op.f(f"ix_{table}_operator_id"), table_name=table)
        op.drop_table(table)
    op.drop_table("operators")
