"""bank file payouts

Payouts by credit transfer files for the operator's bank: the files (pain.001) kept whole, the
transfers in them (one file per payout: the end-to-end id and the call are unique), the
statuses the bank reported (pain.002), and on each payout call the file it went out in.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-23 18:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from dealbroker.migrations import ddl

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    ddl.create_table(
        "payout_files",
        ddl.uuid_column("id"),
        sa.Column("message_id", sa.String(length=35), nullable=False),
        ddl.time_column("created_at"),
        sa.Column("transfers", sa.Integer(), nullable=False),
        sa.Column("total_minor", sa.BigInteger(), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.UniqueConstraint("message_id", name=op.f("uq_payout_files_message_id")),
    )
    ddl.create_index("payout_files", "ix_payout_files_created_at", ["created_at"])

    ddl.create_table(
        "payout_status_entries",
        ddl.uuid_column("id"),
        sa.Column("report_message_id", sa.String(length=35), nullable=False),
        sa.Column("end_to_end_id", sa.String(length=35), nullable=False),
        sa.Column("status", sa.String(length=4), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=True),
        sa.Column("amount_minor", sa.BigInteger(), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=True),
        sa.Column("outcome", sa.String(length=10), nullable=False),
        ddl.time_column("imported_at"),
        sa.UniqueConstraint(
            "report_message_id",
            "end_to_end_id",
            name=op.f("uq_payout_status_entries_report_message_id"),
        ),
    )
    ddl.create_index(
        "payout_status_entries", "ix_payout_status_entries_end_to_end_id", ["end_to_end_id"]
    )
    ddl.create_index(
        "payout_status_entries", "ix_payout_status_entries_imported_at", ["imported_at"]
    )

    ddl.create_table(
        "payout_transfers",
        sa.Column("end_to_end_id", sa.String(length=35), nullable=False),
        ddl.uuid_column("file_id"),
        ddl.uuid_column("call_id"),
        ddl.uuid_column("payment_id"),
        ddl.uuid_column("deal_id"),
        sa.Column("amount_minor", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("creditor_kind", sa.String(length=10), nullable=False),
        sa.Column("creditor_account", sa.String(length=40), nullable=False),
        sa.Column("creditor_name", sa.String(length=140), nullable=False),
        ddl.cascade("file_id", "payout_files.id"),
        sa.UniqueConstraint("call_id", name=op.f("uq_payout_transfers_call_id")),
        key=("end_to_end_id",),
    )
    ddl.create_index("payout_transfers", "ix_payout_transfers_file_id", ["file_id"])
    ddl.create_index("payout_transfers", "ix_payout_transfers_payment_id", ["payment_id"])

    # Added in place (no foreign key, as for account_id), so the table and its partial index
    # are not rebuilt on SQLite.
    op.add_column("provider_calls", ddl.uuid_column("payout_file_id", nullable=True))
    ddl.create_index("provider_calls", "ix_provider_calls_payout_file_id", ["payout_file_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_provider_calls_payout_file_id"), table_name="provider_calls")
    ddl.drop_columns("provider_calls", "payout_file_id")

    ddl.drop_indexes(
        "payout_transfers", "ix_payout_transfers_payment_id", "ix_payout_transfers_file_id"
    )

    op.drop_table("payout_transfers")
    ddl.drop_indexes(
        "payout_status_entries",
        "ix_payout_status_entries_imported_at",
        "ix_payout_status_entries_end_to_end_id",
    )

    op.drop_table("payout_status_entries")
    ddl.drop_indexes("payout_files", "ix_payout_files_created_at")

    op.drop_table("payout_files")
