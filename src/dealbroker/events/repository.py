"""All queries on events, endpoints, deliveries and attempts."""

import functools
import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Insert,
    Integer,
    Row,
    Select,
    Table,
    Uuid,
    and_,
    bindparam,
    case,
    cast,
    column,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    table,
    text,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import TextClause

from dealbroker.core.db import (
    alone_on,
    delete_batch,
    execute_alone,
    oldest_batch,
    oldest_first,
)
from dealbroker.core.fastpath.statements import DriverStatement, DriverStatements
from dealbroker.events.envelope import OPT_IN_KINDS
from dealbroker.events.models import Delivery, DeliveryAttempt, Event, WebhookEndpoint
from dealbroker.integrations.models import Integration


def subscribes(
    dialect: str, kind: ColumnElement[str], *, opt_in: bool = False
) -> ColumnElement[bool]:
    """Whether an endpoint takes events of ``kind``: its ``event_kinds`` lists it, or is no
    list at all (``None``, stored as SQL or JSON null: every kind), unless the kind is
    ``opt_in`` (``envelope.OPT_IN_KINDS``), which only a list that names it takes."""
    kinds = WebhookEndpoint.__table__.c.event_kinds
    if dialect == "postgresql":
        named = cast(kinds, JSONB).has_key(kind)
        every = func.json_typeof(kinds).is_distinct_from("array")
    else:
        listed = func.json_each(kinds).table_valued("value")
        # json_each of a null list is empty: the array test first keeps it from erroring.
        named = and_(
            func.json_type(kinds) == "array",
            select(literal(1)).select_from(listed).where(listed.c.value == kind).exists(),
        )
        every = func.json_type(kinds).is_distinct_from("array")
    return named if opt_in else or_(every, named)


async def subscribed_endpoints(
    session: AsyncSession, integration_id: uuid.UUID, kind: str
) -> list[uuid.UUID]:
    """Enabled endpoints of this integration that take ``kind``."""
    dialect = session.get_bind().dialect.name
    return list(
        await session.scalars(
            select(WebhookEndpoint.id).where(
                WebhookEndpoint.integration_id == integration_id,
                WebhookEndpoint.enabled.is_(True),
                subscribes(dialect, literal(kind), opt_in=kind in OPT_IN_KINDS),
            )
        )
    )


# A random (version 4) uuid in SQL, in the 32 hex digits SQLAlchemy's ``Uuid`` stores on SQLite.
_SQLITE_UUID4 = literal_column(
    "lower(hex(randomblob(6)) || '4' || substr(hex(randomblob(2)), 2)"
    " || substr('89ab', 1 + abs(random()) % 4, 1) || substr(hex(randomblob(8)), 2))",
    Uuid,
)


def queue_event(
    dialect: str,
    event_seq: ColumnElement[int],
    integration_id: ColumnElement[uuid.UUID],
    kind: ColumnElement[str],
    now: ColumnElement[datetime],
) -> Insert:
    """The INSERT of an event's deliveries, in SQL: one pending delivery, due ``now``, per
    enabled endpoint of the integration that takes ``kind`` (for statements that write an
    event and its deliveries at once; ``emit`` queues them through the ORM). ``kind`` is a
    bound value of the interface's kinds only: an opt-in kind (``OPT_IN_KINDS``) goes through
    ``emit``, which only endpoints naming it receive."""
    deliveries = Delivery.__table__
    endpoints = WebhookEndpoint.__table__
    assert isinstance(deliveries, Table)
    assert isinstance(endpoints, Table)
    new_id = func.gen_random_uuid(type_=Uuid) if dialect == "postgresql" else _SQLITE_UUID4
    rows = select(
        new_id,
        event_seq,
        endpoints.c.id,
        endpoints.c.integration_id,
        literal("pending"),
        literal(0),
        now,
        now,
        now,
    ).where(
        event_seq.is_not(None),  # no event (a statement that wrote none), no deliveries
        endpoints.c.integration_id == integration_id,
        endpoints.c.enabled.is_(True),
        subscribes(dialect, kind),
    )
    columns = (
        "id",
        "event_seq",
        "endpoint_id",
        "integration_id",
        "status",
        "attempts",
        "next_attempt_at",
        "created_at",
        "updated_at",
    )
    return insert(deliveries).from_select([deliveries.c[c] for c in columns], rows)


# The deals table as this module needs it: its event counter only.
_DEALS = table("deals", column("id", Uuid), column("events_emitted", Integer))


async def next_in_deal(session: AsyncSession, deal_id: uuid.UUID) -> int:
    """Count one more event of the deal and return its number: one UPDATE that also row-locks
    the deal (a new deal's INSERT is flushed first, so it is there to count on)."""
    await session.flush()
    counted = await session.scalar(
        update(_DEALS)
        .where(_DEALS.c.id == deal_id)
        .values(events_emitted=_DEALS.c.events_emitted + 1)
        .returning(_DEALS.c.events_emitted)
    )
    if counted is None:
        raise LookupError(f"no deal {deal_id} to number an event of")
    return int(counted)


async def add_event(session: AsyncSession, event: Event) -> int:
    session.add(event)
    await session.flush()
    return event.seq


def add_deliveries(session: AsyncSession, deliveries: Sequence[Delivery]) -> None:
    session.add_all(deliveries)


async def endpoint(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    for_update: bool = False,
) -> WebhookEndpoint | None:
    query = select(WebhookEndpoint).where(
        WebhookEndpoint.id == endpoint_id, WebhookEndpoint.integration_id == integration_id
    )
    if for_update:
        # Populate existing: a row this session already holds is read again under the lock.
        query = query.with_for_update().execution_options(populate_existing=True)
    return await session.scalar(query)


async def endpoints(session: AsyncSession, integration_id: uuid.UUID) -> list[WebhookEndpoint]:
    return await oldest_first(
        session, WebhookEndpoint.created_at, WebhookEndpoint.integration_id == integration_id
    )


async def count_endpoints(session: AsyncSession, integration_id: uuid.UUID) -> int:
    total = await session.scalar(
        select(func.count())
        .select_from(WebhookEndpoint)
        .where(WebhookEndpoint.integration_id == integration_id)
    )
    return int(total or 0)


async def delete_endpoint(session: AsyncSession, endpoint: WebhookEndpoint) -> None:
    await session.delete(endpoint)


def _event_filters(
    integration_id: uuid.UUID, kind: str | None, deal_id: uuid.UUID | None
) -> list[Any]:
    """The events API's filters. Without a kind, the opt-in kinds are left out: an integration
    that never asked for one never meets it (docs/decisions/0029-opt-in-message-event.md)."""
    filters: list[Any] = [Event.integration_id == integration_id]
    if kind is not None:
        filters.append(Event.kind == kind)
    else:
        filters.append(Event.kind.not_in([k.value for k in OPT_IN_KINDS]))
    if deal_id is not None:
        filters.append(Event.deal_id == deal_id)
    return filters


async def event_page(
    session: AsyncSession,
    integration_id: uuid.UUID,
    *,
    kind: str | None,
    deal_id: uuid.UUID | None,
    after_seq: int | None,
    offset: int,
    limit: int,
) -> list[str]:
    """Payloads of matching events: newest first, or, after a cursor, oldest first from it."""
    filters = _event_filters(integration_id, kind, deal_id)
    stmt = select(Event.payload).where(*filters)
    if after_seq is None:
        stmt = stmt.order_by(Event.seq.desc())
    else:
        stmt = stmt.where(Event.seq > after_seq).order_by(Event.seq)
    return list(await session.scalars(stmt.offset(offset).limit(limit)))


async def count_events(
    session: AsyncSession,
    integration_id: uuid.UUID,
    *,
    kind: str | None,
    deal_id: uuid.UUID | None,
    after_seq: int | None,
) -> int:
    filters = _event_filters(integration_id, kind, deal_id)
    if after_seq is not None:
        filters.append(Event.seq > after_seq)
    return int(await session.scalar(select(func.count()).select_from(Event).where(*filters)) or 0)


async def event(
    session: AsyncSession, integration_id: uuid.UUID, event_id: uuid.UUID
) -> Event | None:
    return await session.scalar(
        select(Event).where(Event.id == event_id, Event.integration_id == integration_id)
    )


async def attempts_page(
    session: AsyncSession, endpoint_id: uuid.UUID, offset: int, limit: int
) -> list[DeliveryAttempt]:
    return list(
        await session.scalars(
            select(DeliveryAttempt)
            .where(DeliveryAttempt.endpoint_id == endpoint_id)
            .order_by(DeliveryAttempt.attempted_at.desc(), DeliveryAttempt.id.desc())
            .offset(offset)
            .limit(limit)
        )
    )


async def count_attempts(session: AsyncSession, endpoint_id: uuid.UUID) -> int:
    total = await session.scalar(
        select(func.count())
        .select_from(DeliveryAttempt)
        .where(DeliveryAttempt.endpoint_id == endpoint_id)
    )
    return int(total or 0)


async def requeue_failed(
    session: AsyncSession, endpoint_id: uuid.UUID, since: datetime, now: datetime
) -> int:
    result = await session.execute(
        update(Delivery)
        .where(
            Delivery.endpoint_id == endpoint_id,
            Delivery.status == "failed",
            Delivery.created_at >= since,
        )
        .values(status="pending", attempts=0, next_attempt_at=now, updated_at=now)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def undelivered_event_seqs(
    session: AsyncSession, endpoint: WebhookEndpoint, since: datetime, kinds: Sequence[str]
) -> list[int]:
    """Events of the endpoint's integration since ``since``, of ``kinds``, that were never
    queued for it (emitted while it was disabled, or before it was registered)."""
    queued = select(Delivery.id).where(
        Delivery.event_seq == Event.seq, Delivery.endpoint_id == endpoint.id
    )
    return list(
        await session.scalars(
            select(Event.seq)
            .where(
                Event.integration_id == endpoint.integration_id,
                Event.created_at >= since,
                Event.kind.in_(kinds),
                ~queued.exists(),
            )
            .order_by(Event.seq)
        )
    )


# --- the worker's queries -------------------------------------------------------------------


def _due(*columns: Any, now: datetime | BindParameter[Any]) -> Select[Any]:
    """``columns`` of the pending deliveries of enabled endpoints due by ``now``, oldest first
    (a claimed delivery is not due until its lease ends): what the worker claims and the
    metrics count."""
    return (
        select(*columns)
        .join(WebhookEndpoint, WebhookEndpoint.id == Delivery.endpoint_id)
        .where(
            Delivery.status == "pending",
            Delivery.next_attempt_at <= now,
            WebhookEndpoint.enabled.is_(True),
        )
        .order_by(Delivery.next_attempt_at)
    )


def _sending_columns(deliveries: Any) -> list[Any]:
    """What sending a claimed delivery needs; ``deliveries``: the table or the claiming CTE."""
    return [
        deliveries.c.id,
        deliveries.c.attempts,
        deliveries.c.endpoint_id,
        deliveries.c.integration_id,
        Event.id.label("event_id"),
        Event.payload,
        WebhookEndpoint.url,
        WebhookEndpoint.failing_since,
        Integration.webhook_secret,
        Integration.previous_webhook_secret,
        Integration.previous_webhook_secret_expires_at,
    ]


def _claim_statement(recording: bool = False) -> Select[Any]:
    """PostgreSQL's claim in one statement (see ``claim_due``), built once: building it and
    computing its cache key on every claim cost more CPU than running it.
    ``recording``: after ``_record_statement``'s, in one statement with it
    (``record_and_claim_alone``), skipping the deliveries it records (its CTE ``o``): a
    statement must not update a row twice."""
    due = _due(Delivery.id, now=bindparam("now"))
    if recording:
        recorded: Select[Any] = select(literal_column("o.id")).select_from(table("o"))
        due = due.where(Delivery.id.not_in(recorded))
    due = due.limit(bindparam("limit")).with_for_update(skip_locked=True, of=Delivery)
    locked = due.cte("due")
    claimed = (
        update(Delivery)
        .where(Delivery.id.in_(select(locked.c.id)))
        .values(next_attempt_at=bindparam("lease_until"))
        .returning(
            Delivery.id,
            Delivery.attempts,
            Delivery.endpoint_id,
            Delivery.integration_id,
            Delivery.event_seq,
        )
        .cte("claimed")
    )
    return (
        select(*_sending_columns(claimed))
        .select_from(claimed)
        .join(Event, Event.seq == claimed.c.event_seq)
        .join(WebhookEndpoint, WebhookEndpoint.id == claimed.c.endpoint_id)
        .join(Integration, Integration.id == claimed.c.integration_id)
    )


_CLAIM = _claim_statement()


@functools.cache
def _on_driver(statement: Any) -> DriverStatement:
    """``statement`` compiled once for the driver (``DriverStatements.fetch``)."""
    return DriverStatement(statement)


def _aware(*values: datetime) -> None:
    """What ``UTCDateTime`` checks of a timestamp it binds (asyncpg would take a naive one as
    UTC)."""
    for value in values:
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use the clock's UTC time")


async def claim_due(
    session: AsyncSession, now: datetime, lease_until: datetime, limit: int
) -> Sequence[Row[Any]]:
    """Claim up to ``limit`` due deliveries of enabled endpoints by pushing them to
    ``lease_until``; returns what sending them needs. Rows another worker holds are skipped.

    On PostgreSQL one statement (lock with SKIP LOCKED, push the lease, read what sending needs),
    run by itself in autocommit: atomic as any statement, one round trip where a transaction
    took five (BEGIN, lock, update, read, COMMIT) on every round of the worker
    (``core.db.execute_alone``). On SQLite, whose transactions take the write lock at BEGIN,
    three statements in the caller's transaction."""
    if session.get_bind().dialect.name == "postgresql":
        params = {"now": now, "lease_until": lease_until, "limit": limit}
        return await execute_alone(session, _CLAIM, params)
    due = _due(Delivery.id, now=now).limit(limit)
    ids = list(await session.scalars(due))
    if not ids:
        return []
    await session.execute(
        update(Delivery)
        .where(Delivery.id.in_(ids))
        .values(next_attempt_at=lease_until)
        .execution_options(synchronize_session=False)
    )
    rows = await session.execute(
        select(*_sending_columns(Delivery.__table__))
        .join(Event, Event.seq == Delivery.event_seq)
        .join(WebhookEndpoint, WebhookEndpoint.id == Delivery.endpoint_id)
        .join(Integration, Integration.id == Delivery.integration_id)
        .where(Delivery.id.in_(ids))
    )
    return rows.all()


async def claim_due_alone(
    on: DriverStatements, now: datetime, lease_until: datetime, limit: int
) -> Sequence[Any]:
    """PostgreSQL, fast paths on: ``claim_due``'s one statement, without a session, on the
    driver directly (``on.on_driver``; a session's begin and end, and SQLAlchemy's execution
    path, were most of an idle claim's CPU). asyncpg's values already are what the columns'
    types give (UUIDs; UTC timestamps, asyncpg reading a timestamptz as an aware UTC
    datetime)."""
    _aware(now, lease_until)
    params = {"now": now, "lease_until": lease_until, "limit": limit}
    return await on.fetch(_on_driver(_CLAIM), params)


async def release_claims(
    session: AsyncSession, ids: Sequence[uuid.UUID], lease_until: datetime, now: datetime
) -> None:
    """Hand back deliveries claimed until ``lease_until`` and not sent: due again at ``now``
    (those another worker has taken since, or that ended, stay as they are)."""
    await session.execute(
        update(Delivery)
        .where(
            Delivery.id.in_(ids),
            Delivery.status == "pending",
            Delivery.next_attempt_at == lease_until,
        )
        .values(next_attempt_at=now)
        .execution_options(synchronize_session=False)
    )


def _finish_statement() -> Any:
    table = Delivery.__table__
    assert isinstance(table, Table)
    return (
        update(table)
        .where(and_(table.c.id == bindparam("b_id"), table.c.status == "pending"))
        .values(
            status=bindparam("b_status"),
            attempts=bindparam("b_attempts"),
            next_attempt_at=bindparam("b_next"),
            last_status_code=bindparam("b_code"),
            last_error=bindparam("b_error"),
            updated_at=bindparam("b_now"),
        )
    )


_FINISH = _finish_statement()


async def finish_deliveries(session: AsyncSession, values: list[dict[str, Any]]) -> None:
    """Write each delivery's outcome; a delivery that is no longer pending stays as it is."""
    if values:
        # Core UPDATE with executemany: one statement, one round trip for the whole batch.
        await session.execute(_FINISH, values)


# ``finish_deliveries``' parameters by the column each sets.
_FINISHED = {
    "b_id": "id",
    "b_status": "status",
    "b_attempts": "attempts",
    "b_next": "next_attempt_at",
    "b_code": "last_status_code",
    "b_error": "last_error",
    "b_now": "updated_at",
}


def _unnest(table: Any, names: Sequence[str], prefix: str) -> tuple[str, list[Any]]:
    """``unnest(CAST(:<prefix><name> AS <type>[]), ...)``: one array parameter per column of
    ``table``, typed as the column is, and the parameters."""
    pg = postgresql.dialect()
    casts = [f"CAST(:{prefix}{n} AS {table.c[n].type.compile(dialect=pg)}[])" for n in names]
    params = [bindparam(f"{prefix}{n}", type_=ARRAY(table.c[n].type)) for n in names]
    return f"unnest({', '.join(casts)})", params


@functools.cache
def _record_statement(attempt_columns: tuple[str, ...]) -> TextClause:
    """PostgreSQL: finish a batch's deliveries and insert its attempts in one statement, each
    from arrays of its columns (one parameter per column, whatever the batch's size)."""
    finished = tuple(_FINISHED.values())
    outcomes, finished_params = _unnest(Delivery.__table__, finished, "d_")
    attempts, attempt_params = _unnest(DeliveryAttempt.__table__, attempt_columns, "a_")
    sets = ", ".join(f"{n} = o.{n}" for n in finished if n != "id")
    return text(
        f"WITH o AS (SELECT * FROM {outcomes} AS o({', '.join(finished)})), "
        f"finished AS (UPDATE deliveries AS d SET {sets} FROM o"
        " WHERE d.id = o.id AND d.status = 'pending'), "
        f"inserted AS (INSERT INTO delivery_attempts ({', '.join(attempt_columns)})"
        f" SELECT * FROM {attempts} RETURNING 1) "
        "SELECT count(*) FROM inserted"
    ).bindparams(*finished_params, *attempt_params)


async def record_outcomes(
    session: AsyncSession, values: list[dict[str, Any]], attempts: Sequence[dict[str, Any]]
) -> None:
    """``finish_deliveries`` and ``add_attempts`` at once. On PostgreSQL, while ``session`` has
    not begun a transaction, one statement by itself in autocommit (atomic as any statement):
    one round trip where a transaction took four, on every batch, of one delivery at a low
    rate. Otherwise both in the session's transaction."""
    if not attempts or alone_on(session) is None:
        await finish_deliveries(session, values)
        await add_attempts(session, attempts)
        return
    columns = tuple(attempts[0])
    await execute_alone(
        session, _record_statement(columns), _record_params(values, attempts, columns)
    )


async def record_outcomes_alone(
    on: DriverStatements,
    values: list[dict[str, Any]],
    attempts: Sequence[dict[str, Any]],
) -> None:
    """PostgreSQL, fast paths on: ``record_outcomes``' one statement, without a session, on the
    driver directly (as ``claim_due_alone``): asyncpg takes the lists as the arrays the
    statement casts them to."""
    columns = tuple(attempts[0])
    params = _record_params(values, attempts, columns)
    await on.fetch(_on_driver(_record_statement(columns)), params)


def _record_params(
    values: list[dict[str, Any]], attempts: Sequence[dict[str, Any]], columns: tuple[str, ...]
) -> dict[str, Any]:
    """``_record_statement``'s parameters: one list per column."""
    params = {f"d_{column}": [v[key] for v in values] for key, column in _FINISHED.items()}
    params |= {f"a_{column}": [a[column] for a in attempts] for column in columns}
    _aware(*params["d_updated_at"], *params["d_next_attempt_at"])
    _aware(*params.get("a_attempted_at", ()))
    return params


class _RecordAndClaim(DriverStatement):
    """``_record_statement``'s CTEs then ``_claim_statement``'s, as one statement for asyncpg
    (``$n`` placeholders: the claim's numbered after the record's): the claim's
    ``DriverStatement`` (its rows), its SQL and its parameters preceded by the record's. Run on asyncpg only: its
    ``statement`` is the claim's alone."""

    def __init__(self, attempt_columns: tuple[str, ...]) -> None:
        record = _on_driver(_record_statement(attempt_columns))
        super().__init__(_claim_statement(recording=True))
        ctes, _, rest = record.sql.rpartition(" SELECT count(*) FROM inserted")
        assert ctes.startswith("WITH "), record.sql
        assert not rest, record.sql
        assert not set(record.params) & set(self.params), (record.params, self.params)
        shift = len(record.params)
        claim = re.sub(r"\$(\d+)", lambda m: f"${int(m[1]) + shift}", self.sql)
        assert claim.startswith("WITH "), claim
        self.sql = f"{ctes}, {claim.removeprefix('WITH ')}"
        self.params = record.params + self.params
        self.literals = {**record.literals, **self.literals}
        self.binders = record.binders + self.binders


@functools.cache
def _record_and_claim(attempt_columns: tuple[str, ...]) -> _RecordAndClaim:
    return _RecordAndClaim(attempt_columns)


async def record_and_claim_alone(
    on: DriverStatements,
    values: list[dict[str, Any]],
    attempts: Sequence[dict[str, Any]],
    now: datetime,
    lease_until: datetime,
    limit: int,
) -> Sequence[Any]:
    """PostgreSQL: ``record_outcomes_alone`` and ``claim_due_alone`` in one statement, one
    round trip where they took two: atomic as any statement, so the outcomes are recorded
    before any delivery it claims is sent. The claim skips the deliveries being recorded, and
    sees the others as they were before the statement (one snapshot): those it records are not
    due (their lease runs), so it claims what it would have claimed after recording them."""
    columns = tuple(attempts[0])
    params = _record_params(values, attempts, columns)
    _aware(now, lease_until)
    params |= {"now": now, "lease_until": lease_until, "limit": limit}
    return await on.fetch(_record_and_claim(columns), params)


async def add_attempts(session: AsyncSession, attempts: Sequence[dict[str, Any]]) -> None:
    """Insert attempts, each given as ``DeliveryAttempt``'s columns by name, in one statement:
    a Core INSERT of many rows, without the ORM's per-object bookkeeping, which was most of
    the cost of recording a batch."""
    if attempts:
        table = DeliveryAttempt.__table__
        assert isinstance(table, Table)
        await session.execute(insert(table), list(attempts))


async def mark_endpoints(
    session: AsyncSession, endpoint_ids: set[uuid.UUID], now: datetime, *, failing: bool
) -> None:
    """Mark the endpoints failing since ``now``, or healthy again: those not marked so yet."""
    if endpoint_ids:
        since = WebhookEndpoint.failing_since
        await session.execute(
            update(WebhookEndpoint)
            .where(
                WebhookEndpoint.id.in_(endpoint_ids),
                since.is_(None) if failing else since.is_not(None),
            )
            .values(failing_since=now if failing else None, updated_at=now)
            .execution_options(synchronize_session=False)
        )


async def disable_endpoints(
    session: AsyncSession,
    endpoint_ids: set[uuid.UUID],
    reason: str,
    *,
    failing_since_before: datetime | None = None,
) -> list[uuid.UUID]:
    """Disable these enabled endpoints (only those failing since before a time, if given);
    returns the ones it disabled."""
    if not endpoint_ids:
        return []
    conditions: list[ColumnElement[bool]] = [
        WebhookEndpoint.id.in_(endpoint_ids),
        WebhookEndpoint.enabled.is_(True),
    ]
    if failing_since_before is not None:
        conditions.append(WebhookEndpoint.failing_since <= failing_since_before)
    result = await session.execute(
        update(WebhookEndpoint)
        .where(*conditions)
        .values(enabled=False, disabled_reason=reason)
        .returning(WebhookEndpoint.id)
        .execution_options(synchronize_session=False)
    )
    return list(result.scalars())


async def events_of_deal(
    session: AsyncSession, deal_id: uuid.UUID
) -> list[tuple[Event, list[Delivery]]]:
    """A deal's events in emission order, each with its deliveries (for the operator)."""
    events = list(
        await session.scalars(select(Event).where(Event.deal_id == deal_id).order_by(Event.seq))
    )
    deliveries = (
        list(
            await session.scalars(
                select(Delivery)
                .where(Delivery.event_seq.in_([e.seq for e in events]))
                .order_by(Delivery.created_at)
            )
        )
        if events
        else []
    )
    by_event: dict[int, list[Delivery]] = {}
    for delivery in deliveries:
        by_event.setdefault(delivery.event_seq, []).append(delivery)
    return [(e, by_event.get(e.seq, [])) for e in events]


async def due_deliveries(
    session: AsyncSession, now: datetime, cap: int
) -> tuple[int, datetime | None]:
    """How many deliveries of enabled endpoints are due and unclaimed (counted up to ``cap``),
    and the oldest one's due time. Walks the partial index of pending deliveries, oldest first;
    a delivery a worker has claimed is not due until its lease ends."""
    due = _due(Delivery.next_attempt_at.label("due_at"), now=now).limit(cap).subquery()
    count, oldest = (await session.execute(select(func.count(), func.min(due.c.due_at)))).one()
    return int(count), oldest


async def due_deliveries_by_endpoint(
    session: AsyncSession, now: datetime, cap: int, endpoints: int
) -> dict[uuid.UUID, int]:
    """The due and unclaimed deliveries of the ``endpoints`` endpoints with most of them,
    counted among the oldest ``cap`` due (the same walk as ``due_deliveries``)."""
    due = _due(Delivery.endpoint_id, now=now).limit(cap).subquery()
    count = func.count().label("count")
    rows = await session.execute(
        select(due.c.endpoint_id, count)
        .group_by(due.c.endpoint_id)
        .order_by(count.desc(), due.c.endpoint_id)
        .limit(endpoints)
    )
    return {endpoint_id: int(n) for endpoint_id, n in rows}


# --- retention ------------------------------------------------------------------------------


def purgeable_events(before: datetime, limit: int) -> Select[int]:
    """The oldest ``limit`` events created before ``before`` that no delivery still waits to
    send (those stay, whatever their age), through ``ix_events_created_at``. On PostgreSQL the
    rows are locked, skipping those another worker's purge holds."""
    pending = select(Delivery.id).where(
        Delivery.event_seq == Event.seq, Delivery.status == "pending"
    )
    query = select(Event.seq).where(Event.created_at < before, ~pending.exists())
    return oldest_batch(query, Event.created_at, limit)


async def purge_events(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete one batch of ``purgeable_events``; returns how many went. Their deliveries and
    attempts go by the foreign keys' cascades (each through its index): deleting the children
    first by their keys is slower on PostgreSQL, as the cascade triggers still run."""
    return await delete_batch(session, Event, Event.seq.in_(purgeable_events(before, limit)))


# --- the back office's view of every endpoint -----------------------------------------------


def _health_order() -> list[Any]:
    """Failing endpoints first (longest failing first), then disabled ones, then the rest."""
    rank = case(
        (WebhookEndpoint.failing_since.is_not(None), 0),
        (WebhookEndpoint.enabled.is_(False), 1),
        else_=2,
    )
    return [rank, WebhookEndpoint.failing_since, Integration.name, WebhookEndpoint.url]


async def endpoint_health(
    session: AsyncSession,
    *,
    attempts_since: datetime,
    failed_since: datetime,
    offset: int,
    limit: int,
    endpoint_id: uuid.UUID | None = None,
    integration_id: uuid.UUID | None = None,
) -> Sequence[Row[Any]]:
    """A page of endpoints across integrations (or the one ``endpoint_id``, or those of
    ``integration_id``), failing ones
    first, each with its integration and, in the same statement: its attempts and failed
    attempts since ``attempts_since``, its pending deliveries (how many, the oldest one's
    creation, the earliest next attempt), and its deliveries created since ``failed_since``
    that failed for good. The aggregates read only the page's endpoints, through the
    deliveries' and attempts' per-endpoint indexes."""
    paged = select(WebhookEndpoint.id).join(
        Integration, Integration.id == WebhookEndpoint.integration_id
    )
    if endpoint_id is not None:
        paged = paged.where(WebhookEndpoint.id == endpoint_id)
    if integration_id is not None:
        paged = paged.where(WebhookEndpoint.integration_id == integration_id)
    ids = paged.order_by(*_health_order(), WebhookEndpoint.id).offset(offset).limit(limit).cte()
    on_page = select(ids.c.id)
    pending = (
        select(
            Delivery.endpoint_id,
            func.count().label("backlog"),
            func.min(Delivery.created_at).label("oldest_waiting"),
            func.min(Delivery.next_attempt_at).label("next_attempt"),
        )
        .where(Delivery.status == "pending", Delivery.endpoint_id.in_(on_page))
        .group_by(Delivery.endpoint_id)
        .subquery()
    )
    failed = (
        select(Delivery.endpoint_id, func.count().label("failed"))
        .where(
            Delivery.endpoint_id.in_(on_page),
            Delivery.created_at >= failed_since,
            Delivery.status == "failed",
        )
        .group_by(Delivery.endpoint_id)
        .subquery()
    )
    tried = (
        select(
            DeliveryAttempt.endpoint_id,
            func.count().label("attempts"),
            func.sum(case((DeliveryAttempt.success.is_(False), 1), else_=0)).label("failures"),
        )
        .where(
            DeliveryAttempt.endpoint_id.in_(on_page),
            DeliveryAttempt.attempted_at >= attempts_since,
        )
        .group_by(DeliveryAttempt.endpoint_id)
        .subquery()
    )
    statement = (
        select(
            WebhookEndpoint,
            Integration.name.label("integration_name"),
            Integration.client_id,
            func.coalesce(tried.c.attempts, 0).label("attempts"),
            func.coalesce(tried.c.failures, 0).label("failures"),
            func.coalesce(pending.c.backlog, 0).label("backlog"),
            pending.c.oldest_waiting,
            pending.c.next_attempt,
            func.coalesce(failed.c.failed, 0).label("failed"),
        )
        .join(ids, ids.c.id == WebhookEndpoint.id)
        .join(Integration, Integration.id == WebhookEndpoint.integration_id)
        .outerjoin(pending, pending.c.endpoint_id == WebhookEndpoint.id)
        .outerjoin(failed, failed.c.endpoint_id == WebhookEndpoint.id)
        .outerjoin(tried, tried.c.endpoint_id == WebhookEndpoint.id)
        .order_by(*_health_order(), WebhookEndpoint.id)
    )
    return (await session.execute(statement)).all()


async def count_all_endpoints(session: AsyncSession) -> int:
    return int(await session.scalar(select(func.count()).select_from(WebhookEndpoint)) or 0)


async def endpoint_by_id(session: AsyncSession, endpoint_id: uuid.UUID) -> WebhookEndpoint | None:
    """An endpoint whatever its integration (the back office's operators see them all)."""
    return await session.get(WebhookEndpoint, endpoint_id)


async def client_id(session: AsyncSession, integration_id: uuid.UUID) -> str | None:
    return await session.scalar(
        select(Integration.client_id).where(Integration.id == integration_id)
    )


async def waiting_deliveries(
    session: AsyncSession, endpoint_id: uuid.UUID, limit: int
) -> Sequence[Any]:
    """The endpoint's pending deliveries, oldest first, each with its event's id and kind."""
    return (
        await session.execute(
            select(Delivery, Event.id.label("event_id"), Event.kind)
            .join(Event, Event.seq == Delivery.event_seq)
            .where(Delivery.endpoint_id == endpoint_id, Delivery.status == "pending")
            .order_by(Delivery.created_at, Delivery.id)
            .limit(limit)
        )
    ).all()


async def event_kinds(
    session: AsyncSession, event_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """The kind of each of these events."""
    if not event_ids:
        return {}
    rows = await session.execute(select(Event.id, Event.kind).where(Event.id.in_(event_ids)))
    return {event_id: kind for event_id, kind in rows}


async def retry_waiting_now(
    session: AsyncSession, endpoint_id: uuid.UUID, since: datetime, now: datetime
) -> int:
    """Make due at once the endpoint's pending deliveries created since ``since`` that wait
    for a retry (tried at least once, next attempt later than ``now``); returns how many."""
    result = await session.execute(
        update(Delivery)
        .where(
            Delivery.endpoint_id == endpoint_id,
            Delivery.status == "pending",
            Delivery.attempts > 0,
            Delivery.created_at >= since,
            Delivery.next_attempt_at > now,
        )
        .values(next_attempt_at=now, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


# --- the developer portal: one integration's deliveries -------------------------------------


def _deliveries_of(
    integration_id: uuid.UUID, endpoint_id: uuid.UUID, status: str | None
) -> list[ColumnElement[bool]]:
    conditions = [Delivery.endpoint_id == endpoint_id, Delivery.integration_id == integration_id]
    if status is not None:
        conditions.append(Delivery.status == status)
    return conditions


async def deliveries_page(
    session: AsyncSession,
    integration_id: uuid.UUID,
    endpoint_id: uuid.UUID,
    status: str | None,
    offset: int,
    limit: int,
) -> Sequence[Any]:
    """The endpoint's deliveries (of one ``status``, if given), newest first, each with its
    event's id and kind, through ``ix_deliveries_endpoint_created``."""
    return (
        await session.execute(
            select(Delivery, Event.id.label("event_id"), Event.kind)
            .join(Event, Event.seq == Delivery.event_seq)
            .where(*_deliveries_of(integration_id, endpoint_id, status))
            .order_by(Delivery.created_at.desc(), Delivery.event_seq.desc(), Delivery.id.desc())
            .offset(offset)
            .limit(limit)
        )
    ).all()


async def count_deliveries(
    session: AsyncSession, integration_id: uuid.UUID, endpoint_id: uuid.UUID, status: str | None
) -> int:
    total = await session.scalar(
        select(func.count())
        .select_from(Delivery)
        .where(*_deliveries_of(integration_id, endpoint_id, status))
    )
    return int(total or 0)


async def delivery_with_event(
    session: AsyncSession, integration_id: uuid.UUID, delivery_id: uuid.UUID
) -> Any:
    """One of the integration's deliveries with its event (another integration's is None)."""
    return (
        await session.execute(
            select(Delivery, Event)
            .join(Event, Event.seq == Delivery.event_seq)
            .where(Delivery.id == delivery_id, Delivery.integration_id == integration_id)
        )
    ).first()


async def attempts_of_delivery(
    session: AsyncSession, delivery_id: uuid.UUID
) -> list[DeliveryAttempt]:
    """Every attempt of one delivery, oldest first."""
    return await oldest_first(
        session, DeliveryAttempt.attempted_at, DeliveryAttempt.delivery_id == delivery_id
    )
