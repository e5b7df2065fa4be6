"""Alembic environment: runs migrations on the async engine for the configured database."""

import asyncio

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from dealbroker.core.db import create_engine
from dealbroker.models import metadata

config = context.config


# Held for the migration's transaction on PostgreSQL: two ``migrate`` (or ``serve`` with
# DEALBROKER_MIGRATE_ON_START) started at once run one after the other, and the second finds
# the schema current, instead of both running the same DDL and one failing.
MIGRATION_LOCK = 0x6465616C  # "deal"


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"))
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "sqlalchemy.url must be set"
    asyncio.run(_run_async(url))


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
