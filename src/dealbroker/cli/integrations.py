"""``dealbroker integrations``: register integrations and manage their credentials."""

import json
from datetime import timedelta
from enum import StrEnum
from typing import Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit.service import Actor
from dealbroker.cli.common import _in_transaction, _print
from dealbroker.core import clock
from dealbroker.core.settings import get_settings
from dealbroker.integrations import request_log
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import Integration
from dealbroker.integrations.schemas import api_request_out

app = typer.Typer(help="Register integrations and manage their credentials.", no_args_is_help=True)


def _describe(
    integration: Integration, secret: str | None = None, *, with_webhook_secret: bool = False
) -> dict[str, object]:
    """An integration as JSON. The client secret only when just issued, the webhook secret only
    from the commands that issue it or hand it to the operator on purpose."""
    out = integrations.describe(integration)
    if with_webhook_secret:
        out["webhook_secret"] = integration.webhook_secret
    if secret:
        out["client_secret"] = secret
    return out


@app.command("create")
def integrations_create(
    name: Annotated[str, typer.Argument(help="A name for the marketplace.")],
    scope: Annotated[list[str] | None, typer.Option(help="A scope to grant (repeatable).")] = None,
) -> None:
    """Register an integration; prints its credentials (the client secret only this once)."""
    created = _in_transaction(lambda s: integrations.create(s, name, scope, Actor.system()))
    described = _describe(created.integration, created.client_secret, with_webhook_secret=True)
    typer.echo(json.dumps(described, indent=2))


@app.command("list")
def integrations_list() -> None:
    """List integrations (never their secrets: `webhook-secret CLIENT_ID` shows that one)."""
    for integration in _in_transaction(integrations.list_all):
        typer.echo(json.dumps(_describe(integration)))


@app.command("webhook-secret")
def integrations_webhook_secret(client_id: str) -> None:
    """Print the integration's webhook secret(s) for its marketplace's engineers: the current
    one, and while a rotation's overlap lasts, the one it replaces with when it stops."""

    async def read(session: AsyncSession) -> dict[str, object]:
        integration = await integrations.get_by_client_id(session, client_id)
        out: dict[str, object] = {
            "client_id": client_id,
            "webhook_secret": integration.webhook_secret,
        }
        secrets = integrations.webhook_signing_secrets(
            integration.webhook_secret,
            integration.previous_webhook_secret,
            integration.previous_webhook_secret_expires_at,
            clock.now(),
        )
        if len(secrets) > 1:
            expires = integration.previous_webhook_secret_expires_at
            assert expires is not None  # an overlap lasts until it
            out["previous_webhook_secret"] = secrets[1]
            out["previous_webhook_secret_expires_at"] = expires.isoformat()
        return out

    typer.echo(json.dumps(_in_transaction(read), indent=2))


@app.command("rotate-secret")
def integrations_rotate(client_id: str) -> None:
    """Issue a new client secret; the old secret and its tokens stop working at once."""

    rotated = _in_transaction(lambda s: integrations.rotate_secret(s, client_id, Actor.system()))
    typer.echo(json.dumps(_describe(rotated.integration, rotated.client_secret), indent=2))


@app.command("rotate-webhook-secret")
def integrations_rotate_webhook_secret(
    client_id: str,
    overlap_seconds: Annotated[
        int,
        typer.Option(
            min=0,
            max=int(integrations.MAX_WEBHOOK_OVERLAP.total_seconds()),
            help="How long the old secret stays valid beside the new one (0: it stops now).",
        ),
    ] = int(integrations.DEFAULT_WEBHOOK_OVERLAP.total_seconds()),
) -> None:
    """Issue a new webhook secret and print it. During the overlap, deliveries are signed with
    the old and the new secret, and the sandbox triggers accept either."""

    async def rotate(session: AsyncSession) -> integrations.WebhookSecretRotation:
        integration = await integrations.get_by_client_id(session, client_id)
        overlap = timedelta(seconds=overlap_seconds)
        return await integrations.rotate_webhook_secret(
            session, integration.id, overlap, Actor.system()
        )

    rotated = _in_transaction(rotate)
    expires = rotated.previous_expires_at
    out = {
        "client_id": client_id,
        "webhook_secret": rotated.webhook_secret,
        "previous_webhook_secret_expires_at": expires.isoformat() if expires else None,
    }
    typer.echo(json.dumps(out, indent=2))


@app.command("disable")
def integrations_disable(client_id: str) -> None:
    """Disable an integration and revoke its tokens at once; its deals' pages are suspended."""
    _in_transaction(lambda s: integrations.set_active(s, client_id, False, Actor.system()))
    typer.echo(f"disabled {client_id}; its tokens are revoked and its deals suspended")


@app.command("enable")
def integrations_enable(client_id: str) -> None:
    """Enable a disabled integration again (it must request new tokens)."""
    _in_transaction(lambda s: integrations.set_active(s, client_id, True, Actor.system()))
    typer.echo(f"enabled {client_id}")


class StatusClass(StrEnum):
    """The classes of ``request_log.STATUS_CLASSES``, as the command's choices."""

    success = "2xx"
    client_error = "4xx"
    server_error = "5xx"


@app.command("requests")
def integrations_requests(
    client_id: str,
    status: Annotated[StatusClass | None, typer.Option(help="Only answers of this class.")] = None,
    route: Annotated[
        str | None, typer.Option(help="Only this route template, e.g. /deals/v1/deals/{dealId}.")
    ] = None,
    page: Annotated[int, typer.Option(min=1)] = 1,
    page_size: Annotated[int, typer.Option(min=1, max=100)] = 20,
) -> None:
    """The integration's API requests of the last days, newest first, one JSON line each (as
    GET /integrations/v1/requests lists them to the integration)."""
    keep_days = get_settings().api_request_log_days

    async def read(session: AsyncSession) -> request_log.RequestPage:
        integration = await integrations.get_by_client_id(session, client_id)
        return await request_log.list_requests(
            session,
            integration.id,
            keep_days=keep_days,
            status_class=None if status is None else status.value,
            route=route,
            page=page,
            size=page_size,
        )

    for found in _in_transaction(read).requests:
        _print(api_request_out(found))
