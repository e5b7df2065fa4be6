"""``dealbroker webhooks``: manage an integration's webhook endpoints and deliveries."""

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit.service import Actor
from dealbroker.cli.common import ClientId, T, _in_transaction, _print, _validated
from dealbroker.core.settings import get_settings
from dealbroker.events import service as events
from dealbroker.events.schemas import EndpointCreate, EndpointUpdate, attempt_out, endpoint_out
from dealbroker.events.service import By, EndpointChange
from dealbroker.integrations import service as integrations

app = typer.Typer(
    help="Manage an integration's webhook endpoints and deliveries.", no_args_is_help=True
)


def _for_integration(
    client_id: str, work: Callable[[AsyncSession, "uuid.UUID"], Awaitable[T]]
) -> T:
    """Run ``work`` for the integration, in one transaction."""

    async def run(session: AsyncSession) -> T:
        integration = await integrations.get_by_client_id(session, client_id)
        return await work(session, integration.id)

    return _in_transaction(run)


def _by() -> By:
    """A change made here: in the audit trail as the system user who ran the command (the
    service records it in the change's transaction)."""
    return By(Actor.system())


@app.command("list")
def webhooks_list(client_id: ClientId) -> None:
    """List the integration's webhook endpoints."""
    for endpoint in _for_integration(client_id, events.list_endpoints):
        _print(endpoint_out(endpoint))


@app.command("create")
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
            by=_by(),
        ),
    )
    _print(endpoint_out(created))


@app.command("update")
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
        client_id,
        lambda s, i: events.update_endpoint(s, i, endpoint_id, settings, change, _by()),
    )
    _print(endpoint_out(updated))


@app.command("delete")
def webhooks_delete(client_id: ClientId, endpoint_id: uuid.UUID) -> None:
    """Delete a webhook endpoint and its pending deliveries."""
    _for_integration(
        client_id,
        lambda s, i: events.delete_endpoint(s, i, endpoint_id, _by()),
    )
    typer.echo(f"deleted {endpoint_id}")


@app.command("enable")
def webhooks_enable(client_id: ClientId, endpoint_id: uuid.UUID) -> None:
    """Enable an endpoint; deliveries waiting for it resume."""
    _set_enabled(client_id, endpoint_id, True)


@app.command("disable")
def webhooks_disable(client_id: ClientId, endpoint_id: uuid.UUID) -> None:
    """Disable an endpoint; its deliveries wait until it is enabled again."""
    _set_enabled(client_id, endpoint_id, False)


def _set_enabled(client_id: str, endpoint_id: uuid.UUID, enabled: bool) -> None:
    _print(
        endpoint_out(
            _for_integration(
                client_id,
                lambda s, i: events.change_enabled(s, i, endpoint_id, enabled, _by()),
            )
        )
    )


@app.command("test")
def webhooks_test(client_id: ClientId, endpoint_id: uuid.UUID) -> None:
    """Queue a test event (kind webhook.test) for one endpoint."""
    event = _for_integration(
        client_id, lambda s, i: events.send_test_event(s, i, endpoint_id, _by())
    )
    _print({"eventId": event.id})


@app.command("attempts")
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


@app.command("resend")
def webhooks_resend(
    client_id: ClientId,
    event_id: uuid.UUID,
    endpoint_id: Annotated[uuid.UUID | None, typer.Option(help="Only to this endpoint.")] = None,
) -> None:
    """Send an event again, with its original webhook-id."""
    queued = _for_integration(
        client_id,
        lambda s, i: events.resend(s, i, event_id, endpoint_id, _by()),
    )
    _print({"queued": queued})


@app.command("recover")
def webhooks_recover(
    client_id: ClientId,
    endpoint_id: uuid.UUID,
    since: Annotated[
        datetime, typer.Option(help="Re-queue deliveries that failed since this time (UTC).")
    ],
    now: Annotated[
        bool,
        typer.Option("--now", help="Also retry now the deliveries waiting for their next attempt."),
    ] = False,
) -> None:
    """Queue again every delivery to an endpoint that failed for good since a time, and the
    events it never got; with --now, retry at once what waits for its next attempt."""
    moment = since if since.tzinfo else since.replace(tzinfo=UTC)
    queued = _for_integration(
        client_id,
        lambda s, i: events.recover(s, i, endpoint_id, moment, waiting=now, by=_by()),
    )
    _print({"queued": queued})
