"""The ``dealbroker`` command: serve, migrate, and the operator's integration commands."""

import asyncio
import json
import logging
import os
import signal
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.errors import DomainError
from dealbroker.core.migrate import upgrade
from dealbroker.core.responses import dump
from dealbroker.core.settings import Settings, get_settings
from dealbroker.events import service as events
from dealbroker.events.schemas import EndpointCreate, EndpointUpdate, attempt_out, endpoint_out
from dealbroker.events.service import EndpointChange
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import Integration
from dealbroker.payments.provider import startup_problem

app = typer.Typer(
    help="dealbroker: brokers second-hand deals for marketplaces.", no_args_is_help=True
)
integrations_app = typer.Typer(
    help="Register integrations and manage their credentials.", no_args_is_help=True
)
app.add_typer(integrations_app, name="integrations")

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
DEMO_NAME = "Demo integration"


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
            return await work(create_sessionmaker(engine))
        finally:
            await engine.dispose()

    try:
        return asyncio.run(run())
    except DomainError as exc:
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


def _refuse_unrunnable(settings: Settings) -> None:
    """Stop before touching the database or a port when this configuration may not run (e.g.
    the simulated payment provider outside the sandbox)."""
    problem = startup_problem(settings)
    if problem is not None:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)


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
    _refuse_unrunnable(settings)
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


@app.command()
def worker() -> None:
    """Run the background jobs until SIGTERM or SIGINT: webhook deliveries, deal deadlines,
    payment-provider calls, purges. The batch in flight is finished first.

    Several workers may run side by side on PostgreSQL.
    """
    from dealbroker.worker import Runner

    settings = get_settings()
    _refuse_unrunnable(settings)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )

    async def run() -> None:
        engine = create_engine(settings.database_url, settings.db_pool_size)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        runner = Runner(create_sessionmaker(engine), settings, engine)
        typer.echo(f"running jobs: {', '.join(job.name for job in runner.jobs)}", err=True)
        try:
            await runner.run(stop)
        finally:
            await runner.aclose()
            await engine.dispose()
        sent = getattr(runner.job("deliveries"), "sent", 0)
        typer.echo(f"stopped after {sent} deliveries", err=True)

    asyncio.run(run())


webhooks_app = typer.Typer(
    help="Manage an integration's webhook endpoints and deliveries.", no_args_is_help=True
)
app.add_typer(webhooks_app, name="webhooks")
ClientId = Annotated[str, typer.Option("--client-id", help="The integration's client id.")]


def _for_integration(
    client_id: str, work: Callable[[AsyncSession, "uuid.UUID"], Awaitable[T]]
) -> T:
    async def run(session: AsyncSession) -> T:
        integration = await integrations.get_by_client_id(session, client_id)
        return await work(session, integration.id)

    return _in_transaction(run)


def _print(payload: object) -> None:
    typer.echo(dump(payload).decode())


@webhooks_app.command("list")
def webhooks_list(client_id: ClientId) -> None:
    """List the integration's webhook endpoints."""
    for endpoint in _for_integration(client_id, events.list_endpoints):
        _print(endpoint_out(endpoint))


@webhooks_app.command("create")
def webhooks_create(
    client_id: ClientId,
    url: str,
    event: Annotated[
        list[str] | None, typer.Option(help="An event kind to receive (repeatable).")
    ] = None,
    description: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Register a webhook endpoint (all event kinds unless --event is given)."""
    body = _validated(EndpointCreate, {"url": url, "events": event, "description": description})
    settings = get_settings()
    created = _for_integration(
        client_id,
        lambda s, i: events.create_endpoint(
            s,
            i,
            settings,
            url=body.url,
            event_kinds=body.events,
            description=body.description,
            enabled=True,
        ),
    )
    _print(endpoint_out(created))


@webhooks_app.command("update")
def webhooks_update(
    client_id: ClientId,
    endpoint_id: uuid.UUID,
    url: Annotated[str | None, typer.Option()] = None,
    event: Annotated[list[str] | None, typer.Option(help="Replace the kinds received.")] = None,
    all_events: Annotated[bool, typer.Option("--all-events", help="Receive every kind.")] = False,
    description: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Change a webhook endpoint."""
    body = _validated(EndpointUpdate, {"url": url, "events": event, "description": description})
    change = EndpointChange(
        url=body.url,
        event_kinds=body.events,
        clear_event_kinds=all_events,
        description=body.description,
    )
    settings = get_settings()
    updated = _for_integration(
        client_id, lambda s, i: events.update_endpoint(s, i, endpoint_id, settings, change)
    )
    _print(endpoint_out(updated))


@webhooks_app.command("delete")
def webhooks_delete(client_id: ClientId, endpoint_id: uuid.UUID) -> None:
    """Delete a webhook endpoint and its pending deliveries."""
    _for_integration(client_id, lambda s, i: events.delete_endpoint(s, i, endpoint_id))
    typer.echo(f"deleted {endpoint_id}")


@webhooks_app.command("enable")
def webhooks_enable(client_id: ClientId, endpoint_id: uuid.UUID) -> None:
    """Enable an endpoint; deliveries waiting for it resume."""
    _print(
        endpoint_out(
            _for_integration(client_id, lambda s, i: events.change_enabled(s, i, endpoint_id, True))
        )
    )


@webhooks_app.command("disable")
def webhooks_disable(client_id: ClientId, endpoint_id: uuid.UUID) -> None:
    """Disable an endpoint; its deliveries wait until it is enabled again."""
    _print(
        endpoint_out(
            _for_integration(
                client_id, lambda s, i: events.change_enabled(s, i, endpoint_id, False)
            )
        )
    )


@webhooks_app.command("test")
def webhooks_test(client_id: ClientId, endpoint_id: uuid.UUID) -> None:
    """Queue a test event (kind webhook.test) for one endpoint."""
    event = _for_integration(client_id, lambda s, i: events.send_test_event(s, i, endpoint_id))
    _print({"eventId": event.id})


@webhooks_app.command("attempts")
def webhooks_attempts(
    client_id: ClientId,
    endpoint_id: uuid.UUID,
    page: Annotated[int, typer.Option(min=1)] = 1,
    page_size: Annotated[int, typer.Option(min=1, max=100)] = 20,
) -> None:
    """Delivery attempts to an endpoint, newest first."""
    result = _for_integration(
        client_id, lambda s, i: events.attempts(s, i, endpoint_id, page, page_size)
    )
    for attempt in result.attempts:
        _print(attempt_out(attempt))


@webhooks_app.command("resend")
def webhooks_resend(
    client_id: ClientId,
    event_id: uuid.UUID,
    endpoint_id: Annotated[uuid.UUID | None, typer.Option(help="Only to this endpoint.")] = None,
) -> None:
    """Send an event again, with its original webhook-id."""
    queued = _for_integration(client_id, lambda s, i: events.resend(s, i, event_id, endpoint_id))
    _print({"queued": queued})


@webhooks_app.command("recover")
def webhooks_recover(
    client_id: ClientId,
    endpoint_id: uuid.UUID,
    since: Annotated[
        datetime, typer.Option(help="Re-queue deliveries that failed since this time (UTC).")
    ],
) -> None:
    """Queue again every delivery to an endpoint that failed for good since a time."""
    moment = since if since.tzinfo else since.replace(tzinfo=UTC)
    queued = _for_integration(client_id, lambda s, i: events.recover(s, i, endpoint_id, moment))
    _print({"queued": queued})


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


disputes_app = typer.Typer(help="Resolve disputes (a buyer denied the item).", no_args_is_help=True)
app.add_typer(disputes_app, name="disputes")


@disputes_app.command("list")
def disputes_list() -> None:
    """Deals in dispute (Shipping_Review_Denied or Pickup_Denied), oldest change first."""
    from dealbroker.deals import flows

    for deal in _in_transaction(flows.in_dispute):
        _print(
            {
                "dealId": deal.id,
                "status": deal.status,
                "integrationId": deal.integration_id,
                "updatedAt": deal.updated_at,
            }
        )


@disputes_app.command("resolve")
def disputes_resolve(
    deal_id: uuid.UUID,
    release: Annotated[
        bool, typer.Option("--release", help="Pay the seller (deal Completed).")
    ] = False,
    refund: Annotated[
        bool, typer.Option("--refund", help="Refund the buyer (deal Refunded).")
    ] = False,
) -> None:
    """Settle a dispute: release the money to the seller, or refund the buyer."""
    if release == refund:
        typer.echo("error: give exactly one of --release or --refund", err=True)
        raise typer.Exit(2)
    from dealbroker.deals import flows
    from dealbroker.payments.tasks import make_pending_calls

    settings = get_settings()
    _in_transaction(lambda s: flows.resolve_dispute(s, deal_id, release, settings))
    # The refund or payout the resolution decided is made now, so the operator sees its outcome.
    _with_sessionmaker(lambda sm: make_pending_calls(sm, settings))
    deal = _in_transaction(lambda s: flows.operator_view(s, deal_id))
    _print({"dealId": deal_id, "status": deal.status, "paymentStatus": deal.payment_status})


sandbox_app = typer.Typer(help="Sandbox helpers.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("advance-clock")
def sandbox_advance_clock(
    client_id: ClientId,
    seconds: Annotated[int, typer.Option(min=1, help="How far to move the clock ahead.")],
) -> None:
    """Move an integration's sandbox clock ahead; deadlines now due fire at once."""
    settings = get_settings()
    if not settings.is_sandbox:
        typer.echo("error: the clock can only move in the sandbox", err=True)
        raise typer.Exit(2)
    from dealbroker.sandbox import service as sandbox

    async def advance(session: AsyncSession) -> tuple[int, int]:
        integration = await integrations.get_by_client_id(session, client_id)
        return await sandbox.advance_clock(session, integration, seconds)

    offset, moved = _in_transaction(advance)

    fired = _with_sessionmaker(lambda sm: sandbox.let_time_pass(sm, settings))
    _print({"clockOffsetSeconds": offset, "timersMoved": moved, "timersFired": fired})
