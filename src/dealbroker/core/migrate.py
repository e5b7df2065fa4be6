"""Schema migrations with Alembic, run programmatically (``dealbroker migrate`` and ``serve``)."""

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

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


@lru_cache
def head_revision() -> str:
    """The schema revision this code needs (the newest migration), read once."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head
