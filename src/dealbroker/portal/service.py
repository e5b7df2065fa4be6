"""The developer portal's members and how they log in: the one service every caller uses (the
CLI's ``portal members`` commands and the portal's pages).

Every change of a member, and every login and logout, is recorded in the audit trail in the
change's transaction. A member of one integration never reaches another's: every function
that takes a member's id takes the integration it must belong to as well.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core import clock, login
from dealbroker.core.errors import BadRequest, Conflict, NotFound, Unauthorized, found
from dealbroker.core.settings import Settings
from dealbroker.integrations.models import Integration
from dealbroker.notifications import service as notifications
from dealbroker.portal import repository
from dealbroker.portal.models import (
    ROLES,
    PortalLoginLink,
    PortalMember,
    PortalSession,
    at_least,
)

MAX_EMAIL = login.MAX_EMAIL
LINK_PATH = "/portal/login/"
# How long a link's row is kept after it was made: the per-address bound counts them.
LINK_MEMORY = timedelta(hours=1)


class LastOwner(Conflict):
    """The change would leave the integration without an owner."""


def describe(member: PortalMember) -> dict[str, object]:
    """A member as the CLI prints it and the audit trail keeps it."""
    return {
        "id": member.id,
        "integrationId": member.integration_id,
        "email": member.email,
        "role": member.role,
        "createdAt": member.created_at,
    }


def _role(role: str) -> str:
    if role not in ROLES:
        raise BadRequest(f"unknown role {role[:40]}: the roles are {', '.join(ROLES)}")
    return role


async def members(session: AsyncSession, integration_id: uuid.UUID) -> list[PortalMember]:
    """The integration's members, by address."""
    return list(await repository.members_of(session, integration_id))


async def find(session: AsyncSession, integration_id: uuid.UUID, email: str) -> PortalMember:
    return found(
        await repository.member_by_email(session, integration_id, email[:MAX_EMAIL].lower()),
        f"no member {email[:MAX_EMAIL]} in this integration",
    )


async def _of(
    session: AsyncSession, integration_id: uuid.UUID, member_id: uuid.UUID
) -> PortalMember:
    """The member ``member_id`` of ``integration_id``, locked; another integration's member is
    not found, as an unknown one."""
    member = await repository.member_for_update(session, member_id)
    if member is None or member.integration_id != integration_id:
        raise NotFound(f"no member {member_id} in this integration")
    return member


async def add(
    session: AsyncSession,
    integration_id: uuid.UUID,
    email: str,
    role: str,
    actor: Actor,
    request_id: str | None = None,
) -> PortalMember:
    """A new member of the integration with ``role``. An address is one member of an
    integration, whatever its letters' case."""
    address = login.checked_email(email)
    if await repository.member_by_email(session, integration_id, address.lower()) is not None:
        raise Conflict(f"{address} is a member of this integration already")
    member = PortalMember(
        id=uuid.uuid4(),
        integration_id=integration_id,
        email=address,
        email_key=address.lower(),
        role=_role(role),
        locale=await repository.known_locale(session, address.lower()),
        created_at=clock.now(),
    )
    session.add(member)
    await session.flush()
    await audit.record(
        session,
        actor,
        "portal.member.add",
        "portal_member",
        member.id,
        after=describe(member),
        request_id=request_id,
        integration_id=integration_id,
    )
    return member


async def _keep_an_owner(session: AsyncSession, member: PortalMember) -> None:
    owners = await repository.owners_for_update(session, member.integration_id)
    if owners == [member.id]:
        raise LastOwner("the integration's last owner cannot be removed or demoted")


async def set_role(
    session: AsyncSession,
    integration_id: uuid.UUID,
    member_id: uuid.UUID,
    role: str,
    actor: Actor,
    request_id: str | None = None,
) -> PortalMember:
    """Give the member ``role``; the last owner stays an owner. The new role applies from
    their next request."""
    member = await _of(session, integration_id, member_id)
    role = _role(role)
    if member.role == "owner" and role != "owner":
        await _keep_an_owner(session, member)
    before = describe(member)
    member.role = role
    await session.flush()
    await audit.record(
        session,
        actor,
        "portal.member.role",
        "portal_member",
        member.id,
        before=before,
        after=describe(member),
        request_id=request_id,
        integration_id=integration_id,
    )
    return member


async def remove(
    session: AsyncSession,
    integration_id: uuid.UUID,
    member_id: uuid.UUID,
    actor: Actor,
    request_id: str | None = None,
) -> None:
    """Remove the member (their sessions in this integration end); never the last owner."""
    member = await _of(session, integration_id, member_id)
    if member.role == "owner":
        await _keep_an_owner(session, member)
    before = describe(member)
    await repository.end_member_sessions(session, member.id)
    await session.delete(member)
    await session.flush()
    await audit.record(
        session,
        actor,
        "portal.member.remove",
        "portal_member",
        member_id,
        before=before,
        request_id=request_id,
        integration_id=integration_id,
    )


# --- logging in ---------------------------------------------------------------------------------


async def send_login_link(
    session: AsyncSession, email: str, locale: str, settings: Settings
) -> None:
    """E-mail a one-time login link to ``email`` if it is a member of an active integration,
    in the language they last used (else ``locale``, the asking page's); at most
    ``portal_links_per_hour`` an hour. Nothing tells the caller which happened: the login page
    answers the same whether or not the address is a member."""
    try:
        address = login.checked_email(email)
    except BadRequest:
        return
    key = address.lower()
    found = await repository.memberships(session, key)
    now = clock.now()
    if not found:
        return
    if await repository.links_since(session, key, now - LINK_MEMORY) >= (
        settings.portal_links_per_hour
    ):
        return
    token, columns = login.new_link(settings)
    session.add(PortalLoginLink(email_key=key, **columns))
    member, integration = found[0]
    await notifications.portal_login_link(
        session,
        integration.id,
        member.email,
        member.locale or locale,
        f"{settings.base_url}{LINK_PATH}{token}",
        columns["expires_at"],
    )
    await session.flush()


async def issue_login_link(
    session: AsyncSession, email: str, settings: Settings, actor: Actor
) -> tuple[str, datetime]:
    """A one-time login link for a member of an active integration, handed to the operator who
    asked (``dealbroker portal login-link``: a deployment with no mail server, or a member
    whose mail does not arrive) rather than e-mailed, and when it stops working. Only its hash
    is stored; each of the person's memberships records who issued it in the audit trail."""
    key = login.checked_email(email).lower()
    found = await repository.memberships(session, key)
    if not found:
        raise NotFound(f"No member of an active integration has the address {email[:MAX_EMAIL]}.")
    token, columns = login.new_link(settings)
    expires: datetime = columns["expires_at"]
    session.add(PortalLoginLink(email_key=key, **columns))
    await session.flush()
    for member, integration in found:
        await audit.record(
            session,
            actor,
            "portal.login_link",
            "portal_member",
            member.id,
            after={"expiresAt": expires},
            integration_id=integration.id,
        )
    return f"{settings.base_url}{LINK_PATH}{token}", expires


async def redeem_login_link(session: AsyncSession, token: str) -> str:
    """The address a login link is for (lower-cased), the link used up. A link used before,
    expired, unknown, or for an address that is no member any more is refused, all alike."""
    refused = Unauthorized("This login link is not valid: it was used, has expired or is wrong.")
    token_hash = login.link_hash(token)
    link = None if token_hash is None else await repository.link_for_update(session, token_hash)
    if link is None or not await repository.memberships(session, link.email_key):
        raise refused
    if not login.redeem(link):
        raise refused
    await session.flush()
    return link.email_key


async def for_login(session: AsyncSession, email: str) -> str:
    """The address an identity provider's verified ``email`` is, if it is a member of an
    active integration (nobody becomes a member by logging in)."""
    key = email[:MAX_EMAIL].lower()
    if not await repository.memberships(session, key):
        raise Unauthorized("No member of an active integration has this e-mail address.")
    return key


async def memberships(
    session: AsyncSession, email_key: str
) -> list[tuple[PortalMember, Integration]]:
    """Where the address is a member (active integrations), by the integration's name."""
    return list(await repository.memberships(session, email_key))


@dataclass(frozen=True)
class Person:
    """A valid portal session, before or after its member chose an integration."""

    email_key: str
    token_hash: str
    method: str
    authenticated_at: datetime
    member: "LoggedInMember | None"


@dataclass(frozen=True)
class LoggedInMember:
    """A member acting in the portal: plain values, which outlive the request's transaction
    (e.g. on a refusal's page)."""

    member_id: uuid.UUID
    integration_id: uuid.UUID
    email: str
    role: str
    token_hash: str
    authenticated_at: datetime
    integration_name: str
    client_id: str
    scopes: tuple[str, ...]

    @property
    def actor(self) -> Actor:
        return Actor.member(self.email)

    def at_least(self, role: str) -> bool:
        """Whether the member may do what ``role`` may (owner ⊇ developer ⊇ read-only)."""
        return at_least(self.role, role)

    def fresh(self, settings: Settings) -> bool:
        """Whether the login is recent enough for a secret's rotation."""
        return login.is_fresh(self.authenticated_at, settings)


async def start_session(
    session: AsyncSession,
    email_key: str,
    method: str,
    settings: Settings,
    locale: str,
    request_id: str | None = None,
) -> str:
    """A new session for the person at ``email_key``, who just logged in by ``method`` ("link"
    or "oidc"); the token for their cookie (only its hash is stored). A member of one
    integration acts in it at once; a member of several chooses (``choose``). ``locale`` is
    remembered as the language of their e-mails."""
    now = clock.now()
    await repository.drop_expired(session, now, now - LINK_MEMORY)
    token, columns = login.new_session(method, settings)
    row = PortalSession(email_key=email_key, member_id=None, **columns)
    session.add(row)
    await repository.remember_locale(session, email_key, locale)
    await session.flush()
    found = await repository.memberships(session, email_key)
    if len(found) == 1:
        await _act_as(session, row, found[0][0], request_id)
    return token


async def choose(
    session: AsyncSession, person: Person, member_id: uuid.UUID, request_id: str | None = None
) -> None:
    """The person acts as their member ``member_id`` from now on (another person's member, or
    one of a disabled integration, is not found)."""
    row = await repository.session_row(session, person.token_hash)
    chosen = next(
        (
            m
            for m, _ in await repository.memberships(session, person.email_key)
            if m.id == member_id
        ),
        None,
    )
    if row is None or chosen is None:
        raise NotFound(f"no member {member_id} of yours")
    await _act_as(session, row, chosen, request_id)


async def _act_as(
    session: AsyncSession, row: PortalSession, member: PortalMember, request_id: str | None
) -> None:
    row.member_id = member.id
    await session.flush()
    await audit.record(
        session,
        Actor.member(member.email),
        "portal.login",
        "portal_member",
        member.id,
        after={"method": row.method},
        request_id=request_id,
        integration_id=member.integration_id,
    )


async def resume_session(session: AsyncSession, token: str, settings: Settings) -> Person | None:
    """The session whose cookie holds ``token``, its idle clock restarted; None when there is
    none, it has been idle too long or reached its end. Its member is None until one is chosen,
    or once it is no member of an active integration any more."""
    token_hash = login.link_hash(token)
    row = None if token_hash is None else await repository.session_row(session, token_hash)
    if row is None:
        return None
    if not login.resume(row, settings):
        await repository.end_session(session, row.token_hash)
        return None
    await session.flush()
    member = None
    if row.member_id is not None:
        found = await repository.memberships(session, row.email_key)
        member = next(
            (_logged_in(m, i, row) for m, i in found if m.id == row.member_id),
            None,
        )
    return Person(row.email_key, row.token_hash, row.method, row.authenticated_at, member)


def _logged_in(
    member: PortalMember, integration: Integration, row: PortalSession
) -> LoggedInMember:
    return LoggedInMember(
        member.id,
        integration.id,
        member.email,
        member.role,
        row.token_hash,
        row.authenticated_at,
        integration.name,
        integration.client_id,
        tuple(integration.scope_list),
    )


async def end_session(session: AsyncSession, person: Person, request_id: str | None = None) -> None:
    """Log out: the session is gone, and the logout recorded (for the member it acted as)."""
    await repository.end_session(session, person.token_hash)
    if person.member is not None:
        await audit.record(
            session,
            person.member.actor,
            "portal.logout",
            "portal_member",
            person.member.member_id,
            request_id=request_id,
            integration_id=person.member.integration_id,
        )
