"""What every command group shares: running work on the database, printing, checking input."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.errors import DomainError
from dealbroker.core.responses import dump
from dealbroker.core.settings import Settings, get_settings
from dealbroker.notifications import service as notifications
from dealbroker.web.links import deployment_links

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
        engine = create_engine(settings.database_url, pool_size=1)
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


async def start_messages(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings
) -> None:
    """What every command that may change a deal needs first: messages to the parties carry
    their links, so this process must know the deployment's (see ``notifications.start``)."""
    async with sessionmaker() as session, session.begin():
        links = await deployment_links(session, settings)
    notifications.start(links, settings.time_zone, settings.default_locale, settings.support)


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
