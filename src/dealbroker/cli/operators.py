"""``dealbroker operators``: the back office's operators, their roles, and a one-time login
link (the first login of a new deployment, or where no OpenID provider is configured)."""

from typing import Annotated

import typer

from dealbroker.cli.common import _in_transaction, _print
from dealbroker.core.settings import get_settings

app = typer.Typer(help="Operators of the back office and their roles.", no_args_is_help=True)
Roles = Annotated[
    list[str],
    typer.Option(
        "--role",
        help="support (disputes, deals), finance (payouts, refunds), admin "
        "(integrations, webhooks, operators); repeat for several.",
    ),
]


@app.command("add")
def operators_add(
    email: str,
    role: Roles,
    name: Annotated[str, typer.Option("--name", help="How the back office names them.")] = "",
) -> None:
    """Add an operator with one or more roles."""
    from dealbroker.audit.service import Actor
    from dealbroker.operators import service

    operator = _in_transaction(lambda s: service.add(s, email, role, Actor.system(), name))
    _print(service.describe(operator))


@app.command("list")
def operators_list() -> None:
    """Every operator, one JSON object a line."""
    from dealbroker.operators import service

    for operator in _in_transaction(service.every):
        _print(service.describe(operator))


@app.command("disable")
def operators_disable(
    email: str,
    enable: Annotated[bool, typer.Option("--enable", help="Enable them again instead.")] = False,
) -> None:
    """Disable an operator: their sessions end at once and no login works any more."""
    from dealbroker.audit.service import Actor
    from dealbroker.operators import service

    operator = _in_transaction(lambda s: service.set_disabled(s, email, not enable, Actor.system()))
    _print(service.describe(operator))


@app.command("roles")
def operators_roles(email: str, role: Roles) -> None:
    """Give an operator exactly these roles (their sessions end: the next login has them)."""
    from dealbroker.audit.service import Actor
    from dealbroker.operators import service

    operator = _in_transaction(lambda s: service.set_roles(s, email, role, Actor.system()))
    _print(service.describe(operator))


@app.command("login-link")
def operators_login_link(email: str) -> None:
    """Print a one-time back office login link for an operator, valid for
    DEALBROKER_OPERATOR_LINK_MINUTES minutes; give it to them only."""
    from dealbroker.audit.service import Actor
    from dealbroker.operators import service

    settings = get_settings()
    link, expires = _in_transaction(
        lambda s: service.issue_login_link(s, email, settings, Actor.system())
    )
    _print({"link": link, "expiresAt": expires})
