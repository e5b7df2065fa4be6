"""conversations between a deal's seller and each buyer

One conversation per deal and offer link, with its messages: the text, the warnings its reader
is shown, a party's report to support and support's hiding of it; the batched e-mail to each
party; support's block of a party.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-06 20:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OPEN_REPORT = "reported_at IS NOT NULL AND report_closed_at IS NULL"


def upgrade() -> None:
    ddl.create_deal_table(
        "conversations",
        ddl.uuid_column("offer_link_id"),
        ddl.time_column("created_at"),
        ddl.time_column("last_message_at"),
        ddl.time_column("seller_mail_due_at", nullable=True),
        ddl.time_column("seller_mailed_at", nullable=True),
        ddl.time_column("buyer_mail_due_at", nullable=True),
        ddl.time_column("buyer_mailed_at", nullable=True),
        ddl.time_column("seller_blocked_at", nullable=True),
        ddl.time_column("buyer_blocked_at", nullable=True),
        sa.Column("buyer_locale", sa.String(length=5), nullable=True),
        ddl.cascade("offer_link_id", "offer_links.id"),
        unique=("deal_id", "offer_link_id"),
    )
    ddl.create_index("conversations", "ix_conversations_offer_link", ["offer_link_id"])
    # The retention purge's scan, oldest first.
    ddl.create_index("conversations", "ix_conversations_last_message_at", ["last_message_at"])
    for party in ("seller", "buyer"):
        ddl.create_index(
            "conversations",
            f"ix_conversations_{party}_mail_due",
            [f"{party}_mail_due_at"],
            where=f"{party}_mail_due_at IS NOT NULL",
        )
    ddl.create_table(
        "conversation_messages",
        ddl.uuid_column("id"),
        ddl.uuid_column("conversation_id"),
        ddl.uuid_column("deal_id"),
        sa.Column("author", sa.String(length=10), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("warnings", sa.JSON(), nullable=False),
        ddl.time_column("created_at"),
        ddl.time_column("reported_at", nullable=True),
        sa.Column("reported_by", sa.String(length=10), nullable=True),
        sa.Column("report_reason", sa.String(length=500), nullable=True),
        ddl.time_column("report_closed_at", nullable=True),
        ddl.time_column("hidden_at", nullable=True),
        sa.Column("hidden_by", sa.String(length=300), nullable=True),
        ddl.cascade("conversation_id", "conversations.id"),
        ddl.cascade("deal_id", "deals.id"),
    )
    ddl.create_index(
        "conversation_messages",
        "ix_conversation_messages_conversation",
        ["conversation_id", "created_at"],
    )
    ddl.create_index(
        "conversation_messages", "ix_conversation_messages_deal", ["deal_id", "created_at"]
    )
    ddl.create_index(
        "conversation_messages",
        "ix_conversation_messages_reported",
        ["reported_at"],
        where=OPEN_REPORT,
    )


def downgrade() -> None:
    op.drop_table("conversation_messages")
    op.drop_table("conversations")
