"""The shapes the migrations repeat: key and time columns, cascading foreign keys, tables of
a deal's rows, plain and partial indexes, columns added and dropped.

A migration that has run must keep meaning what it meant, so what these functions emit never
changes: a new shape is a new function. Constraint names come from the naming convention
(``core.db.NAMING``), which the migration context applies as the models do.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from dealbroker.core.types import UTCDateTime


def uuid_column(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    """A UUID column, required unless ``nullable``."""
    return sa.Column(name, sa.Uuid(), nullable=nullable)


def time_column(name: str, *, nullable: bool = False) -> sa.Column[Any]:
    """A UTC timestamp column, required unless ``nullable``."""
    return sa.Column(name, UTCDateTime(timezone=True), nullable=nullable)


def serial_column(name: str) -> sa.Column[Any]:
    """An autoincrementing 64-bit key (an INTEGER on SQLite, where only that autoincrements)."""
    return sa.Column(
        name,
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        autoincrement=True,
        nullable=False,
    )


def cascade(column: str, target: str) -> sa.ForeignKeyConstraint:
    """A foreign key from ``column`` to ``target`` ("table.column") whose rows go with it."""
    return sa.ForeignKeyConstraint([column], [target], ondelete="CASCADE")


def create_table(
    name: str,
    *items: sa.schema.SchemaItem,
    key: Sequence[str] = ("id",),
    unique: Sequence[str] = (),
) -> None:
    """Create table ``name`` of ``items`` whose primary key is ``key``, and (after the items)
    a unique constraint on ``unique`` when given."""
    constraints = [sa.UniqueConstraint(*unique)] if unique else []
    op.create_table(name, *items, *constraints, sa.PrimaryKeyConstraint(*key))


def create_deal_table(
    name: str,
    *items: sa.schema.SchemaItem,
    integration_id: bool = True,
    unique: Sequence[str] = (),
) -> None:
    """Create table ``name`` of rows that belong to a deal and go with it: ``id``, ``deal_id``
    (and ``integration_id``) first, then ``items``."""
    keys = [uuid_column("id"), uuid_column("deal_id")]
    if integration_id:
        keys.append(uuid_column("integration_id"))
    create_table(name, *keys, *items, cascade("deal_id", "deals.id"), unique=unique)


def create_index(
    table: str,
    name: str,
    columns: Sequence[str],
    *,
    where: str | None = None,
    unique: bool = False,
) -> None:
    """Create index ``name`` on ``columns`` of ``table``; ``where`` makes it partial (the
    same condition on PostgreSQL and SQLite)."""
    partial: dict[str, Any] = {}
    if where is not None:
        partial = {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}
    op.create_index(name, table, list(columns), unique=unique, **partial)


def drop_indexes(table: str, *names: str) -> None:
    """Drop the indexes ``names`` of ``table``, in that order."""
    for name in names:
        op.drop_index(name, table_name=table)


def add_columns(table: str, *columns: sa.Column[Any]) -> None:
    """Add ``columns`` to ``table`` (SQLite: in batch mode, which adds them in place)."""
    with op.batch_alter_table(table, schema=None) as batch_op:
        for column in columns:
            batch_op.add_column(column)


def drop_columns(table: str, *names: str) -> None:
    """Drop the columns ``names`` of ``table``, in that order (SQLite: in one table rebuild)."""
    with op.batch_alter_table(table, schema=None) as batch_op:
        for name in names:
            batch_op.drop_column(name)
