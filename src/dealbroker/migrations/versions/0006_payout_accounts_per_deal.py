"""payout accounts per deal, and their audit trail

A payout account belonged to a user found by e-mail, so whoever could type a seller's e-mail
on any deal page could redirect that seller's payouts. It now belongs to one deal. Each
existing account is copied to every deal of its user, so no waiting payout loses its account.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 12:50:00
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import dealbroker.core.types
from dealbroker.migrations import ddl

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UTC = dealbroker.core.types.UTCDateTime
accounts = sa.table(
    "payout_accounts",
    sa.column("id", sa.Uuid()),
    sa.column("user_id", sa.Uuid()),
    sa.column("deal_id", sa.Uuid()),
    sa.column("kind", sa.String()),
    sa.column("number", sa.String()),
    sa.column("holder", sa.String()),
    sa.column("created_at", UTC()),
    sa.column("updated_at", UTC()),
)
deals = sa.table("deals", sa.column("id", sa.Uuid()), sa.column("seller_user_id", sa.Uuid()))


def upgrade() -> None:
    ddl.create_deal_table(
        "payout_account_changes",
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("number", sa.String(length=40), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=True),
        ddl.time_column("requested_at"),
        ddl.time_column("applied_at", nullable=True),
        unique=["token_hash"],
    )
    ddl.create_index("payout_account_changes", "ix_payout_account_changes_deal_id", ["deal_id"])

    with op.batch_alter_table("payout_accounts", schema=None) as batch_op:
        batch_op.add_column(ddl.uuid_column("deal_id", nullable=True))
        batch_op.add_column(ddl.time_column("updated_at", nullable=True))
        batch_op.drop_constraint("uq_payout_accounts_user_id", type_="unique")

    conn = op.get_bind()
    for account in conn.execute(sa.select(accounts)).mappings().all():
        deal_ids = conn.execute(
            sa.select(deals.c.id).where(deals.c.seller_user_id == account["user_id"])
        ).scalars()
        for i, deal_id in enumerate(deal_ids):
            values = {
                "deal_id": deal_id,
                "updated_at": account["created_at"],
                "kind": account["kind"],
                "number": account["number"],
                "holder": account["holder"],
                "created_at": account["created_at"],
                "user_id": account["user_id"],
            }
            if i == 0:
                conn.execute(
                    accounts.update().where(accounts.c.id == account["id"]).values(**values)
                )
            else:
                conn.execute(accounts.insert().values(id=uuid.uuid4(), **values))
    conn.execute(accounts.delete().where(accounts.c.deal_id.is_(None)))

    with op.batch_alter_table("payout_accounts", schema=None) as batch_op:
        batch_op.drop_constraint("fk_payout_accounts_user_id_users", type_="foreignkey")
        batch_op.drop_column("user_id")
        batch_op.alter_column("deal_id", existing_type=sa.Uuid(), nullable=False)
        batch_op.alter_column("updated_at", existing_type=UTC(timezone=True), nullable=False)
        batch_op.create_unique_constraint(batch_op.f("uq_payout_accounts_deal_id"), ["deal_id"])
        batch_op.create_foreign_key(
            batch_op.f("fk_payout_accounts_deal_id_deals"),
            "deals",
            ["deal_id"],
            ["id"],
            ondelete="CASCADE",
        )


def downgrade() -> None:
    ddl.add_columns("payout_accounts", ddl.uuid_column("user_id", nullable=True))
    conn = op.get_bind()
    seen: set[uuid.UUID] = set()
    rows = conn.execute(
        sa.select(accounts.c.id, deals.c.seller_user_id)
        .select_from(accounts.join(deals, deals.c.id == accounts.c.deal_id))
        .order_by(accounts.c.updated_at.desc())
    ).all()
    for account_id, user_id in rows:
        if user_id is None or user_id in seen:
            conn.execute(accounts.delete().where(accounts.c.id == account_id))
            continue
        seen.add(user_id)
        conn.execute(accounts.update().where(accounts.c.id == account_id).values(user_id=user_id))
    with op.batch_alter_table("payout_accounts", schema=None) as batch_op:
        batch_op.drop_constraint("fk_payout_accounts_deal_id_deals", type_="foreignkey")
        batch_op.drop_constraint("uq_payout_accounts_deal_id", type_="unique")
        batch_op.drop_column("deal_id")
        batch_op.drop_column("updated_at")
        batch_op.alter_column("user_id", existing_type=sa.Uuid(), nullable=False)
        batch_op.create_unique_constraint("uq_payout_accounts_user_id", ["user_id"])
        batch_op.create_foreign_key(
            "fk_payout_accounts_user_id_users", "users", ["user_id"], ["id"]
        )
    ddl.drop_indexes("payout_account_changes", "ix_payout_account_changes_deal_id")
    op.drop_table("payout_account_changes")
