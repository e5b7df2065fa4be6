"""Swish payouts

A payout account may be a Swish number (``kind`` "swish"), with the payee's personal identity
number that Swish's Payouts API requires, kept sealed (``payee_ssn_sealed``) on the account and
on the change that asked for it. A payout call keeps the rail that holds it once submitted
(``rail``): the bank file or Swish, so that a Swish payout never goes into a bank file.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-06 17:30:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE on both backends, as 0030 and 0032 (no batch operations).


def upgrade() -> None:
    op.add_column("payout_accounts", sa.Column("payee_ssn_sealed", sa.Text(), nullable=True))
    op.add_column("payout_account_changes", sa.Column("payee_ssn_sealed", sa.Text(), nullable=True))
    op.add_column("provider_calls", sa.Column("rail", sa.String(length=10), nullable=True))


def downgrade() -> None:
    op.drop_column("provider_calls", "rail")
    op.drop_column("payout_account_changes", "payee_ssn_sealed")
    op.drop_column("payout_accounts", "payee_ssn_sealed")
