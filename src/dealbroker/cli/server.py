"""The top-level commands: ``migrate``, ``serve`` and ``worker``."""

import asyncio
import logging.config
import os
import signal
from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker import metrics_server
from dealbroker.cli.common import _in_transaction, start_messages
from dealbroker.core import logs
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.metrics import instrument_pool
from dealbroker.core.migrate import upgrade
from dealbroker.core.settings import Settings, get_settings
from dealbroker.integrations import service as integrations
from dealbroker.payments.provider import startup_problem

DEMO_NAME = "Demo integration"


def _refuse_unrunnable(settings: Settings) -> None:
    """Stop before touching the database or a port when this configuration may not run (e.g.
    the simulated payment provider outside the sandbox)."""
    problem = startup_problem(settings)
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)


def migrate() -> None:
    """Bring the database schema up to date."""
    upgrade(get_settings().database_url)
    typer.echo("database is up to date")


def serve(
    host: Annotated[str | None, typer.Option(help="Interface to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    workers: Annotated[int, typer.Option(help="Server processes (PostgreSQL only).")] = 1,
) -> None:
    """Migrate the database, create a demo integration on first start, and serve the API."""
    import uvicorn

    settings = get_settings()
    _refuse_unrunnable(settings)
    if workers > 1 and settings.is_sqlite:
        typer.echo("error: several workers need PostgreSQL (DEALBROKER_DATABASE_URL)", err=True)
        raise typer.Exit(2)
    upgrade(settings.database_url)

    async def demo(session: AsyncSession) -> integrations.Credentials | None:
        if await integrations.any_exist(session):
            return None
        return await integrations.create(session, DEMO_NAME)

    # The demo integration is the sandbox's quick start. A production server's output ends up
    # in its logs, which must never hold credentials: there an operator registers integrations
    # with `dealbroker integrations create`, which prints them to the operator alone.
    created = _in_transaction(demo) if settings.is_sandbox else None
    if not settings.is_sandbox:
        typer.echo(
            "Production: integrations are registered with `dealbroker integrations create NAME`."
        )
    elif created:
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
    log_config = logs.config(settings.log_level, settings.log_format)
    logging.config.dictConfig(log_config)
    metrics_server.start(settings)
    uvicorn.run(
        "dealbroker.app:create_app",
        factory=True,
        host=bind_host,
        port=bind_port,
        workers=workers,
        access_log=False,  # our own log redacts capability links; uvicorn's would not
        log_level=settings.log_level,
        log_config=log_config,  # in every server process, also with --workers
    )


def worker() -> None:
    """Run the background jobs until SIGTERM or SIGINT: webhook deliveries, deal deadlines,
    payment-provider calls, purges. The batch in flight is finished first.

    Several workers may run side by side on PostgreSQL.
    """
    from dealbroker.worker import Runner

    settings = get_settings()
    _refuse_unrunnable(settings)
    logs.configure(settings.log_level, settings.log_format)

    metrics_server.start(settings)

    async def run() -> None:
        engine = create_engine(settings.database_url, settings.db_pool_size)
        if settings.metrics_enabled:
            instrument_pool(engine, "worker")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        sessionmaker = create_sessionmaker(engine)
        await start_messages(sessionmaker, settings)
        runner = Runner(sessionmaker, settings, engine)
        logs.process_log.info("running jobs: %s", ", ".join(job.name for job in runner.jobs))
        try:
            await runner.run(stop)
        finally:
            await runner.aclose()
            await engine.dispose()
        sent = getattr(runner.job("deliveries"), "sent", 0)
        logs.process_log.info("stopped after %d deliveries", sent)

    asyncio.run(run())
