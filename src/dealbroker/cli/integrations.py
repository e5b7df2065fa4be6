"""``dealbroker integrations``: register integrations and manage their credentials."""

import json
from typing import Annotated

import typer

from dealbroker.cli.common import _in_transaction
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import Integration

app = typer.Typer(help="Register integrations and manage their credentials.", no_args_is_help=True)


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


@app.command("create")
def integrations_create(
    name: Annotated[str, typer.Argument(help="A name for the marketplace.")],
    scope: Annotated[list[str] | None, typer.Option(help="A scope to grant (repeatable).")] = None,
) -> None:
    """Register an integration; prints its credentials (the client secret only this once)."""
    created = _in_transaction(lambda s: integrations.create(s, name, scope))
    typer.echo(json.dumps(_describe(created.integration, created.client_secret), indent=2))


@app.command("list")
def integrations_list() -> None:
    """List integrations (never their client secrets)."""
    for integration in _in_transaction(integrations.list_all):
        typer.echo(json.dumps(_describe(integration)))


@app.command("rotate-secret")
def integrations_rotate(client_id: str) -> None:
    """Issue a new client secret; the old secret and its tokens stop working at once."""
    rotated = _in_transaction(lambda s: integrations.rotate_secret(s, client_id))
    typer.echo(json.dumps(_describe(rotated.integration, rotated.client_secret), indent=2))


@app.command("disable")
def integrations_disable(client_id: str) -> None:
    """Disable an integration and revoke its tokens at once; its deals' pages are suspended."""
    _in_transaction(lambda s: integrations.set_active(s, client_id, False))
    typer.echo(f"disabled {client_id}; its tokens are revoked and its deals suspended")


@app.command("enable")
def integrations_enable(client_id: str) -> None:
    """Enable a disabled integration again (it must request new tokens)."""
    _in_transaction(lambda s: integrations.set_active(s, client_id, True))
    typer.echo(f"enabled {client_id}")
