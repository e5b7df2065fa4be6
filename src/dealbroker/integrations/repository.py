"""All queries on integrations and their access tokens."""

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Select,
    String,
    and_,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.auth import token_cache
from dealbroker.auth.models import AccessToken
from dealbroker.core.db import add_in_place, delete_batch, oldest_batch
from dealbroker.core.idempotency import insert_for
from dealbroker.integrations.models import (
    ApiRequest,
    InstanceSetting,
    Integration,
    RateLimitRefusal,
)


async def by_client_id(session: AsyncSession, client_id: str) -> Integration | None:
    return await session.scalar(select(Integration).where(Integration.client_id == client_id))


async def is_active(session: AsyncSession, integration_id: uuid.UUID) -> bool:
    return bool(
        await session.scalar(select(Integration.active).where(Integration.id == integration_id))
    )


async def all_integrations(session: AsyncSession) -> list[Integration]:
    return list(await session.scalars(select(Integration).order_by(Integration.created_at)))


async def any_exists(session: AsyncSession) -> bool:
    return await session.scalar(select(Integration.id).limit(1)) is not None


async def revoke_tokens(session: AsyncSession, integration_id: uuid.UUID) -> None:
    """Delete the integration's tokens; every server process forgets them when this commits
    (the one way tokens are revoked: the token caches rely on it)."""
    await session.execute(delete(AccessToken).where(AccessToken.integration_id == integration_id))
    await token_cache.notify_revoked(session, integration_id)


async def instance_setting(session: AsyncSession, key: str) -> str | None:
    return await session.scalar(select(InstanceSetting.value).where(InstanceSetting.key == key))


async def by_id(session: AsyncSession, integration_id: uuid.UUID) -> Integration | None:
    return await session.get(Integration, integration_id)


async def by_id_for_update(session: AsyncSession, integration_id: uuid.UUID) -> Integration | None:
    """The integration, row locked, its attributes read again under the lock (the session may
    hold it from before, and a concurrent change may have committed since)."""
    return await session.scalar(
        select(Integration)
        .where(Integration.id == integration_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


async def by_webhook_secret_hash(
    session: AsyncSession, secret_hash: str, now: datetime
) -> Integration | None:
    """The integration whose current webhook secret, or previous one still inside its overlap
    window at ``now``, has this hash (secrets are random: at most one integration has it)."""
    return await session.scalar(
        select(Integration).where(
            or_(
                Integration.webhook_secret_hash == secret_hash,
                and_(
                    Integration.previous_webhook_secret_hash == secret_hash,
                    Integration.previous_webhook_secret_expires_at > now,
                ),
            )
        )
    )


async def add_refusals(
    session: AsyncSession,
    limit: str,
    hour: int,
    count: int,
    *,
    integration_id: uuid.UUID | None = None,
    client_id: str | None = None,
) -> None:
    """Add ``count`` refusals to the integration's row for ``limit`` and ``hour`` (created if
    new). The integration is named by id or by client id; a client id no integration has adds
    nothing (the row is inserted from the integration's, so no row names a made-up one)."""
    which = (
        Integration.id == integration_id
        if integration_id is not None
        else Integration.client_id == client_id
    )
    source = select(
        Integration.id,
        literal(hour, BigInteger),
        literal(limit, String),
        literal(count, Integer),
    ).where(which)
    insert = insert_for(session)(RateLimitRefusal).from_select(
        ["integration_id", "hour", "limit_name", "count"], source
    )
    await session.execute(
        insert.on_conflict_do_update(
            index_elements=["integration_id", "hour", "limit_name"],
            set_={"count": RateLimitRefusal.count + insert.excluded.count},
        )
    )


async def refusals_since(session: AsyncSession, hour: int) -> list[tuple[uuid.UUID, int, int]]:
    """Each integration's refusals (every limit together) per hour from ``hour`` on."""
    rows = await session.execute(
        select(
            RateLimitRefusal.integration_id, RateLimitRefusal.hour, func.sum(RateLimitRefusal.count)
        )
        .where(RateLimitRefusal.hour >= hour)
        .group_by(RateLimitRefusal.integration_id, RateLimitRefusal.hour)
    )
    return [(row[0], int(row[1]), int(row[2])) for row in rows]


def purgeable_refusals(before: int, limit: int) -> Select[uuid.UUID, int, str]:
    """The ``limit`` refusal rows of the oldest hours before ``before``, through
    ``ix_rate_limit_refusals_hour``."""
    query = select(
        RateLimitRefusal.integration_id, RateLimitRefusal.hour, RateLimitRefusal.limit_name
    ).where(RateLimitRefusal.hour < before)
    return oldest_batch(query, RateLimitRefusal.hour, limit)


async def purge_refusals(session: AsyncSession, before: int, limit: int) -> int:
    """Delete one batch of ``purgeable_refusals``; returns how many went."""
    key = tuple_(
        RateLimitRefusal.integration_id, RateLimitRefusal.hour, RateLimitRefusal.limit_name
    )
    return await delete_batch(session, RateLimitRefusal, key.in_(purgeable_refusals(before, limit)))


async def add_clock_offset(session: AsyncSession, integration: Integration, seconds: int) -> None:
    """Move the integration's sandbox clock ``seconds`` on, in one UPDATE, so that two moves at
    once both count; ``integration`` is refreshed with the sum."""
    await add_in_place(session, integration, Integration.clock_offset_seconds, seconds)


async def ids_by_client_id(session: AsyncSession, client_ids: set[str]) -> dict[str, uuid.UUID]:
    """The ids of the integrations with these client ids (a made-up one is not there)."""
    rows = await session.execute(
        select(Integration.client_id, Integration.id).where(Integration.client_id.in_(client_ids))
    )
    return {client_id: integration_id for client_id, integration_id in rows}


async def add_api_requests(session: AsyncSession, rows: list[dict[str, object]]) -> None:
    """Insert request log rows (``ApiRequest``'s columns but ``seq``), in one statement."""
    await session.execute(insert(ApiRequest), rows)


def _api_requests(
    integration_id: uuid.UUID,
    since: datetime,
    statuses: tuple[int, int] | None,
    route: str | None,
) -> list[ColumnElement[bool]]:
    where = [ApiRequest.integration_id == integration_id, ApiRequest.at >= since]
    if statuses is not None:
        where += [ApiRequest.status >= statuses[0], ApiRequest.status < statuses[1]]
    if route is not None:
        where.append(ApiRequest.route == route)
    return where


async def count_api_requests(
    session: AsyncSession,
    integration_id: uuid.UUID,
    since: datetime,
    statuses: tuple[int, int] | None,
    route: str | None,
) -> int:
    """How many of the integration's requests since ``since`` match (``statuses``: from, to
    excluded)."""
    where = _api_requests(integration_id, since, statuses, route)
    return int(
        await session.scalar(select(func.count()).select_from(ApiRequest).where(*where)) or 0
    )


async def api_request_page(
    session: AsyncSession,
    integration_id: uuid.UUID,
    since: datetime,
    statuses: tuple[int, int] | None,
    route: str | None,
    offset: int,
    limit: int,
) -> list[ApiRequest]:
    """A page of the matching requests, newest first, through
    ``ix_api_requests_integration_at``."""
    where = _api_requests(integration_id, since, statuses, route)
    return list(
        await session.scalars(
            select(ApiRequest)
            .where(*where)
            .order_by(ApiRequest.at.desc(), ApiRequest.seq.desc())
            .offset(offset)
            .limit(limit)
        )
    )


def purgeable_api_requests(before: datetime, limit: int) -> Select[int]:
    """The ``limit`` oldest request log rows from before ``before``, through
    ``ix_api_requests_at``."""
    query = select(ApiRequest.seq).where(ApiRequest.at < before)
    return oldest_batch(query, ApiRequest.at, limit)


async def purge_api_requests(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete one batch of ``purgeable_api_requests``; returns how many went."""
    return await delete_batch(
        session, ApiRequest, ApiRequest.seq.in_(purgeable_api_requests(before, limit))
    )
