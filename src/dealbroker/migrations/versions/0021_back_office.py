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

from dealbroker.migrations import ddl

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "operators",
        ddl.uuid_column("id"),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("email_key", sa.String(length=254), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("roles", sa.JSON(), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        ddl.time_column("created_at"),
        sa.UniqueConstraint("email_key", name=op.f("uq_operators_email_key")),
    )
    for table in ("operator_login_links", "operator_sessions"):
        columns: list[sa.schema.SchemaItem] = [
            sa.Column("token_hash", sa.String(length=64), nullable=False),
            ddl.uuid_column("operator_id"),
            ddl.time_column("created_at"),
            ddl.time_column("expires_at"),
        ]
        if table == "operator_login_links":
            columns.append(ddl.time_column("used_at", nullable=True))
        else:
            columns += [
                ddl.time_column("last_seen_at"),
                ddl.time_column("authenticated_at"),
                sa.Column("method", sa.String(length=10), nullable=False),
            ]
        ddl.create_table(
            table,
            *columns,
            ddl.cascade("operator_id", "operators.id"),
            key=("token_hash",),
        )
        op.create_index(op.f(f"ix_{table}_operator_id"), table, ["operator_id"], unique=False)
    ddl.create_index("operator_sessions", "ix_operator_sessions_expires_at", ["expires_at"])
    ddl.create_table(
        "audit_records",
        ddl.serial_column("id"),
        ddl.time_column("at"),
        sa.Column("actor", sa.String(length=300), nullable=False),
        ddl.uuid_column("operator_id", nullable=True),
        sa.Column("action", sa.String(length=80), nullable=False),
        sa.Column("target_type", sa.String(length=40), nullable=False),
        sa.Column("target_id", sa.String(length=200), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.Column("request_id", sa.String(length=100), nullable=True),
    )
    ddl.create_index("audit_records", "ix_audit_records_target", ["target_type", "target_id"])
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
