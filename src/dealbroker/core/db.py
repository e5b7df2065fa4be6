"""Database engine, sessions and the one-transaction-per-request dependency.

SQLite (the embedded default) runs in WAL mode and opens every transaction with
``BEGIN IMMEDIATE``: a transaction that reads and then writes can then never fail with a
lock-upgrade error; writers queue on the busy timeout instead. PostgreSQL uses its default
READ COMMITTED isolation; exclusive changes take row locks.

A database error's text can hold a request's personal data, so the log never shows it: the
engine hides statement parameters, and ``describe_error`` names an error without its message.
"""

import contextlib
import traceback
import weakref
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVarTuple

from fastapi import Depends, Request
from sqlalchemy import (
    ColumnElement,
    Executable,
    MetaData,
    Row,
    Select,
    SQLColumnExpression,
    delete,
    event,
    inspect,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase, InstrumentedAttribute
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.pool import Pool

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" event issue BEGIN itself (see below).
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


# PostgreSQL: how long opening a connection may take (one normally opens in milliseconds).
# A server that accepts the connection but never answers (hung, or behind a stuck proxy) would
# otherwise hold the caller for asyncpg's default of 60 s; past this the driver raises
# ``TimeoutError``, which the API answers 503 (``app``) and the worker retries at its next poll.
CONNECT_TIMEOUT = 5.0
# PostgreSQL: how much longer than a statement's timeout the client waits for the server to say
# it cancelled the statement before it gives up on the connection itself (``connect_args``).
STATEMENT_TIMEOUT_GRACE = 1.0
# PostgreSQL's SQLSTATE for a statement cancelled: by its ``statement_timeout``, or by an
# operator (``pg_cancel_backend``). The connection stays usable; the request may try again.
QUERY_CANCELED = "57014"
# A write in a read-only transaction: on a server in recovery (a standby), every transaction is.
READ_ONLY_TRANSACTION = "25006"


def connect_args(
    statement_timeout: float | None, connect_timeout: float | None = None
) -> dict[str, Any]:
    """What asyncpg's ``connect`` takes, beside the address, for a connection of this service on
    PostgreSQL. Opening it takes at most ``connect_timeout`` seconds (``CONNECT_TIMEOUT`` if
    None). With a ``statement_timeout`` (``DEALBROKER_DB_STATEMENT_TIMEOUT_SECONDS``), every
    statement on it has that long: PostgreSQL itself cancels a statement that runs longer (its
    ``statement_timeout``: waiting on a lock, a slow plan), which fails with ``QUERY_CANCELED``
    on a connection still usable; and the client gives up ``STATEMENT_TIMEOUT_GRACE`` seconds
    later if the server has not answered at all (hung, or a network that drops everything):
    asyncpg's ``command_timeout`` raises ``TimeoutError``, and the connection is closed
    (``_close_on_timeout``). Opening a connection then takes no longer than that either. Both
    are answered 503 with Retry-After (``app``); a worker's job fails in one line and runs
    again at its next poll."""
    connect = CONNECT_TIMEOUT if connect_timeout is None else connect_timeout
    if statement_timeout is None:
        return {"timeout": connect}
    given_up = statement_timeout + STATEMENT_TIMEOUT_GRACE
    return {
        "timeout": min(connect, given_up),
        "command_timeout": given_up,
        "server_settings": {"statement_timeout": str(max(1, round(statement_timeout * 1000)))},
    }


def _close_on_timeout(context: Any) -> None:
    """A statement the client gave up on (asyncpg's ``TimeoutError``, ``connect_args``): the
    connection is closed at once. SQLAlchemy invalidates such a connection, but closes it
    politely first, waiting up to 2 s more for a server that is not answering."""
    if isinstance(context.original_exception, TimeoutError) and context.connection is not None:
        with contextlib.suppress(Exception):
            driver = context.connection.connection.driver_connection
            if driver is not None:
                driver.terminate()


def _leave_a_standby(context: Any) -> None:
    """A write refused as read-only (SQLSTATE 25006) came through a connection to a server in
    recovery: a standby a failover has not promoted yet, or a primary demoted since the
    connection was opened. The pool drops that connection (SQLAlchemy's disconnect handling)
    rather than lend it again, so the next one is opened to wherever the URL leads now
    (HAProxy's primary, or a multi-host URL's ``target_session_attrs=read-write``)."""
    code = getattr(context.original_exception, "sqlstate", None)
    if code == READ_ONLY_TRANSACTION:
        context.is_disconnect = True


def create_engine(
    url: str,
    pool_size: int = 10,
    pool_timeout: float = 30,
    statement_timeout: float | None = None,
) -> AsyncEngine:
    """An async engine for ``url`` with the settings this service relies on. On PostgreSQL a
    request waits at most ``pool_timeout`` seconds for a free connection; then SQLAlchemy
    raises ``sqlalchemy.exc.TimeoutError``, which the API answers 503 (``app``). Opening a
    connection takes at most ``CONNECT_TIMEOUT`` seconds, and a statement at most
    ``statement_timeout`` (``connect_args``; None, for migrations and the command line's
    maintenance: no limit). On SQLite neither applies: no server can hang there, and a
    statement waits for the write lock at most the busy timeout (30 s), then fails as
    ``OperationalError`` (503)."""
    if url.startswith("sqlite"):
        engine = create_async_engine(url, connect_args={"timeout": 30}, hide_parameters=True)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        event.listen(engine.sync_engine, "begin", _sqlite_begin)
        return engine
    # A fixed pool: overflow connections are closed when returned, and opening one costs far
    # more than a request, so under load they churn. Requests wait instead.
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=pool_timeout,
        connect_args=connect_args(statement_timeout),
        hide_parameters=True,
    )
    event.listen(engine.sync_engine, "handle_error", _close_on_timeout)
    event.listen(engine.sync_engine, "handle_error", _leave_a_standby)
    _STATEMENT_TIMEOUTS[engine.sync_engine.pool] = statement_timeout
    return engine


# The statement timeout of each PostgreSQL engine ``create_engine`` made, by its pool (which an
# engine with other execution options shares): connections opened beside the engine
# (``connect_kwargs``) keep to it too.
_STATEMENT_TIMEOUTS: "weakref.WeakKeyDictionary[Pool, float | None]" = weakref.WeakKeyDictionary()


def statement_timeout(engine: AsyncEngine) -> float | None:
    """The statement timeout ``create_engine`` gave ``engine`` (None: none, or not ours)."""
    return _STATEMENT_TIMEOUTS.get(engine.sync_engine.pool)


# Options of SQLAlchemy's asyncpg adapter, which asyncpg itself does not take.
_ADAPTER_ONLY = (
    "prepared_statement_cache_size",
    "prepared_statement_name_func",
    "async_creator_fn",
)


def connect_kwargs(engine: AsyncEngine) -> dict[str, Any]:
    """What ``asyncpg.connect`` takes to reach the engine's database: the dialect's own reading
    of the URL (host, port, user, password, database, and what its query string adds, such as
    ``ssl=require``), as the engine connects. A URL handed to asyncpg as a DSN would send such
    options to PostgreSQL as settings, which refuses them. The engine's connect timeout and
    statement timeout hold on these connections too (``connect_args``)."""
    _args, kwargs = engine.dialect.create_connect_args(engine.url)
    for name in _ADAPTER_ONLY:
        kwargs.pop(name, None)
    for name, value in connect_args(statement_timeout(engine), CONNECT_TIMEOUT).items():
        kwargs.setdefault(name, value)
    return dict(kwargs)


def create_probe_engine(url: str, timeout: float) -> AsyncEngine:
    """An engine of one connection for the health checks, beside the request pool: a probe
    never queues behind requests for a pooled connection, and waits at most ``timeout``
    seconds for its own. On SQLite it reads without ``BEGIN IMMEDIATE``, so it never queues
    behind a writer either (WAL lets it read meanwhile)."""
    if url.startswith("sqlite"):
        engine = create_async_engine(url, connect_args={"timeout": timeout}, hide_parameters=True)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_async_engine(
        url,
        pool_size=1,
        max_overflow=0,
        pool_timeout=timeout,
        connect_args=connect_args(timeout, min(timeout, CONNECT_TIMEOUT)),
        hide_parameters=True,
    )
    event.listen(engine.sync_engine, "handle_error", _close_on_timeout)
    return engine


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


def create_read_engine(engine: AsyncEngine) -> AsyncEngine | None:
    """``engine`` for read-only requests on PostgreSQL: autocommit, so a GET pays no BEGIN and
    COMMIT round trips. ``None`` on SQLite, where
    every transaction takes the write lock deliberately (see ``_sqlite_begin``)."""
    if engine.dialect.name != "postgresql":
        return None
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def create_read_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession] | None:
    """Sessions on ``create_read_engine(engine)``; ``None`` on SQLite."""
    read_engine = create_read_engine(engine)
    return None if read_engine is None else create_sessionmaker(read_engine)


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    """One transaction per request: committed when the handler returns, rolled back if it raises.

    Used with ``scope="function"`` so the commit happens before the response is sent: a client
    never sees a success that was not stored. GET requests, which never write, run without a
    transaction on PostgreSQL.
    """
    readonly = request.app.state.read_sessionmaker
    if readonly is not None and request.method in ("GET", "HEAD"):
        async with readonly() as session:
            yield session
        if began(session):
            _answered(request)
        return
    async with _transaction(request) as session:
        yield session


async def get_write_session(request: Request) -> AsyncIterator[AsyncSession]:
    """One transaction per request, as ``get_session``, for the GET routes that write: an
    identity provider sends the browser back with a GET that finishes a signature."""
    async with _transaction(request) as session:
        yield session


@contextlib.asynccontextmanager
async def _transaction(request: Request) -> AsyncIterator[AsyncSession]:
    """A session of ``request``'s transaction: committed when the block ends, rolled back if
    it raises."""
    session = request.app.state.sessionmaker()
    try:
        yield session
    except BaseException:
        await _end(session, commit=False)
        raise
    used = began(session)
    await _end(session, commit=True)
    if used:
        _answered(request)


def _answered(request: Request) -> None:
    """The database answered ``request``: a run of refused requests, if any, has ended (the
    app's ``database_answered``, which logs it)."""
    answered = getattr(request.app.state, "database_answered", None)
    if answered is not None:
        answered()


async def _end(session: AsyncSession, *, commit: bool) -> None:
    """Commit (or roll back) a request's transaction, its listeners told (``after_commit``: the
    workers woken, the token caches evicted...), and close ``session``.

    A session that never reached the database (no connection taken, nothing waiting to be
    flushed: the API's create on PostgreSQL, whose one statement runs by itself) has nothing
    to send, so it is ended directly, without SQLAlchemy's asyncio layer: a greenlet for each
    step and a task to shield the close, CPU for nothing (``bench/bench_inprocess.py``). Any
    other is ended through that layer, as it always was."""
    sync = session.sync_session
    if not began(session) and not (sync.new or sync.dirty or sync.deleted):
        try:
            if commit:
                sync.commit()
            else:
                sync.rollback()
        finally:
            sync.close()
        return
    async with session:  # closed as it closes itself: shielded from cancellation
        if commit:
            await session.commit()
        else:
            await session.rollback()


Session = Annotated[AsyncSession, Depends(get_session, scope="function")]
WriteSession = Annotated[AsyncSession, Depends(get_write_session, scope="function")]

_BEGAN = "dealbroker.began"


@event.listens_for(OrmSession, "after_begin")
def _note_begin(session: OrmSession, _transaction: Any, _connection: Any) -> None:
    session.info[_BEGAN] = True


def began(session: AsyncSession) -> bool:
    """Whether ``session`` has begun a transaction on the database (taken a connection) yet:
    until then, work that is one statement may run by itself (``execute_alone``)."""
    return bool(session.info.get(_BEGAN))


def alone_on(session: AsyncSession) -> AsyncEngine | None:
    """The engine on which a statement of ``session``'s may run by itself (``execute_alone``):
    PostgreSQL's, while ``session`` has not begun a transaction; None otherwise."""
    engine = session.bind
    if (
        isinstance(engine, AsyncEngine)
        and engine.dialect.name == "postgresql"
        and not began(session)
    ):
        return engine
    return None


async def execute_alone(
    session: AsyncSession, statement: Executable, params: dict[str, Any] | None = None
) -> Sequence[Row[Any]]:
    """Run ``statement``, atomic by itself, and return its rows. On PostgreSQL, while
    ``session`` has not begun a transaction (``alone_on``), on a connection of its own in
    autocommit: no BEGIN and no COMMIT round trips, and the session stays free to begin one
    afterwards. Otherwise in the session's transaction."""
    engine = alone_on(session)
    if engine is not None:
        async with engine.connect() as conn:
            alone = await conn.execution_options(isolation_level="AUTOCOMMIT")
            return (await alone.execute(statement, params)).all()
    return (await session.execute(statement, params)).all()


PACKAGE_DIR = Path(__file__).parent.parent


async def add_in_place(
    session: AsyncSession, row: "Base", column: InstrumentedAttribute[int], amount: int
) -> None:
    """Add ``amount`` to ``row``'s ``column`` in one UPDATE, so that two additions at once both
    count; ``row`` is refreshed with the sum (and changes nothing else: no version is bumped)."""
    mapper = inspect(type(row))
    (key,) = mapper.primary_key
    (identity,) = mapper.primary_key_from_instance(row)
    total = await session.scalar(
        update(type(row))
        .where(key == identity)
        .values({column.key: column + amount})
        .returning(column)
        .execution_options(synchronize_session=False)
    )
    set_committed_value(row, column.key, total)


async def oldest_first(
    session: AsyncSession, at: InstrumentedAttribute[Any], *chosen: ColumnElement[bool]
) -> list[Any]:
    """The rows of ``at``'s table that ``chosen`` picks, oldest (by ``at``) first; rows of one
    instant in key order, so that a list reads the same every time."""
    table = at.class_
    query = select(table).where(*chosen).order_by(at, *inspect(table).primary_key)
    return list(await session.scalars(query))


_Row = TypeVarTuple("_Row")


def oldest_batch(query: Select[*_Row], by: SQLColumnExpression[Any], limit: int) -> Select[*_Row]:
    """The first ``limit`` rows of ``query`` in ``by`` order (a retention job's batch: the
    oldest), locked on PostgreSQL, skipping those another worker's purge holds."""
    return query.order_by(by).limit(limit).with_for_update(skip_locked=True)


async def delete_batch(
    session: AsyncSession, table: type["Base"], chosen: ColumnElement[bool]
) -> int:
    """Delete the rows of ``table`` that ``chosen`` picks (a bounded batch: the retention job's
    queries select at most their limit), without loading them; returns how many went."""
    result = await session.execute(
        delete(table).where(chosen).execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


class DatabaseFault(Exception):
    """A database error that is a bug, raised in place of the driver's error with only its
    description (``describe_error``): whatever logs it afterwards, such as the server's
    last-resort handler printing the traceback, cannot print the original text."""


# SQLSTATEs of a database that is going away or not there yet: a connection exception (class
# 08), an administrator's or a crash's shutdown, a server still starting; or one out of a
# resource (class 53: no connection slot left, out of memory, disk full), which is no bug of a
# statement's and passes once the load (or an operator) relieves it; or a write that reached a
# server in recovery (25006, read-only transaction): a standby being promoted in a failover,
# which takes writes a moment later (docs/operations/failover.md).
OUTAGE_SQLSTATES = ("08", "53", "57P01", "57P02", "57P03", READ_ONLY_TRANSACTION)
# What a background loop of the database (a buffer's flush, the rate limits' claims and sync, a
# supervised task) meets and tries again after, described in one line by ``describe_error``: the
# database's errors, the driver's own (a connection refused, a statement not answered in time)
# and no pooled connection free in time.
DATABASE_FAILURES = (DBAPIError, OSError, PoolTimeout)


def is_outage(exc: DBAPIError) -> bool:
    """Whether ``exc`` says the database is unreachable (down, restarting, the connection cut)
    or too slow (a statement past its timeout, ``QUERY_CANCELED``) rather than that a
    statement is wrong: the caller may try again shortly."""
    if isinstance(exc, OperationalError) or exc.connection_invalidated:
        return True
    orig = exc.orig
    code = str(getattr(orig, "sqlstate", "") or "")
    driver = (orig.__cause__ or orig) if orig is not None else None
    return (
        code.startswith(OUTAGE_SQLSTATES) or code == QUERY_CANCELED or isinstance(driver, OSError)
    )


def describe_error(exc: DBAPIError | OSError | PoolTimeout) -> str:
    """``exc`` as a log may show it: its class, the driver's error class and code, and the line
    of this service that ran the statement; never the error's message. An ``OSError`` (a
    ``ConnectionError``, a ``TimeoutError``) is the driver's own, raised opening a connection
    (PostgreSQL down, restarting or not answering) or running a statement the server did not
    answer in time (``connect_args``), which SQLAlchemy does not wrap: its class and our line,
    e.g. ``ConnectionRefusedError at deals/repository.py:410``. A pool's ``TimeoutError`` is
    ``no database connection free``.

    Statement parameters are the request's data (the engine's ``hide_parameters`` keeps them
    out of the exception's text), and a driver's message may echo one too: asyncpg's ``invalid
    input for query argument $1: 'kari@example.com'``, PostgreSQL's ``invalid input syntax for
    type uuid: "…"``, SQLite's ``JSON path error near '…'``. The class and code say what went
    wrong without the values, e.g. ``DBAPIError (asyncpg.exceptions.DataError, 22000) at
    deals/repository.py:42``.
    """
    if isinstance(
        exc, PoolTimeout
    ):  # every pooled connection stayed busy, or waits on the database
        return "no database connection free"
    text = type(exc).__name__
    if isinstance(exc, DBAPIError):
        orig = exc.orig
        # asyncpg's own exception is the cause of the one SQLAlchemy's adapter raises.
        driver = (orig.__cause__ or orig) if orig is not None else None
        details = [] if driver is None else [f"{type(driver).__module__}.{type(driver).__name__}"]
        code = getattr(orig, "sqlstate", None) or getattr(orig, "sqlite_errorname", None)
        if code:
            details.append(str(code))
        if details:
            text += f" ({', '.join(details)})"
    ours = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if Path(frame.filename).is_relative_to(PACKAGE_DIR)
    ]
    if ours:
        text += f" at {Path(ours[-1].filename).relative_to(PACKAGE_DIR)}:{ours[-1].lineno}"
    return text
