"""``dealbroker portal members``: who may use the developer portal for an integration, and
their roles (an integration's first owner is added here; owners add the others on the
portal's members page); ``dealbroker portal login-link``: a one-time login link for a member,
printed rather than e-mailed."""

from typing import TYPE_CHECKING, Annotated

import typer
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.cli.common import _in_transaction, _print
from dealbroker.core.settings import get_settings

if TYPE_CHECKING:
    from dealbroker.portal.models import PortalMember

app = typer.Typer(help="The developer portal.", no_args_is_help=True)
members = typer.Typer(help="Members of an integration and their roles.", no_args_is_help=True)
app.add_typer(members, name="members")

ClientId = Annotated[str, typer.Argument(help="The integration's client id.")]
Role = Annotated[
    str,
    typer.Argument(
        help="read-only (reads the portal), developer (also webhooks and the sandbox) or "
        "owner (also secrets and members)."
    ),
]


@members.command("add")
def members_add(client_id: ClientId, email: str, role: Role) -> None:
    """Add a member to an integration with a role."""
    from dealbroker.audit.service import Actor
    from dealbroker.integrations import service as integrations
    from dealbroker.portal import service

    async def add(session: AsyncSession) -> "PortalMember":
        integration = await integrations.get_by_client_id(session, client_id)
        return await service.add(session, integration.id, email, role, Actor.system())

    _print(service.describe(_in_transaction(add)))


@members.command("list")
def members_list(client_id: ClientId) -> None:
    """The integration's members, one JSON object a line."""
    from dealbroker.integrations import service as integrations
    from dealbroker.portal import service

    async def every(session: AsyncSession) -> "list[PortalMember]":
        integration = await integrations.get_by_client_id(session, client_id)
        return await service.members(session, integration.id)

    for member in _in_transaction(every):
        _print(service.describe(member))


@members.command("role")
def members_role(client_id: ClientId, email: str, role: Role) -> None:
    """Give a member another role (the last owner stays an owner)."""
    from dealbroker.audit.service import Actor
    from dealbroker.integrations import service as integrations
    from dealbroker.portal import service

    async def change(session: AsyncSession) -> "PortalMember":
        integration = await integrations.get_by_client_id(session, client_id)
        member = await service.find(session, integration.id, email)
        return await service.set_role(session, integration.id, member.id, role, Actor.system())

    _print(service.describe(_in_transaction(change)))


@members.command("remove")
def members_remove(client_id: ClientId, email: str) -> None:
    """Remove a member (never the last owner); their portal sessions end."""
    from dealbroker.audit.service import Actor
    from dealbroker.integrations import service as integrations
    from dealbroker.portal import service

    async def remove(session: AsyncSession) -> dict[str, object]:
        integration = await integrations.get_by_client_id(session, client_id)
        member = await service.find(session, integration.id, email)
        described = service.describe(member)
        await service.remove(session, integration.id, member.id, Actor.system())
        return described

    _print({**_in_transaction(remove), "removed": True})


@app.command("login-link")
def login_link(email: str) -> None:
    """Print a one-time developer portal login link for a member, valid for
    DEALBROKER_OPERATOR_LINK_MINUTES minutes, instead of e-mailing it (no mail server, or a
    mail that does not arrive); give it to them only. Recorded in the audit trail. Its host is
    DEALBROKER_BASE_URL: set it as the server has it."""
    from dealbroker.audit.service import Actor
    from dealbroker.portal import service

    settings = get_settings()
    link, expires = _in_transaction(
        lambda s: service.issue_login_link(s, email, settings, Actor.system())
    )
    _print({"link": link, "expiresAt": expires})
