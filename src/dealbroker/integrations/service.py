"""Registering integrations and managing their credentials: the operator's CLI and the back
office's integrations page call these. An operator's change (``actor`` given) is recorded in the
audit trail in the change's own transaction, never with a secret."""

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core import clock
from dealbroker.core.errors import BadRequest, found
from dealbroker.core.idempotency import insert_for
from dealbroker.core.security import hash_token, new_token, new_webhook_secret
from dealbroker.integrations import repository
from dealbroker.integrations.models import ALL_SCOPES, InstanceSetting, Integration

LINK_KEY = "link_signing_key"


@dataclass(frozen=True)
class Credentials:
    """What an integration needs to call us; the client secret is shown only here, once."""

    integration: Integration
    client_secret: str


def _check_scopes(scopes: list[str]) -> str:
    unknown = sorted(set(scopes) - set(ALL_SCOPES))
    if unknown or not scopes:
        raise BadRequest(
            f"Scopes must be a non-empty subset of {', '.join(ALL_SCOPES)}; got {unknown}."
        )
    return " ".join(s for s in ALL_SCOPES if s in scopes)


MAX_NAME = 200


def describe(integration: Integration) -> dict[str, object]:
    """An integration as the CLI prints it and the audit trail records it: never a secret."""
    return {
        "name": integration.name,
        "client_id": integration.client_id,
        "scopes": integration.scope_list,
        "active": integration.active,
        "created_at": integration.created_at.isoformat(),
    }


async def _record(
    session: AsyncSession,
    actor: Actor | None,
    action: str,
    integration: Integration,
    before: dict[str, object] | None,
    request_id: str | None,
) -> None:
    if actor is not None:
        await audit.record(
            session,
            actor,
            action,
            "integration",
            integration.client_id,
            before=before,
            after=describe(integration),
            request_id=request_id,
            integration_id=integration.id,
        )


async def create(
    session: AsyncSession,
    name: str,
    scopes: list[str] | None = None,
    actor: Actor | None = None,
    request_id: str | None = None,
) -> Credentials:
    """Register an integration with fresh credentials and a webhook secret."""
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise BadRequest(
            f"The name must be 1 to {MAX_NAME} characters.",
            errors=[{"field": "name", "message": "1 to 200 characters"}],
        )
    now = clock.now()
    secret = new_token("dbs_")
    webhook_secret = new_webhook_secret()
    integration = Integration(
        id=uuid.uuid4(),
        name=name,
        client_id="dbc_" + secrets.token_hex(12),
        client_secret_hash=hash_token(secret),
        webhook_secret=webhook_secret,
        webhook_secret_hash=hash_token(webhook_secret),
        scopes=_check_scopes(list(scopes or ALL_SCOPES)),
        active=True,
        created_at=now,
        updated_at=now,
    )
    session.add(integration)
    await session.flush()
    await _record(session, actor, "integration.create", integration, None, request_id)
    return Credentials(integration, secret)


async def get_by_client_id(session: AsyncSession, client_id: str) -> Integration:
    return found(
        await repository.by_client_id(session, client_id),
        f"No integration with client id {client_id!r}.",
    )


async def rotate_secret(
    session: AsyncSession,
    client_id: str,
    actor: Actor | None = None,
    request_id: str | None = None,
) -> Credentials:
    """Issue a new client secret; the old one and every token issued with it stop working now."""
    integration = await get_by_client_id(session, client_id)
    secret = new_token("dbs_")
    integration.client_secret_hash = hash_token(secret)
    integration.updated_at = clock.now()
    await repository.revoke_tokens(session, integration.id)
    await session.flush()
    await _record(session, actor, "integration.rotate_secret", integration, None, request_id)
    return Credentials(integration, secret)


# How long the secret a rotation replaces stays valid beside the new one, unless told: a day
# for the integration to deploy the new secret to its receivers. At most a week: a replaced
# secret is one more that may leak. Zero ends it at once (a secret that leaked).
DEFAULT_WEBHOOK_OVERLAP = timedelta(hours=24)
MAX_WEBHOOK_OVERLAP = timedelta(days=7)


@dataclass(frozen=True)
class WebhookSecretRotation:
    """A rotated webhook secret: the new secret is shown only here, once."""

    integration: Integration
    webhook_secret: str
    previous_expires_at: datetime | None


async def rotate_webhook_secret(
    session: AsyncSession,
    integration_id: uuid.UUID,
    overlap: timedelta = DEFAULT_WEBHOOK_OVERLAP,
    actor: Actor | None = None,
    request_id: str | None = None,
) -> WebhookSecretRotation:
    """Issue a new webhook secret. For ``overlap`` the secret it replaces stays valid too:
    deliveries are signed with both, and the sandbox triggers accept either. A secret replaced
    by an earlier rotation stops at once: only the newest two are ever valid together."""
    if not timedelta(0) <= overlap <= MAX_WEBHOOK_OVERLAP:
        raise BadRequest(
            f"The overlap must be 0 to {int(MAX_WEBHOOK_OVERLAP.total_seconds())} seconds.",
            errors=[{"field": "overlapSeconds", "message": "out of range"}],
        )
    integration = found(
        await repository.by_id_for_update(session, integration_id),
        f"No integration {integration_id}.",
    )
    now = clock.now()
    if overlap:
        integration.previous_webhook_secret = integration.webhook_secret
        integration.previous_webhook_secret_hash = integration.webhook_secret_hash
        integration.previous_webhook_secret_expires_at = now + overlap
    else:
        integration.previous_webhook_secret = None
        integration.previous_webhook_secret_hash = None
        integration.previous_webhook_secret_expires_at = None
    secret = new_webhook_secret()
    integration.webhook_secret = secret
    integration.webhook_secret_hash = hash_token(secret)
    integration.updated_at = now
    await session.flush()
    action = "integration.rotate_webhook_secret"
    await _record(session, actor, action, integration, None, request_id)
    return WebhookSecretRotation(
        integration, secret, integration.previous_webhook_secret_expires_at
    )


def webhook_signing_secrets(
    current: str, previous: str | None, previous_expires_at: datetime | None, at: datetime
) -> list[str]:
    """The secrets a webhook sent at ``at`` is signed with: the current one, and the one it
    replaced while the rotation's overlap lasts."""
    if previous is not None and previous_expires_at is not None and at < previous_expires_at:
        return [current, previous]
    return [current]


async def set_active(
    session: AsyncSession,
    client_id: str,
    active: bool,
    actor: Actor | None = None,
    request_id: str | None = None,
) -> Integration:
    """Enable or disable an integration; disabling revokes its tokens at once."""
    integration = await get_by_client_id(session, client_id)
    before = describe(integration)
    integration.active = active
    integration.updated_at = clock.now()
    if not active:
        await repository.revoke_tokens(session, integration.id)
    await session.flush()
    action = "integration.enable" if active else "integration.disable"
    await _record(session, actor, action, integration, before, request_id)
    return integration


async def list_all(session: AsyncSession) -> list[Integration]:
    return await repository.all_integrations(session)


async def link_signing_key(session: AsyncSession, configured: str) -> str:
    """The key that signs seller links: the configured one, else one generated once and kept.

    Two processes starting together agree: the first insert wins, the other reads it back.
    """
    if configured:
        return configured
    insert = insert_for(session)
    await session.execute(
        insert(InstanceSetting)
        .values(key=LINK_KEY, value=secrets.token_urlsafe(48))
        .on_conflict_do_nothing()
    )
    key = await repository.instance_setting(session, LINK_KEY)
    assert key is not None
    return key


async def any_exist(session: AsyncSession) -> bool:
    return await repository.any_exists(session)
