"""The ``dealbroker`` command: serve, migrate, and the operator's integration commands."""

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.errors import AppError
from dealbroker.core.migrate import upgrade
from dealbroker.core.settings import get_settings
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import Integration

app = typer.Typer(
    help="dealbroker: brokers second-hand deals for marketplaces.", no_args_is_help=True
)
integrations_app = typer.Typer(
    help="Register integrations and manage their credentials.", no_args_is_help=True
)
app.add_typer(integrations_app, name="integrations")

T = TypeVar("T")
DEMO_NAME = "Demo integration"


def _in_transaction(work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """Run ``work`` in one committed transaction on the configured database."""

    async def run() -> T:
        settings = get_settings()
        engine = create_engine(settings.database_url, pool_size=1)
        try:
            async with create_sessionmaker(engine)() as session, session.begin():
                return await work(session)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(run())
    except AppError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc


def _describe(integration: Integration, secret: str | None = None) -> dict[str, object]:
    out: dict[str, object] = {
        "name": integration.name,
        "client_id": integration.client_id,
        "scopes": integration.scope_list,
        "active": integration.active,
        "webhook_secret": integration.webhook_secret,
        "created_at": integration.created_at.isoformat(),
    }
    if secret:
        out["client_secret"] = secret
    return out


@app.command()
def migrate() -> None:
    """Bring the database schema up to date."""
    upgrade(get_settings().database_url)
    typer.echo("database is up to date")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    workers: Annotated[int, typer.Option(help="Server processes (PostgreSQL only).")] = 1,
) -> None:
    """Migrate the database, create a demo integration on first start, and serve the API."""
    import uvicorn

    settings = get_settings()
    if workers > 1 and settings.is_sqlite:
        typer.echo("error: several workers need PostgreSQL (DEALBROKER_DATABASE_URL)", err=True)
        raise typer.Exit(2)
    upgrade(settings.database_url)

    async def demo(session: AsyncSession) -> integrations.Credentials | None:
        if await integrations.any_exist(session):
            return None
        return await integrations.create(session, DEMO_NAME)

    created = _in_transaction(demo)
    if created:
        i = created.integration
        typer.echo("Created the demo integration. Keep these; the client secret is shown once:")
        typer.echo(f"  client id:      {i.client_id}")
        typer.echo(f"  client secret:  {created.client_secret}")
        typer.echo(f"  webhook secret: {i.webhook_secret}")
    else:
        typer.echo(
            "Integrations exist already: `dealbroker integrations list` shows them, "
            "`dealbroker integrations rotate-secret CLIENT_ID` issues a new secret."
        )
    bind_host, bind_port = host or settings.host, port or settings.port
    if "base_url" not in settings.model_fields_set:
        # Links must point at where this server really listens.
        os.environ["DEALBROKER_BASE_URL"] = f"http://{bind_host}:{bind_port}"
        get_settings.cache_clear()
    typer.echo(f"Serving on http://{bind_host}:{bind_port} (API docs at /docs)")
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    uvicorn.run(
        "dealbroker.app:create_app",
        factory=True,
        host=bind_host,
        port=bind_port,
        workers=workers,
        access_log=False,  # our own log redacts capability links; uvicorn's would not
        log_level=settings.log_level,
    )


@integrations_app.command("create")
def integrations_create(
    name: Annotated[str, typer.Argument(help="A name for the marketplace.")],
    scope: Annotated[list[str] | None, typer.Option(help="A scope to grant (repeatable).")] = None,
) -> None:
    """Register an integration; prints its credentials (the client secret only this once)."""
    created = _in_transaction(lambda s: integrations.create(s, name, scope))
    typer.echo(json.dumps(_describe(created.integration, created.client_secret), indent=2))


@integrations_app.command("list")
def integrations_list() -> None:
    """List integrations (never their client secrets)."""
    for integration in _in_transaction(integrations.list_all):
        typer.echo(json.dumps(_describe(integration)))


@integrations_app.command("rotate-secret")
def integrations_rotate(client_id: str) -> None:
    """Issue a new client secret; the old secret and its tokens stop working at once."""
    rotated = _in_transaction(lambda s: integrations.rotate_secret(s, client_id))
    typer.echo(json.dumps(_describe(rotated.integration, rotated.client_secret), indent=2))


@integrations_app.command("disable")
def integrations_disable(client_id: str) -> None:
    """Disable an integration and revoke its tokens at once."""
    _in_transaction(lambda s: integrations.set_active(s, client_id, False))
    typer.echo(f"disabled {client_id}; its tokens are revoked")


@integrations_app.command("enable")
def integrations_enable(client_id: str) -> None:
    """Enable a disabled integration again (it must request new tokens)."""
    _in_transaction(lambda s: integrations.set_active(s, client_id, True))
    typer.echo(f"enabled {client_id}")
