"""Schema migrations with Alembic, run programmatically (``dealbroker migrate`` and ``serve``)."""

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database at ``database_url`` up to ``revision``. Must not run inside an event
    loop (Alembic's environment starts its own)."""
    command.upgrade(alembic_config(database_url), revision)
