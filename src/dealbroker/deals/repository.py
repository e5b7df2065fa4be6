"""All queries on deals, their history and their counters."""

import random
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    Column,
    ColumnElement,
    Insert,
    Integer,
    Row,
    Select,
    String,
    Table,
    bindparam,
    exists,
    func,
    literal,
    literal_column,
    null,
    select,
    true,
    union,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import aliased

from dealbroker.core import db, wakeup
from dealbroker.core.db import Base
from dealbroker.core.fastpath.statements import DriverStatement, DriverStatements
from dealbroker.core.idempotency import Claim, claim_key
from dealbroker.deals.lifecycle import DISPUTES
from dealbroker.deals.models import Deal, DealCounter, DealStatusChange, DealTimer, NewDeal
from dealbroker.events import repository as event_repository
from dealbroker.events.models import Delivery, Event
from dealbroker.events.service import NewEvent
from dealbroker.integrations.models import Integration
from dealbroker.users.models import User
from dealbroker.users.repository import NewUser, upsert_user


def _table(model: type[Base]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


def _param(column: Column[Any], name: str | None = None) -> BindParameter[Any]:
    """A statement parameter typed as ``column`` (named after it unless ``name`` is given)."""
    return bindparam(name or column.name, type_=column.type)


@dataclass(frozen=True)
class _Writes:
    """The statements that store a new deal (see ``add``), built once per dialect and shape.

    On SQLite, one INSERT per table, run in turn. On PostgreSQL, ``single`` makes them one
    statement (data-modifying CTEs) that also wakes the workers if it queued deliveries
    (``pg_notify``, delivered on commit). It returns whether it stored the deal (with a claim,
    only if it inserted the idempotency key), the seller's user id and the event's seq.
    """

    claim: Insert | None  # the idempotency key's INSERT (``core.idempotency.claim_key``)
    seller_user: Insert | None  # an upsert returning the user's id; None for no seller email
    deal: Insert
    first_change: Insert
    counter: Insert
    event: Insert  # returning the event's seq
    deliveries: Insert  # INSERT ... SELECT: one per endpoint that takes the event
    single: Select[Any] | None
    single_on_driver: DriverStatement | None = None  # ``single`` compiled once for asyncpg


def _insert(
    insert: Any, table: Table, values: dict[str, Any], gate: ColumnElement[bool] | None
) -> Any:
    """A dialect's INSERT of one row of ``values``, or of none unless ``gate`` holds."""
    if gate is None:
        return insert(table).values(**values)
    row = [
        v if isinstance(v, ColumnElement) else literal(v, type_=table.c[name].type)
        for name, v in values.items()
    ]
    return insert(table).from_select(list(values), select(*row).where(gate))


@cache
def _writes(dialect: str, with_seller_user: bool, with_claim: bool) -> _Writes:
    pg = dialect == "postgresql"
    insert = postgresql.insert if pg else sqlite.insert
    deals, users, history = _table(Deal), _table(User), _table(DealStatusChange)
    counters, events = _table(DealCounter), _table(Event)
    integration_id, deal_id = _param(deals.c.integration_id), _param(deals.c.id)
    now = _param(deals.c.created_at)
    claim = claim_key(dialect) if with_claim else None
    # PostgreSQL: with a claim, every INSERT writes only if the key's INSERT did.
    gate = None
    if pg and claim is not None:
        gate = exists(select(literal(1)).select_from(claim.cte("claim")))
    seller_user = None
    seller_user_id: ColumnElement[Any] = _param(deals.c.seller_user_id)
    if with_seller_user:
        user = {
            "id": _param(users.c.id, "user_id"),
            "integration_id": integration_id,
            "email": _param(users.c.email, "user_email"),
            "name": _param(users.c.name, "user_name"),
            "created_at": now,
        }
        seller_user = upsert_user(_insert(insert, users, user, gate))
        if pg:
            seller_user_id = select(seller_user.cte("seller_user").c.id).scalar_subquery()
    names = ("name", "description", "price_minor", "currency", "images", "package_type")
    deal = {name: _param(deals.c[name]) for name in names} | {
        "id": deal_id,
        "integration_id": integration_id,
        "status": _param(deals.c.status),
        "seller": _param(deals.c.seller),
        "seller_user_id": seller_user_id,
        "handover_attempts": 0,
        "clock_offset_seconds": 0,
        "events_emitted": 1,  # the deal's first event, below, is number 1 of its sequence
        "version": 1,
        "created_at": now,
        "updated_at": now,
    }
    first_change = {
        "id": _param(history.c.id, "change_id"),
        "deal_id": deal_id,
        "integration_id": integration_id,
        "from_status": None,
        "to_status": _param(history.c.to_status),
        "trigger": _param(history.c.trigger),
        "actor": _param(history.c.actor),
        "deal_version": 1,
        "created_at": now,
    }
    count = {"integration_id": integration_id, "slot": _param(counters.c.slot), "count": 1}
    counter = _insert(insert, counters, count, gate).on_conflict_do_update(
        index_elements=[counters.c.integration_id, counters.c.slot],
        set_={"count": counters.c.count + 1},
    )
    kind = _param(events.c.kind)
    event = {
        "id": _param(events.c.id, "event_id"),
        "integration_id": integration_id,
        "deal_id": deal_id,
        "kind": kind,
        "deal_sequence": 1,
        "payload": _param(events.c.payload),
        "created_at": now,
    }
    writes = _Writes(
        claim,
        seller_user,
        _insert(insert, deals, deal, gate),
        _insert(insert, history, first_change, gate),
        counter,
        _insert(insert, events, event, gate).returning(events.c.seq),
        event_repository.queue_event(
            dialect, _param(events.c.seq, "event_seq"), integration_id, kind, now
        ),
        None,
    )
    if not pg:
        return writes
    event_cte = writes.event.cte("event")
    seq = select(event_cte.c.seq).scalar_subquery()
    deliveries = event_repository.queue_event(dialect, seq, integration_id, kind, now)
    queued = deliveries.returning(_table(Delivery).c.id).cte("deliveries")
    woken = (
        select(func.pg_notify(wakeup.CHANNEL, wakeup.DELIVERIES))
        .select_from(queued)
        .limit(1)
        .cte("woken")
    )
    single = select(
        seq.is_not(None).label("stored"),
        (seller_user_id if with_seller_user else null()).label("seller_user_id"),
        seq.label("seq"),
        select(func.count()).select_from(woken).scalar_subquery().label("woken"),
    ).add_cte(
        writes.deal.cte("deal"),
        writes.first_change.cte("first_change"),
        writes.counter.cte("counter"),
    )
    return replace(
        writes, deliveries=deliveries, single=single, single_on_driver=DriverStatement(single)
    )


async def add(
    session: AsyncSession,
    deal: NewDeal,
    first_change: dict[str, Any],
    event: NewEvent,
    seller_user: NewUser | None,
    claim: Claim | None = None,
    *,
    alone: DriverStatements | None = None,
) -> bool:
    """Store a new deal: its row, its first history row (``first_change``: its columns), its
    count, its seller's user (found by email, created if new; ``deal.seller_user_id`` is set
    to it), its first event and that event's deliveries, and wake the workers if any were
    queued. On PostgreSQL in one round trip. ``event.seq`` is set too. The statement writes
    what the values leave out (``_writes``): a new deal's history row is from no status, the
    deal's version 1, at its creation, as its event is its first.

    With ``claim``, the idempotency key is stored with its answer too, and nothing at all is
    written if the key was taken already: returns whether the deal was stored.

    ``alone``: storing the deal is the caller's whole transaction (the API's create), so on
    PostgreSQL, with the fast paths on (``alone.on_driver``), if the session has not begun one
    yet, the statement runs by itself (atomic as any single statement) on these connections of
    the driver's, saving BEGIN and COMMIT and the checkout of the engine's pool: one round trip
    in all."""
    dialect = session.get_bind().dialect.name
    writes = _writes(dialect, seller_user is not None, claim is not None)
    params: dict[str, Any] = {
        "id": deal.id,
        "integration_id": deal.integration_id,
        "name": deal.name,
        "description": deal.description,
        "price_minor": deal.price_minor,
        "currency": deal.currency,
        "images": deal.images,
        "package_type": deal.package_type,
        "status": deal.status,
        "seller": deal.seller,
        "seller_user_id": None,
        "created_at": deal.created_at,
        "change_id": first_change["id"],
        "to_status": first_change["to_status"],
        "trigger": first_change["trigger"],
        "actor": first_change["actor"],
        "slot": random.randrange(DealCounter.SLOTS),
        "event_id": event.id,
        "kind": event.kind,
        "payload": event.payload,
    }
    if seller_user is not None:
        params.update(
            user_id=seller_user.id, user_email=seller_user.email, user_name=seller_user.name
        )
    if claim is not None:
        params.update(claim.params())
    if writes.single is not None:
        row: Any
        on_driver = writes.single_on_driver
        if (
            alone is not None
            and alone.on_driver
            and on_driver is not None
            and db.alone_on(session) is not None
        ):
            # By itself (as ``db.execute_alone`` runs it), on the driver directly, without
            # SQLAlchemy's execution path; its parameters bound and its errors raised as the
            # engine's (``core.fastpath.statements``).
            (row,) = await alone.fetch_as_engine(on_driver, params)
        else:
            row = (await session.execute(writes.single, params)).one()
        stored, deal.seller_user_id, event.seq, woken = row
        if not stored:
            return False
        if woken:
            wakeup.notified(session, wakeup.DELIVERIES)
    else:
        if writes.claim is not None and await session.scalar(writes.claim, params) is None:
            return False
        if writes.seller_user is not None:
            params["seller_user_id"] = await session.scalar(writes.seller_user, params)
        for statement in (writes.deal, writes.first_change, writes.counter):
            await session.execute(statement, params)
        event.seq = params["event_seq"] = await session.scalar(writes.event, params)
        if (await session.execute(writes.deliveries, params)).rowcount:  # type: ignore[attr-defined]
            await wakeup.mark(session, wakeup.DELIVERIES)
        deal.seller_user_id = params["seller_user_id"]
    return True


async def get(
    session: AsyncSession,
    integration_id: uuid.UUID,
    deal_id: uuid.UUID,
    *,
    for_update: bool = False,
) -> Deal | None:
    """One deal of this integration; with ``for_update`` the row stays locked until commit, and
    its columns are read afresh even when the session holds the deal already (see
    ``by_id_for_update``)."""
    stmt = select(Deal).where(Deal.id == deal_id, Deal.integration_id == integration_id)
    if for_update:
        stmt = stmt.with_for_update().execution_options(populate_existing=True)
    return await session.scalar(stmt)


# --- the reads of GET /deals/v1/deals and /deals/v1/deals/{id} ---------------------------------
# Core statements built once: no ORM objects, rows named as ``Deal``'s attributes (what
# ``deals.schemas.deal_out`` and ``deals.actions.allowed_actions`` read), one round trip each.

_deals = Deal.__table__
_counters = DealCounter.__table__
# What rendering a deal reads (``buyer_user_id``: whether it still takes offers).
_READ = [
    _deals.c[name]
    for name in (
        "id",
        "name",
        "description",
        "price_minor",
        "currency",
        "images",
        "package_type",
        "status",
        "seller",
        "payment_status",
        "buyer_user_id",
        "shipping_minor",
        "shipment",
        "created_at",
        "updated_at",
    )
]
_ONE = select(*_READ).where(
    _deals.c.id == bindparam("deal_id"), _deals.c.integration_id == bindparam("integration_id")
)
_TOTAL = (
    select(func.coalesce(func.sum(_counters.c.count), 0).label("total"))
    .where(_counters.c.integration_id == bindparam("integration_id"))
    .subquery("t")
)
_SLICE = (
    select(*_READ)
    .where(_deals.c.integration_id == bindparam("integration_id"))
    .order_by(_deals.c.created_at.desc(), _deals.c.id.desc())
    .limit(bindparam("limit", type_=Integer))
    .offset(bindparam("offset", type_=Integer))
    .subquery("d")
)
# The total and the page in one statement: one row of the total, joined to the page's rows
# (the total alone, its deal columns NULL, when the page is past the end).
_PAGE = (
    select(_TOTAL.c.total, *_SLICE.c)
    .select_from(_TOTAL.outerjoin(_SLICE, true()))
    .order_by(_SLICE.c.created_at.desc(), _SLICE.c.id.desc())
)


_ONE_ON_DRIVER, _PAGE_ON_DRIVER = DriverStatement(_ONE), DriverStatement(_PAGE)


async def read_one(
    reads: DriverStatements, integration_id: uuid.UUID, deal_id: uuid.UUID
) -> Any | None:
    """One deal of this integration as a row, or ``None``."""
    rows = await reads.fetch(_ONE_ON_DRIVER, {"deal_id": deal_id, "integration_id": integration_id})
    return rows[0] if rows else None


async def read_page(
    reads: DriverStatements,
    integration_id: uuid.UUID,
    offset: int,
    limit: int,
    conn: AsyncConnection | None = None,
) -> tuple[int, list[Any]]:
    """How many deals this integration has (a sum over at most ``SLOTS`` counter rows) and a
    slice of them as rows, newest first (served by the covering index); on ``conn`` if given."""
    params = {"integration_id": integration_id, "offset": offset, "limit": limit}
    rows = await reads.fetch(_PAGE_ON_DRIVER, params, conn)
    total = int(rows[0].total)
    return total, [row for row in rows if row.id is not None]


async def history(session: AsyncSession, deal_id: uuid.UUID) -> list[DealStatusChange]:
    stmt = (
        select(DealStatusChange)
        .where(DealStatusChange.deal_id == deal_id)
        .order_by(DealStatusChange.deal_version, DealStatusChange.created_at)
    )
    return list(await session.scalars(stmt))


def add_change(session: AsyncSession, change: DealStatusChange) -> None:
    session.add(change)


async def by_id(session: AsyncSession, deal_id: uuid.UUID) -> Deal | None:
    """A deal by id alone, for pages whose capability link already proved the right to see it."""
    return await session.get(Deal, deal_id)


async def by_id_for_update(session: AsyncSession, deal_id: uuid.UUID) -> Deal | None:
    """A deal by id alone, row locked (for jobs and pages, which act for no integration).

    The locked row's columns replace what the session holds already: a page reads the deal
    before it locks it, and without the refresh a request that waited for the lock would check
    and change the deal as it was before the holder committed (a stale version, a wrong-code
    count that misses the guesses counted meanwhile, and a 500 at the flush)."""
    return await session.scalar(
        select(Deal)
        .where(Deal.id == deal_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def add_timer(session: AsyncSession, timer: DealTimer) -> None:
    session.add(timer)


async def claim_due_timer(session: AsyncSession, now: datetime) -> DealTimer | None:
    """One due, unfired timer, row locked; timers another worker holds are skipped."""
    return await session.scalar(
        select(DealTimer)
        .where(DealTimer.fired_at.is_(None), DealTimer.due_at <= now)
        .order_by(DealTimer.due_at)
        .limit(1)
        .with_for_update(skip_locked=True)
    )


async def claim_due_reminder(session: AsyncSession, now: datetime) -> DealTimer | None:
    """One timer whose reminder is due and not yet handled, row locked; timers another worker
    holds (for its reminder or its deadline) are skipped."""
    return await session.scalar(
        select(DealTimer)
        .where(
            DealTimer.remind_at.is_not(None),
            DealTimer.reminded_at.is_(None),
            DealTimer.remind_at <= now,
        )
        .order_by(DealTimer.remind_at)
        .limit(1)
        .with_for_update(skip_locked=True)
    )


async def due_timers(session: AsyncSession, now: datetime, cap: int) -> tuple[int, datetime | None]:
    """How many unfired timers are due (counted up to ``cap``), and the oldest one's due time."""
    due = (
        select(DealTimer.due_at)
        .where(DealTimer.fired_at.is_(None), DealTimer.due_at <= now)
        .order_by(DealTimer.due_at)
        .limit(cap)
        .subquery()
    )
    count, oldest = (await session.execute(select(func.count(), func.min(due.c.due_at)))).one()
    return int(count), oldest


async def pending_timers(session: AsyncSession, integration_id: uuid.UUID) -> list[DealTimer]:
    """The integration's unfired timers, row locked (waited for) and read afresh."""
    return await _pending_locked(session, DealTimer.integration_id == integration_id)


async def pending_timers_of(session: AsyncSession, deal_id: uuid.UUID) -> list[DealTimer]:
    """The deal's unfired timers, row locked (waited for) and read afresh."""
    return await _pending_locked(session, DealTimer.deal_id == deal_id)


async def _pending_locked(session: AsyncSession, whose: ColumnElement[bool]) -> list[DealTimer]:
    return list(
        await session.scalars(
            select(DealTimer)
            .where(whose, DealTimer.fired_at.is_(None))
            # Always in id order: two moves that lock timers never wait for each other in a ring.
            .order_by(DealTimer.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    )


async def deciding_for_update(session: AsyncSession, integration_id: uuid.UUID) -> list[Deal]:
    """The integration's deals in dispute with a decision date, row locked, in id order."""
    return list(
        await session.scalars(
            select(Deal)
            .where(
                Deal.integration_id == integration_id,
                Deal.status.in_(DISPUTES),
                Deal.decide_by.is_not(None),
            )
            .order_by(Deal.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    )


async def add_clock_offset(session: AsyncSession, deal: Deal, seconds: int) -> None:
    """Move the deal's own sandbox clock ``seconds`` on, in one UPDATE (the deal's ``version``
    is not bumped: nothing a party sees of the deal changed); ``deal`` is refreshed."""
    await db.add_in_place(session, deal, Deal.clock_offset_seconds, seconds)


async def in_dispute(session: AsyncSession) -> list[Deal]:
    return list(
        await session.scalars(
            select(Deal)
            .where(Deal.status.in_(DISPUTES))
            # The operator's queue: the earliest decision date first (a dispute opened before
            # decision dates were kept has none, and is the oldest: first of all).
            .order_by(Deal.decide_by.asc().nulls_first(), Deal.updated_at, Deal.id)
        )
    )


async def unclaimed_timers(
    session: AsyncSession, deal_id: uuid.UUID, trigger: str
) -> list[DealTimer]:
    """The deal's pending ``trigger`` timers that no deadline job holds, row locked. One the job
    holds is skipped, not waited for: the job locks the timer before the deal, and a caller
    here holds the deal already, so waiting would deadlock (the job then finds the deal moved
    on and closes the timer itself)."""
    return list(
        await session.scalars(
            select(DealTimer)
            .where(
                DealTimer.deal_id == deal_id,
                DealTimer.trigger == trigger,
                DealTimer.fired_at.is_(None),
            )
            .with_for_update(skip_locked=True)
        )
    )


async def timers_of(session: AsyncSession, deal_id: uuid.UUID) -> list[DealTimer]:
    return list(
        await session.scalars(
            select(DealTimer).where(DealTimer.deal_id == deal_id).order_by(DealTimer.created_at)
        )
    )


def seller_email(dialect: str) -> ColumnElement[Any]:
    """The deal's seller's e-mail, lower-cased, spelt as ``ix_deals_seller_email`` is on each
    backend (migration 0022), so that a comparison with it reads the index."""
    if dialect == "postgresql":
        return func.lower(Deal.seller.op("->>", return_type=String)(literal_column("'email'")))
    return func.lower(func.json_extract(Deal.seller, literal_column("'$.email'")))


def search_query(
    dialect: str, *, deal_id: uuid.UUID | None = None, email: str | None = None, limit: int
) -> Select[Any]:
    """Deals, newest first, at most ``limit``: the one with ``deal_id``, or those whose seller
    or buyer (the user the approved offer names) has ``email`` (lower-cased already). Each row:
    id, name, status, price_minor, currency, created_at, integration (its name), seller_email,
    buyer_email. Through the primary key, or ``ix_deals_seller_email``, ``ix_users_email`` and
    ``ix_deals_buyer_user_id``."""
    buyer = aliased(User)
    query = (
        select(
            Deal.id,
            Deal.name,
            Deal.status,
            Deal.price_minor,
            Deal.currency,
            Deal.created_at,
            Integration.name.label("integration"),
            seller_email(dialect).label("seller_email"),
            buyer.email.label("buyer_email"),
        )
        .join(Integration, Integration.id == Deal.integration_id)
        .outerjoin(buyer, buyer.id == Deal.buyer_user_id)
        .order_by(Deal.created_at.desc(), Deal.id.desc())
        .limit(limit)
    )
    if deal_id is not None:
        return query.where(Deal.id == deal_id)
    # A union, not an OR: each side reads its own index (an OR with a subquery reads every deal).
    buyers = select(User.id).where(User.email == email)
    matching = union(
        select(Deal.id).where(seller_email(dialect) == email),
        select(Deal.id).where(Deal.buyer_user_id.in_(buyers)),
    )
    return query.where(Deal.id.in_(matching))


async def search(
    session: AsyncSession,
    *,
    deal_id: uuid.UUID | None = None,
    email: str | None = None,
    limit: int,
) -> list[Row[Any]]:
    """The rows of ``search_query``."""
    dialect = session.get_bind().dialect.name
    query = search_query(dialect, deal_id=deal_id, email=email, limit=limit)
    return list((await session.execute(query)).all())
