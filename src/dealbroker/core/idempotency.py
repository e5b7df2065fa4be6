"""``Idempotency-Key`` on POSTs: the first answer to a key is stored and replayed for 24 hours.

The key row is inserted in the request's own transaction before the work is done, and the
answer is written in that same transaction. So a failed request leaves no key behind (it may be
retried), and on PostgreSQL a second request racing with the same key waits on the first's row,
then replays its stored answer.
"""

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import orjson
from sqlalchemy import Integer, LargeBinary, String, Uuid, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Mapped, mapped_column
from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core import clock
from dealbroker.core.db import Base
from dealbroker.core.errors import BadRequest, Conflict, IdempotencyMismatch
from dealbroker.core.types import UTCDateTime

KEY_LIFETIME = timedelta(hours=24)
MAX_KEY_LENGTH = 255
HEADER = "Idempotency-Key"


class IdempotencyKey(Base):
    __tablename__ = "idempotency_keys"

    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    key: Mapped[str] = mapped_column(String(MAX_KEY_LENGTH), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_body: Mapped[bytes | None] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


def insert_for(session: AsyncSession):  # type: ignore[no-untyped-def]
    """The dialect's INSERT construct, which knows ``ON CONFLICT``."""
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def _operation(request: Request) -> str:
    """The operation a request is for, the same for a path and its alias (``..._alias``)."""
    route = request.scope.get("route")
    operation_id = getattr(route, "operation_id", None) or request.url.path
    params = ",".join(f"{k}={v}" for k, v in sorted(request.path_params.items()))
    return f"{request.method} {operation_id.removesuffix('_alias')} {params}"


async def _fingerprint(request: Request) -> str:
    body = await request.body()
    # Key order and spacing do not make a different request; neither does an empty body vs {}.
    canonical = orjson.dumps(orjson.loads(body) if body else {}, option=orjson.OPT_SORT_KEYS)
    digest = hashlib.sha256(f"{_operation(request)}\n".encode())
    digest.update(canonical)
    return digest.hexdigest()


def _check_key(key: str) -> None:
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise BadRequest(
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable ASCII characters.",
            errors=[{"field": HEADER, "message": "invalid idempotency key"}],
        )


def _replay(row: IdempotencyKey) -> Response:
    return Response(
        row.response_body,
        status_code=row.response_status or 200,
        media_type="application/json",
        headers={"Idempotent-Replayed": "true"},
    )


async def idempotent(
    session: AsyncSession,
    request: Request,
    integration_id: uuid.UUID,
    produce: Callable[[], Awaitable[tuple[int, bytes]]],
) -> Response:
    """Run ``produce`` (which returns status and JSON body) at most once per idempotency key."""
    key = request.headers.get(HEADER)
    if key is None:
        status, body = await produce()
        return Response(body, status_code=status, media_type="application/json")
    _check_key(key)
    fingerprint = await _fingerprint(request)
    now = clock.now()
    insert = insert_for(session)
    inserted = await session.scalar(
        insert(IdempotencyKey)
        .values(integration_id=integration_id, key=key, fingerprint=fingerprint, created_at=now)
        .on_conflict_do_nothing()
        .returning(IdempotencyKey.key)
    )
    if inserted is None:
        row = await session.scalar(
            select(IdempotencyKey)
            .where(IdempotencyKey.integration_id == integration_id, IdempotencyKey.key == key)
            .with_for_update()
        )
        assert row is not None  # the conflict proves it exists, and keys are never deleted early
        if row.created_at > now - KEY_LIFETIME:
            if row.fingerprint != fingerprint:
                raise IdempotencyMismatch(
                    f"{HEADER} {key!r} was already used with a different request; "
                    "use a new key for a new request."
                )
            if row.response_status is None:
                raise Conflict(f"A request with {HEADER} {key!r} is still in progress.")
            return _replay(row)
        # The old key has expired: this request takes it over (the UPDATE below rewrites it).
    status, body = await produce()
    await session.execute(
        update(IdempotencyKey)
        .where(IdempotencyKey.integration_id == integration_id, IdempotencyKey.key == key)
        .values(response_status=status, response_body=body, fingerprint=fingerprint, created_at=now)
    )
    return Response(body, status_code=status, media_type="application/json")


async def purge_expired_keys(sessionmaker: async_sessionmaker[AsyncSession]) -> int:
    """Drop keys past their 24 hours, in a transaction of its own (the worker's purge job)."""
    async with sessionmaker() as session, session.begin():
        return await purge_expired(session)


async def purge_expired(session: AsyncSession) -> int:
    """Delete keys older than their lifetime; returns how many went."""
    result = await session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at <= clock.now() - KEY_LIFETIME)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
