"""Schema migrations with Alembic, run programmatically (``dealbroker migrate`` and ``serve``),
and what a process checks before it starts: that the database answers and its schema is the one
this code needs.

Alembic is imported where it is used, not with this module: the app and every command import
this one, and only the commands that migrate or check the schema need Alembic, whose import
would slow every command's start."""

import asyncio
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from dealbroker.core.db import create_engine, describe_error

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.ext.asyncio import AsyncConnection

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
POLL_SECONDS = 1.0  # how often a waiting process asks the database again


class NotReady(Exception):
    """The database cannot serve this code: it does not answer, or its schema is not this
    code's. The message is one line for the operator, never holding a password."""


def alembic_config(database_url: str) -> "Config":
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", database_url)
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database at ``database_url`` up to ``revision``. Must not run inside an event
    loop (Alembic's environment starts its own)."""
    from alembic import command

    command.upgrade(alembic_config(database_url), revision)


@lru_cache
def head_revision() -> str:
    """The schema revision this code needs (the newest migration), read once."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


@lru_cache
def known_revisions() -> frozenset[str]:
    """Every revision this code has a migration for."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return frozenset(revision.revision for revision in script.walk_revisions())


def is_newer(current: str | None) -> bool:
    """Whether the schema is at a revision this code does not know: a newer release's, already
    migrated. Every migration expands the schema compatibly (docs/operations/upgrade.md,
    migration policy), so the code runs on it; it must not try to migrate it (down)."""
    return current is not None and current not in known_revisions()


def schema_mismatch(current: str | None) -> str | None:
    """Why a database at revision ``current`` cannot serve this code (None: it can): its schema
    is behind this code's. A newer schema serves (``is_newer``)."""
    needed = head_revision()
    if current == needed or is_newer(current):
        return None
    return (
        f"the database schema is at {current or 'nothing'}; this code needs {needed}: "
        "run dealbroker migrate"
    )


def where(database_url: str) -> str:
    """The database named for the operator: a SQLite file's absolute path, else the URL
    without its password."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return str(Path(url.database or "").resolve())
    return url.render_as_string(hide_password=True)


def missing_file(database_url: str) -> str | None:
    """Where the database should be, when it is a SQLite file that does not exist (None: it
    exists, or is not a file). Opening a SQLite URL creates its file, empty, wherever the
    command runs: a command that needs a migrated database asks this first."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if (url.query.get("mode") == "memory") or Path(url.database or "").exists():
        return None
    return where(database_url)


async def current_revision(connection: "AsyncConnection") -> str | None:
    """The revision the schema behind ``connection`` is at (None: not migrated at all)."""
    from alembic.runtime.migration import MigrationContext

    return await connection.run_sync(
        lambda sync: MigrationContext.configure(sync).get_current_revision()
    )


def schema_revision(database_url: str, timeout: float = 10.0) -> str | None:
    """The revision the database's schema is at (None: not migrated at all). Raises
    ``NotReady`` when the database does not answer within ``timeout`` seconds. Must not run
    inside an event loop."""

    async def read() -> str | None:
        engine = create_engine(database_url, pool_size=1)
        try:
            async with engine.connect() as connection:
                return await current_revision(connection)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(asyncio.wait_for(read(), timeout))
    except DBAPIError as exc:  # described, never printed: its text may hold the URL
        raise NotReady(f"the database does not answer ({describe_error(exc)})") from None
    except (OSError, TimeoutError) as exc:  # refused, unreachable, or no answer in time
        raise NotReady(f"the database does not answer ({type(exc).__name__})") from None


def wait_until_ready(
    database_url: str,
    timeout: float,
    need_schema: bool,
    waiting: Callable[[str], None],
) -> None:
    """Return once the database answers (and, with ``need_schema``, is at this code's
    revision), asking every second for up to ``timeout`` seconds; ``waiting`` is told why once,
    when the first try fails. Raises ``NotReady`` with the last reason when time is up."""
    deadline = time.monotonic() + timeout
    told = False
    while True:
        remaining = deadline - time.monotonic()
        try:
            problem = schema_mismatch(schema_revision(database_url, max(remaining, 1.0)))
            if not need_schema:
                problem = None
        except NotReady as exc:
            problem = str(exc)
        if problem is None:
            return
        if time.monotonic() + POLL_SECONDS > deadline:
            raise NotReady(f"{problem} (waited {timeout:g} s)")
        if not told:
            waiting(problem)
            told = True
        time.sleep(POLL_SECONDS)
