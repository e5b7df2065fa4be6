"""``Idempotency-Key`` on POSTs: the first answer to a key is stored and replayed for 24 hours.

The key row is inserted in the request's own transaction before the work is done, and the
answer is written in that same transaction. So a failed request leaves no key behind (it may be
retried), and on PostgreSQL a second request racing with the same key waits on the first's row,
then replays its stored answer.
"""

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache

import orjson
from sqlalchemy import (
    Index,
    Insert,
    Integer,
    LargeBinary,
    Select,
    String,
    Table,
    Uuid,
    bindparam,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column
from starlette.requests import Request
from starlette.responses import Response

from dealbroker.core import clock
from dealbroker.core.db import Base, delete_batch, oldest_batch
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

    __table_args__ = (Index("ix_idempotency_keys_created_at", "created_at"),)


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


@dataclass(frozen=True)
class Claim:
    """A new request's idempotency key, to be stored with its answer by the statement that does
    the request's work, if no row holds the key yet (see ``claim_key``)."""

    integration_id: uuid.UUID
    key: str
    fingerprint: str
    created_at: datetime
    status: int = 0
    body: bytes = b""

    def answering(self, status: int, body: bytes) -> "Claim":
        return replace(self, status=status, body=body)

    def params(self) -> dict[str, object]:
        """The parameters of ``claim_key``'s statement."""
        return {
            "claim_integration_id": self.integration_id,
            "claim_key": self.key,
            "claim_fingerprint": self.fingerprint,
            "claim_status": self.status,
            "claim_body": self.body,
            "claim_created_at": self.created_at,
        }


@cache
def claim_key(dialect: str) -> Insert:
    """The INSERT of a ``Claim``'s key row, answer included, that does nothing if the key is
    taken (on PostgreSQL after waiting for a transaction that holds it to end); returns the key
    if it inserted the row. A request's work written in the same transaction, only if this
    inserted, is done at most once per key, as ``idempotent`` does it."""
    table = IdempotencyKey.__table__
    assert isinstance(table, Table)
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    columns = {
        "integration_id": "claim_integration_id",
        "key": "claim_key",
        "fingerprint": "claim_fingerprint",
        "response_status": "claim_status",
        "response_body": "claim_body",
        "created_at": "claim_created_at",
    }
    values = {c: bindparam(name, type_=table.c[c].type) for c, name in columns.items()}
    return insert(table).values(**values).on_conflict_do_nothing().returning(table.c.key)


async def idempotent(
    session: AsyncSession,
    request: Request,
    integration_id: uuid.UUID,
    produce: Callable[[], Awaitable[tuple[int, bytes]]],
    produce_claiming: Callable[[Claim], Awaitable[tuple[int, bytes] | None]] | None = None,
) -> Response:
    """Run ``produce`` (which returns status and JSON body) at most once per idempotency key.

    ``produce_claiming``, if given, does the same work and stores the key with its answer
    itself (``claim_key``), saving the round trips of doing it here; it returns ``None``, having
    written nothing, if the key was already taken: then the stored answer is replayed (or the
    reuse refused) as usual."""
    key = request.headers.get(HEADER)
    if key is None:
        status, body = await produce()
        return Response(body, status_code=status, media_type="application/json")
    _check_key(key)
    fingerprint = await _fingerprint(request)
    now = clock.now()
    if produce_claiming is not None:
        answer = await produce_claiming(Claim(integration_id, key, fingerprint, now))
        if answer is not None:
            return Response(answer[1], status_code=answer[0], media_type="application/json")
    insert = insert_for(session)
    while True:
        inserted = await session.scalar(
            insert(IdempotencyKey)
            .values(integration_id=integration_id, key=key, fingerprint=fingerprint, created_at=now)
            .on_conflict_do_nothing()
            .returning(IdempotencyKey.key)
        )
        if inserted is not None:
            break
        row = await session.scalar(
            select(IdempotencyKey)
            .where(IdempotencyKey.integration_id == integration_id, IdempotencyKey.key == key)
            .with_for_update()
        )
        if row is None:
            # The key had expired and the retention purge took it between the two statements.
            continue
        if row.created_at > now - KEY_LIFETIME:
            if row.fingerprint != fingerprint:
                raise IdempotencyMismatch(
                    f"{HEADER} {key!r} was already used with a different request; "
                    "use a new key for a new request."
                )
            if row.response_status is None:
                raise Conflict(f"A request with {HEADER} {key!r} is still in progress.")
            return _replay(row)
        break  # The old key has expired: this request takes it over (the UPDATE below).
    status, body = await produce()
    await session.execute(
        update(IdempotencyKey)
        .where(IdempotencyKey.integration_id == integration_id, IdempotencyKey.key == key)
        .values(response_status=status, response_body=body, fingerprint=fingerprint, created_at=now)
    )
    return Response(body, status_code=status, media_type="application/json")


def purgeable_keys(before: datetime, limit: int) -> Select[uuid.UUID, str]:
    """The oldest ``limit`` keys created before ``before``, through
    ``ix_idempotency_keys_created_at``."""
    query = select(IdempotencyKey.integration_id, IdempotencyKey.key).where(
        IdempotencyKey.created_at < before
    )
    return oldest_batch(query, IdempotencyKey.created_at, limit)


async def purge_expired(session: AsyncSession, now: datetime, limit: int) -> int:
    """Delete one batch of keys past their lifetime (never replayed again); returns how many
    went. A request that reuses a key meanwhile takes the expired key over (see
    ``idempotent``), so deleting one late or early changes no answer."""
    key = tuple_(IdempotencyKey.integration_id, IdempotencyKey.key)
    chosen = key.in_(purgeable_keys(now - KEY_LIFETIME, limit))
    return await delete_batch(session, IdempotencyKey, chosen)
