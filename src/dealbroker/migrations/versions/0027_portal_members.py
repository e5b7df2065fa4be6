"""portal members: the developer portal's members, login links and sessions; the integration
of an audit record; outbox messages about no deal (a portal login link)

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27 05:40:00.000000
"""

import warnings
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "portal_members",
        ddl.uuid_column("id"),
        ddl.uuid_column("integration_id"),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("email_key", sa.String(length=254), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("locale", sa.String(length=10), nullable=True),
        ddl.time_column("created_at"),
        ddl.cascade("integration_id", "integrations.id"),
        sa.UniqueConstraint(
            "integration_id", "email_key", name=op.f("uq_portal_members_integration_id")
        ),
    )
    ddl.create_index("portal_members", "ix_portal_members_email_key", ["email_key"])
    ddl.create_table(
        "portal_login_links",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        ddl.time_column("created_at"),
        ddl.time_column("expires_at"),
        ddl.time_column("used_at", nullable=True),
        sa.Column("email_key", sa.String(length=254), nullable=False),
        key=("token_hash",),
    )
    ddl.create_index(
        "portal_login_links", "ix_portal_login_links_email", ["email_key", "created_at"]
    )
    ddl.create_table(
        "portal_sessions",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        ddl.time_column("created_at"),
        ddl.time_column("last_seen_at"),
        ddl.time_column("authenticated_at"),
        ddl.time_column("expires_at"),
        sa.Column("method", sa.String(length=10), nullable=False),
        sa.Column("email_key", sa.String(length=254), nullable=False),
        ddl.uuid_column("member_id", nullable=True),
        ddl.cascade("member_id", "portal_members.id"),
        key=("token_hash",),
    )
    ddl.create_index("portal_sessions", "ix_portal_sessions_member_id", ["member_id"])
    ddl.create_index("portal_sessions", "ix_portal_sessions_expires_at", ["expires_at"])
    # The integration an audited action was on: its owners read those rows in the portal.
    op.add_column("audit_records", ddl.uuid_column("integration_id", nullable=True))
    ddl.create_index("audit_records", "ix_audit_records_integration", ["integration_id", "id"])
    # A portal login link is a message about no deal. SQLite rebuilds the table to change
    # the column; its reflection of the deals table (the foreign key's) skips an expression
    # index there, which it warns about and which the rebuild does not need.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Skipped unsupported reflection", sa.exc.SAWarning)
        with op.batch_alter_table("outbox_messages", schema=None) as batch_op:
            batch_op.alter_column("deal_id", existing_type=sa.Uuid(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM outbox_messages WHERE deal_id IS NULL")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Skipped unsupported reflection", sa.exc.SAWarning)
        with op.batch_alter_table("outbox_messages", schema=None) as batch_op:
            batch_op.alter_column("deal_id", existing_type=sa.Uuid(), nullable=False)
    op.drop_index("ix_audit_records_integration", table_name="audit_records")
    ddl.drop_columns("audit_records", "integration_id")
    op.drop_index("ix_portal_sessions_expires_at", table_name="portal_sessions")
    op.drop_index(op.f("ix_portal_sessions_member_id"), table_name="portal_sessions")
    op.drop_table("portal_sessions")
    op.drop_index("ix_portal_login_links_email", table_name="portal_login_links")
    op.drop_table("portal_login_links")
    op.drop_index(op.f("ix_portal_members_email_key"), table_name="portal_members")
    op.drop_table("portal_members")
