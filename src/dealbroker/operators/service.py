"""Operators and how they log in: the one service every caller uses (the CLI's ``operators``
commands and the back office's pages).

Every change of an operator is recorded in the audit trail, in the change's transaction.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core import clock, login
from dealbroker.core.errors import BadRequest, Conflict, Unauthorized, found
from dealbroker.core.settings import Settings
from dealbroker.operators import repository
from dealbroker.operators.models import ROLES, Operator, OperatorLoginLink, OperatorSession

MAX_EMAIL = login.MAX_EMAIL
MAX_NAME = 200
LINK_PATH = "/back-office/login/"


def describe(operator: Operator) -> dict[str, object]:
    """An operator as the CLI prints it and the audit trail keeps it."""
    return {
        "id": operator.id,
        "email": operator.email,
        "name": operator.name,
        "roles": list(operator.roles),
        "disabled": operator.disabled,
        "createdAt": operator.created_at,
    }


def _roles(roles: list[str]) -> list[str]:
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise BadRequest(f"unknown role {', '.join(unknown)}: the roles are {', '.join(ROLES)}")
    if not roles:
        raise BadRequest(f"give at least one role ({', '.join(ROLES)})")
    return [r for r in ROLES if r in roles]


async def find(session: AsyncSession, email: str) -> Operator:
    return found(
        await repository.by_email(session, email[:MAX_EMAIL]), f"no operator {email[:MAX_EMAIL]}"
    )


async def add(
    session: AsyncSession,
    email: str,
    roles: list[str],
    actor: Actor,
    name: str = "",
    request_id: str | None = None,
) -> Operator:
    """A new operator with ``roles``. An address is one operator, whatever its letters' case."""
    address = login.checked_email(email)
    if len(name) > MAX_NAME:
        raise BadRequest(f"the name is longer than {MAX_NAME} characters")
    if await repository.by_email(session, address) is not None:
        raise Conflict(f"{address} is an operator already")
    operator = Operator(
        id=uuid.uuid4(),
        email=address,
        email_key=address.lower(),
        name=name.strip(),
        roles=_roles(roles),
        disabled=False,
        created_at=clock.now(),
    )
    session.add(operator)
    return await _changed(session, operator, "operator.add", None, actor, request_id)


async def by_id(session: AsyncSession, operator_id: uuid.UUID) -> Operator:
    return found(await repository.by_id(session, operator_id), f"no operator {operator_id}")


async def every(session: AsyncSession) -> list[Operator]:
    return list(await repository.every(session))


async def set_roles(
    session: AsyncSession,
    email: str,
    roles: list[str],
    actor: Actor,
    request_id: str | None = None,
) -> Operator:
    """Give the operator exactly ``roles``. Their sessions end: the next login has the new
    roles."""
    operator = await find(session, email)
    before = describe(operator)
    operator.roles = _roles(roles)
    await repository.end_sessions(session, operator.id)
    return await _changed(session, operator, "operator.roles", before, actor, request_id)


async def set_disabled(
    session: AsyncSession,
    email: str,
    disabled: bool,
    actor: Actor,
    request_id: str | None = None,
) -> Operator:
    """Disable (every session ends, no login works) or enable an operator again."""
    operator = await find(session, email)
    before = describe(operator)
    operator.disabled = disabled
    if disabled:
        await repository.end_sessions(session, operator.id)
    action = "operator.disable" if disabled else "operator.enable"
    return await _changed(session, operator, action, before, actor, request_id)


async def _changed(
    session: AsyncSession,
    operator: Operator,
    action: str,
    before: dict[str, object] | None,
    actor: Actor,
    request_id: str | None,
) -> Operator:
    """``operator``, changed by ``actor``'s ``action``: flushed, and recorded in the audit trail
    as it was (``before``, None for a new one) and as it is."""
    await session.flush()
    await audit.record(
        session,
        actor,
        action,
        "operator",
        operator.id,
        before=before,
        after=describe(operator),
        request_id=request_id,
    )
    return operator


async def issue_login_link(
    session: AsyncSession, email: str, settings: Settings, actor: Actor
) -> tuple[str, datetime]:
    """A one-time login link for an enabled operator, and when it stops working. Only its
    hash is stored."""
    operator = await find(session, email)
    if operator.disabled:
        raise Conflict(f"{operator.email} is disabled")
    token, columns = login.new_link(settings)
    expires = columns["expires_at"]
    session.add(OperatorLoginLink(operator_id=operator.id, **columns))
    await session.flush()
    await audit.record(
        session,
        actor,
        "operator.login_link",
        "operator",
        operator.id,
        after={"expiresAt": expires},
    )
    return f"{settings.base_url}{LINK_PATH}{token}", expires


async def redeem_login_link(session: AsyncSession, token: str) -> Operator:
    """The operator a login link is for, the link used up. A link used before, expired,
    unknown, or for a disabled operator is refused, all alike."""
    refused = Unauthorized("This login link is not valid: it was used, has expired or is wrong.")
    token_hash = login.link_hash(token)
    link = None if token_hash is None else await repository.link_for_update(session, token_hash)
    operator = None if link is None else await repository.by_id(session, link.operator_id)
    if operator is None or operator.disabled or not login.redeem(link):
        raise refused
    await session.flush()
    return operator


async def for_login(session: AsyncSession, email: str) -> Operator:
    """The enabled operator an identity provider's verified ``email`` is; no one else (nobody
    registers by logging in)."""
    operator = await repository.by_email(session, email[:MAX_EMAIL])
    if operator is None or operator.disabled:
        raise Unauthorized("No enabled operator has this e-mail address.")
    return operator


@dataclass(frozen=True)
class LoggedIn:
    """A valid back office session: its operator (as plain values, which outlive the
    request's transaction, e.g. on a refusal's page), and when they last proved who they
    are."""

    operator_id: uuid.UUID
    email: str
    name: str
    roles: tuple[str, ...]
    token_hash: str
    authenticated_at: datetime

    @property
    def actor(self) -> Actor:
        return Actor.operator(self.operator_id, self.email)

    def fresh(self, settings: Settings) -> bool:
        """Whether the login is recent enough for a money action."""
        return login.is_fresh(self.authenticated_at, settings)


async def start_session(
    session: AsyncSession,
    operator: Operator,
    method: str,
    settings: Settings,
    request_id: str | None = None,
) -> str:
    """A new session for ``operator``, who just logged in by ``method`` ("link" or "oidc"); the
    token for their cookie (only its hash is stored). The login is recorded."""
    await repository.drop_expired(session, clock.now())
    token, columns = login.new_session(method, settings)
    session.add(OperatorSession(operator_id=operator.id, **columns))
    await session.flush()
    await audit.record(
        session,
        Actor.operator(operator.id, operator.email),
        "operator.login",
        "operator",
        operator.id,
        after={"method": method},
        request_id=request_id,
    )
    return token


async def resume_session(session: AsyncSession, token: str, settings: Settings) -> LoggedIn | None:
    """The session whose cookie holds ``token``, its idle clock restarted; None when there is
    none, it has been idle too long, has reached its end, or its operator is disabled."""
    token_hash = login.link_hash(token)
    row = None if token_hash is None else await repository.session_row(session, token_hash)
    if row is None:
        return None
    operator = await repository.by_id(session, row.operator_id)
    if operator is None or operator.disabled or not login.resume(row, settings):
        await repository.end_session(session, row.token_hash)
        return None
    await session.flush()
    return LoggedIn(
        operator.id,
        operator.email,
        operator.name,
        tuple(operator.roles),
        row.token_hash,
        row.authenticated_at,
    )


async def end_session(
    session: AsyncSession, logged_in: LoggedIn, request_id: str | None = None
) -> None:
    """Log out: the session is gone, and the logout recorded."""
    await repository.end_session(session, logged_in.token_hash)
    await audit.record(
        session,
        logged_in.actor,
        "operator.logout",
        "operator",
        logged_in.operator_id,
        request_id=request_id,
    )
