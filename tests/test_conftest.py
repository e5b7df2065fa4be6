"""The test run's own hygiene: the PostgreSQL databases it makes are dropped when it ends."""

import asyncio

import pytest
from sqlalchemy import text

from dealbroker.core.db import create_engine
from tests.conftest import BACKENDS, CREATED_DATABASES, PG_SERVER, database_url, drop_databases


def _exists(name: str) -> bool:
    async def run() -> bool:
        admin = create_engine(f"{PG_SERVER}/postgres", pool_size=1)
        try:
            async with admin.connect() as conn:
                found = await conn.scalar(
                    text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
                )
                return found is not None
        finally:
            await admin.dispose()

    return asyncio.run(run())


def test_databases_made_by_the_run_are_dropped(tmp_path):
    if "postgresql" not in BACKENDS:
        pytest.skip("PostgreSQL is not among the test backends")
    url = database_url("postgresql", tmp_path, "hygiene")
    name = url.rsplit("/", 1)[1]
    assert name in CREATED_DATABASES  # the session's end drops it with the others
    assert _exists(name)
    drop_databases({name})
    assert not _exists(name)
