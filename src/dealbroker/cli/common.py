"""What every command group shares: running work on the database, printing, checking input."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, NoReturn, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from dealbroker.core.db import create_engine, create_sessionmaker, describe_error
from dealbroker.core.errors import DomainError
from dealbroker.core.migrate import current_revision, missing_file, schema_mismatch, where
from dealbroker.core.responses import dump
from dealbroker.core.settings import Settings, get_settings
from dealbroker.integrations.service import deployment_links
from dealbroker.notifications import service as notifications

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
ClientId = Annotated[str, typer.Option("--client-id", help="The integration's client id.")]


def _in_transaction(work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """Run ``work`` in one committed transaction on the configured database."""

    async def run(sessionmaker: async_sessionmaker[AsyncSession]) -> T:
        async with sessionmaker() as session, session.begin():
            return await work(session)

    return _with_sessionmaker(run)


def _with_sessionmaker(work: Callable[[async_sessionmaker[AsyncSession]], Awaitable[T]]) -> T:
    """Run ``work`` on the configured database, for work that makes its own transactions."""

    async def run() -> T:
        settings = get_settings()
        engine = await open_migrated(settings.database_url)
        try:
            sessionmaker = create_sessionmaker(engine)
            await start_messages(sessionmaker, settings)
            return await work(sessionmaker)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(run())
    except DomainError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc


FIRST = "run `dealbroker serve` or `dealbroker migrate` first, or set DEALBROKER_DATABASE_URL"


async def open_migrated(database_url: str) -> AsyncEngine:
    """An engine on the configured database, once it is known to be one this code can work on.
    An operator's command never creates a database: run where none is (a SQLite file that does
    not exist, say outside the directory ``serve`` runs in), it would make an empty one and fail
    on its missing tables. Instead: one line on stderr, and exit 2 (1 when the database does not
    answer)."""
    missing = missing_file(database_url)
    if missing is not None:
        _refuse(f"no database at {missing}: {FIRST}", 2)
    engine = create_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as connection:
            current = await current_revision(connection)
    except DBAPIError as exc:  # described, never printed: its text may hold the URL
        await engine.dispose()
        _refuse(f"the database at {where(database_url)} cannot be opened ({describe_error(exc)})")
    except (OSError, TimeoutError) as exc:
        await engine.dispose()
        _refuse(f"the database at {where(database_url)} does not answer ({type(exc).__name__})")
    problem = schema_mismatch(current)
    if current is None:
        problem = f"no dealbroker schema in the database at {where(database_url)}: {FIRST}"
    if problem is not None:
        await engine.dispose()
        _refuse(problem, 2)
    return engine


def _refuse(problem: str, status: int = 1) -> NoReturn:
    typer.echo(f"error: {problem}", err=True)
    raise typer.Exit(status)


async def start_messages(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings
) -> None:
    """What every command that may change a deal needs first: messages to the parties carry
    their links, so this process must know the deployment's (see ``notifications.start``)."""
    async with sessionmaker() as session, session.begin():
        links = await deployment_links(session, settings)
    notifications.start(
        links,
        settings.time_zone,
        settings.default_locale,
        settings.support,
        settings.shipping_paid_by,
    )


def _print(payload: object) -> None:
    typer.echo(dump(payload).decode())


def _validated(model: type[M], values: dict[str, object]) -> M:
    """Check CLI input with the API's own schema, so both refuse the same things."""
    try:
        return model.model_validate(
            {k: v for k, v in values.items() if v is not None}, strict=False
        )
    except ValidationError as exc:
        for error in exc.errors():
            typer.echo(f"error: {'.'.join(str(p) for p in error['loc'])}: {error['msg']}", err=True)
        raise typer.Exit(2) from exc
