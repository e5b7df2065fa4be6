"""The top-level commands: ``migrate``, ``serve`` and ``worker``."""

import asyncio
import logging.config
import os
import signal
from typing import Annotated, Any

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker import metrics_server
from dealbroker.carriers import registry as carriers
from dealbroker.cli.common import _in_transaction, start_messages
from dealbroker.cli.supervisor import Supervisor
from dealbroker.core import logs, startup
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.metrics import instrument_pool
from dealbroker.core.migrate import (
    NotReady,
    head_revision,
    is_newer,
    schema_mismatch,
    schema_revision,
    upgrade,
    wait_until_ready,
)
from dealbroker.core.settings import Settings, get_settings
from dealbroker.integrations import service as integrations
from dealbroker.payments.provider import startup_problem
from dealbroker.signatures import policy as signatures

DEMO_NAME = "Demo integration"
APP = "dealbroker.app:create_app"


def _refuse_unrunnable(settings: Settings) -> None:
    """Stop before touching the database or a port when this configuration may not run (e.g.
    the simulated payment provider outside the sandbox)."""
    problem = (
        startup_problem(settings)
        or signatures.startup_problem(settings)
        or carriers.startup_problem(settings)
    )
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)


def _wait_for_database(settings: Settings, need_schema: bool) -> None:
    """Wait for the database to answer (and, with ``need_schema``, for its schema to be this
    code's) up to ``DEALBROKER_STARTUP_WAIT_SECONDS``; past that, exit 1 with one log line."""
    wait = settings.startup_wait_seconds

    def waiting(problem: str) -> None:
        logs.process_log.warning("waiting up to %g s at start: %s", wait, problem)

    try:
        wait_until_ready(settings.database_url, wait, need_schema, waiting)
    except NotReady as exc:
        logs.process_log.error("cannot start: %s", exc)
        raise typer.Exit(1) from None


def migrate(
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Change nothing: exit 0 if the schema is the one this code needs, 1 if not "
            "(saying which revision it is at and which it needs).",
        ),
    ] = False,
) -> None:
    """Bring the database schema up to date (waiting for the database to answer first)."""
    settings = get_settings()
    logs.configure(settings.log_level, settings.log_format)
    if check:
        current = None
        try:
            current = schema_revision(settings.database_url)
            mismatch = schema_mismatch(current)
        except NotReady as exc:
            mismatch = str(exc)
        if mismatch is not None:
            logs.process_log.error("%s", mismatch)
            raise typer.Exit(1)
        typer.echo(f"database schema is at {current}, {_serves(current)}")
        return
    _wait_for_database(settings, need_schema=False)
    _upgrade(settings.database_url)
    typer.echo("database is up to date")


def _serves(current: str | None) -> str:
    if is_newer(current):
        return f"newer than this code's {head_revision()}, which runs on it"
    return "the one this code needs"


def _upgrade(database_url: str) -> None:
    """Migrate to this code's newest revision, unless a newer release already went further."""
    try:
        current = schema_revision(database_url)
    except NotReady as exc:  # it answered a moment ago
        logs.process_log.error("cannot start: %s", exc)
        raise typer.Exit(1) from None
    if is_newer(current):
        logs.process_log.warning("database schema is at %s: %s", current, _serves(current))
        return
    upgrade(database_url)


def serve(
    host: Annotated[str | None, typer.Option(help="Interface to listen on.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on.")] = None,
    workers: Annotated[int, typer.Option(help="Server processes (PostgreSQL only).")] = 1,
) -> None:
    """Migrate the database (DEALBROKER_MIGRATE_ON_START) or wait for its schema, create a demo
    integration on first start (sandbox), and serve the API.

    With --workers, SIGHUP replaces the server processes one by one, each new one serving
    before the old one stops. Exits 0 only when stopped by SIGTERM or SIGINT."""
    import uvicorn

    settings = get_settings()
    _refuse_unrunnable(settings)
    if workers > 1 and settings.is_sqlite:
        typer.echo("error: several workers need PostgreSQL (DEALBROKER_DATABASE_URL)", err=True)
        raise typer.Exit(2)
    log_config = logs.config(settings.log_level, settings.log_format)
    logging.config.dictConfig(log_config)
    _wait_for_database(settings, need_schema=not settings.migrates_on_start)
    if settings.migrates_on_start:
        _upgrade(settings.database_url)

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
        if not settings.eid_enabled:  # the operator's choice (DEALBROKER_SIMPLE_SIGNATURE)
            typer.echo("Production: signatures are by typed name, not eID.")
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
    if get_settings().local_outbox:
        typer.echo(
            "Sandbox: no mail server (DEALBROKER_SMTP_HOST): what would be e-mailed is at "
            f"{get_settings().base_url}/sandbox/outbox; a developer portal login link also "
            "from `dealbroker portal login-link EMAIL`."
        )
    typer.echo(f"Serving on http://{bind_host}:{bind_port} (API docs at /docs)")
    metrics_server.start(settings)
    options: dict[str, Any] = {
        "factory": True,
        "host": bind_host,
        "port": bind_port,
        "workers": workers,
        "access_log": False,  # our own log redacts capability links; uvicorn's would not
        "log_level": settings.log_level,
        "log_config": log_config,  # in every server process, also with --workers
    }
    if workers == 1:
        # uvicorn's single server leaves SIGHUP to its default, which ends the process: a
        # reload (``ExecReload=``) would stop the API, and systemd would count that clean.
        signal.signal(signal.SIGHUP, _no_reload)
        uvicorn.run(APP, **options)
        return
    # How long a new server process may take to start (SIGHUP, a replacement) before the
    # supervisor gives up on it: a loaded host needs more than uvicorn's 5 s.
    config = uvicorn.Config(APP, timeout_worker_healthcheck=30, **options)
    supervisor = Supervisor(config, sockets=[config.bind_socket()])
    supervisor.run()
    if not supervisor.stopped_by_signal:
        logs.process_log.error("stopped: a server process could not start (logged above)")
        raise typer.Exit(1)


def _no_reload(_signal: int, _frame: object) -> None:
    logs.process_log.warning("SIGHUP ignored: a reload needs serve --workers 2 or more")


def worker() -> None:
    """Run the background jobs until SIGTERM or SIGINT: webhook deliveries, deal deadlines,
    payment-provider calls, purges. The batch in flight is finished first.

    Several workers may run side by side on PostgreSQL.
    """
    from dealbroker.worker import Runner

    settings = get_settings()
    _refuse_unrunnable(settings)
    logs.configure(settings.log_level, settings.log_format)
    _wait_for_database(settings, need_schema=True)  # a worker never migrates
    metrics_server.start(settings)

    async def run() -> None:
        engine = create_engine(
            settings.database_url,
            settings.db_pool_size,
            statement_timeout=settings.db_statement_timeout_seconds,
        )
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
        # Each batch of deliveries keeps enough objects alive to set off a full collection every
        # few batches, which walked all that starting made (bench/bench_send_path.py --gc
        # default against freeze; bench/README.md).
        startup.freeze()
        try:
            await runner.run(stop)
        finally:
            await runner.aclose()
            await engine.dispose()
        sent = getattr(runner.job("deliveries"), "sent", 0)
        logs.process_log.info("stopped after %d deliveries", sent)

    # uvloop where it is installed (uvicorn[standard] brings it; serve runs on it already):
    # the delivery job is bound by the event loop's own work, and uvloop's is cheaper
    # (bench/README.md).
    with asyncio.Runner(loop_factory=_loop_factory()) as loop_runner:
        loop_runner.run(run())


def _loop_factory() -> Any:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
