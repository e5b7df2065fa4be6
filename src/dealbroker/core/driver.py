"""Statements on asyncpg directly, on PostgreSQL, for the hottest paths: the API's deal reads
(one deal, a page of deals), its create's one statement (``deals.repository.add``) and the
webhook worker's claim and record, each on connections of their own (``DriverReads``); the
worker's statements of a session already in a transaction on its engine's pooled connection
(``fetch_on_driver``).

A statement through SQLAlchemy's asyncio layer costs several times its driver's CPU: a pool
checkout with its events, a greenlet switch, the execution context, the result's wrapping
(measured on one deal's read: about 90 µs of CPU on asyncpg, 500-600 µs through the engine on
one connection, 1.3 ms with the checkout). A ``Query`` is still written with SQLAlchemy, in the
repository that owns it, and compiled once for asyncpg; ``DriverReads`` runs it on asyncpg
connections of its own (``Connections``), where asyncpg prepares it once per connection, and
converts its values to what the engine gives (``Query.read_rows``: the column types' result
processors where they change a value, JSON decoded from its text).

What the engine gives every statement is kept here too: a database that is down, restarting
or cut off is SQLAlchemy's ``OperationalError`` (the API's 503, ``app``), another driver error
its ``DBAPIError`` (a 500 whose log line names classes and code, never the text), a pool with
no connection free within ``DEALBROKER_DB_POOL_TIMEOUT_SECONDS`` its ``TimeoutError`` (503,
busy), and each statement is a traced span when tracing is on (``core.tracing``).

On SQLite (no asyncpg) a ``Query`` runs on the engine, in a transaction like any other read.
"""

import asyncio
import contextlib
from collections import deque, namedtuple
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import orjson
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection as _ADAPTER
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.types import JSON

from dealbroker.core import db, tracing
from dealbroker.core.db import CONNECT_TIMEOUT, OUTAGE_SQLSTATES, describe_error
from dealbroker.core.types import UTCDateTime

_DIALECT = asyncpg_dialect()
# Connection-level failures: the database went away under the statement.
_CUT = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,  # a connection left broken by a restart
    OSError,
)


def _on_reads(column: Any, processor: Callable[[Any], Any] | None) -> Callable[[Any], Any] | None:
    """What a value of ``column``, as asyncpg decodes it on the reads' own connections, needs
    to be what the engine gives (``processor``: its type's result processor for asyncpg).

    * JSON (``json``, ``jsonb``) arrives as its text, these connections having no codec for
      it, and is decoded here with orjson: about half a microsecond a value less than asyncpg
      calling the same ``orjson.loads`` as its codec (measured on a page of 20 deals).
    * ``UTCDateTime`` on a ``timestamptz``: asyncpg decodes one as an aware datetime in
      ``datetime.timezone.utc`` (``core.types.UTC``), which the processor's
      ``astimezone(UTC)`` returns as it is; the call is skipped."""
    type_ = column.type
    if isinstance(type_, JSON):
        return orjson.loads
    if isinstance(type_, UTCDateTime) and type_.impl.timezone:
        return None
    return processor


class Query:
    """A statement compiled once for asyncpg (``$n`` placeholders), with the bind processors of
    its parameters (``bound_args``); for a ``SELECT``, with the result processors of its
    columns, its rows having the columns' names as attributes, like SQLAlchemy's rows:
    ``read_rows`` for records of the reads' own connections (``DriverReads`` runs only these),
    ``rows`` for records of an engine's connection (``fetch_on_driver``)."""

    def __init__(self, statement: Any) -> None:
        self.statement = statement
        compiled = statement.compile(dialect=_DIALECT)
        self.sql = compiled.string
        self.verb = self.sql.split(None, 1)[0]  # a traced span's name
        self.params: tuple[str, ...] = tuple(compiled.positiontup or ())
        self.literals = compiled.params  # the statement's own values (e.g. a coalesce's 0)
        # What the engine does to each parameter before asyncpg sends it: its type's bind
        # processor (an enum member to its value, JSON serialised, a UTC timestamp checked).
        binds = compiled.binds
        self.binders: tuple[Callable[[Any], Any] | None, ...] = tuple(
            binds[n].type.dialect_impl(_DIALECT).bind_processor(_DIALECT) for n in self.params
        )

        columns = list(getattr(statement, "selected_columns", ()))
        self.row: Any = namedtuple("Row", [c.key for c in columns])  # type: ignore[misc]
        self.processors: tuple[Callable[[Any], Any] | None, ...] = tuple(
            c.type.dialect_impl(_DIALECT).result_processor(_DIALECT, None) for c in columns
        )
        # The columns whose values are converted, by position; most are taken as they come.
        self._conversions = tuple((i, p) for i, p in enumerate(self.processors) if p is not None)
        on_reads = (_on_reads(c, p) for c, p in zip(columns, self.processors, strict=True))
        self._read_conversions = tuple((i, p) for i, p in enumerate(on_reads) if p is not None)

    def args(self, params: dict[str, Any]) -> list[Any]:
        """``params`` (by name) in placeholder order, with the statement's own values."""
        literals = self.literals
        return [params[n] if n in params else literals[n] for n in self.params]

    def bound_args(self, params: dict[str, Any]) -> list[Any]:
        """``args``, each converted as the engine binds it (``binders``; None included, as the
        engine does: a JSON column's None is JSON's ``null``). For a statement whose parameters
        are not asyncpg's own values already (the reads pass theirs as they are)."""
        return [
            v if p is None else p(v) for p, v in zip(self.binders, self.args(params), strict=True)
        ]

    def rows(self, records: Sequence[asyncpg.Record]) -> list[Any]:
        """The rows of ``records`` read on an engine's connection (its codecs decode JSON)."""
        return self._rows(records, self._conversions)

    def read_rows(self, records: Sequence[asyncpg.Record]) -> list[Any]:
        """The rows of ``records`` read on the reads' own connections (``Connections``)."""
        return self._rows(records, self._read_conversions)

    def _rows(
        self,
        records: Sequence[asyncpg.Record],
        conversions: tuple[tuple[int, Callable[[Any], Any]], ...],
    ) -> list[Any]:
        # The named tuple made as its ``_make`` makes it, without that call (a record has as
        # many values as the statement has columns).
        new, row = tuple.__new__, self.row
        if not conversions:
            return [new(row, r) for r in records]
        rows = []
        for record in records:
            values = list(record)
            for i, process in conversions:
                if values[i] is not None:
                    values[i] = process(values[i])
            rows.append(new(row, values))
        return rows


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
    statement timeout hold on these connections too (``core.db.connect_args``)."""
    _args, kwargs = engine.dialect.create_connect_args(engine.url)
    for name in _ADAPTER_ONLY:
        kwargs.pop(name, None)
    for name, value in db.connect_args(db.statement_timeout(engine), CONNECT_TIMEOUT).items():
        kwargs.setdefault(name, value)
    return dict(kwargs)


class Connections:
    """The driver reads' asyncpg connections: at most ``size``, opened as they are needed (a
    database down at start delays nothing) and lent one at a time; one idle for
    ``idle_seconds`` is closed, as asyncpg's pool closes its own.

    Not asyncpg's ``Pool``: lending and taking back one of its connections costs about 40 µs
    of CPU, twice the statement's own (``bench/bench_read_connections.py``), most of it the
    task it makes to shield the release and the task and timer of the acquire's timeout. Here
    a connection idle is lent at once and taken back with no task and no timer of its own (one
    timer, for the oldest idle connection, closes what has been idle too long); only a caller
    that must wait (every connection lent) or connect has a deadline. What asyncpg's pool
    does on taking a connection back is kept where it applies: a connection closed, cut, or
    inside a transaction is closed, not lent again. Nothing else is reset: these connections
    run only ``Query`` statements, one at a time, which set no session state, take no
    advisory lock, listen to nothing and leave no cursor open."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[asyncpg.Connection]],
        size: int,
        idle_seconds: float = 300.0,
    ) -> None:
        self._connect = connect
        self.size = size
        self.idle_seconds = idle_seconds
        # The connections idle, each with when it went idle (the event loop's clock): the
        # oldest first, as they are lent from the end.
        self._idle: list[tuple[asyncpg.Connection, float]] = []
        self._sweeper: asyncio.TimerHandle | None = None
        self._open = 0  # connections open or being opened, lent or idle
        # Callers waiting: each is handed a connection, or None, a place to open one in.
        self._waiters: deque[asyncio.Future[asyncpg.Connection | None]] = deque()
        self._closing: set[asyncio.Task[None]] = set()
        self.closed = False

    @property
    def open(self) -> int:
        return self._open

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def take(self, timeout: float) -> asyncpg.Connection:
        """A connection for this caller alone, until it ``give``s it back (or ``discard``s
        it); ``TimeoutError`` when none is free or opened within ``timeout`` seconds."""
        if self.closed:
            raise asyncpg.InterfaceError("the driver's connections are closed")
        idle = self._idle
        while idle:
            conn, _since = idle.pop()
            if not conn.is_closed():
                return conn
            self._open -= 1  # closed while idle (a database restart)
        async with asyncio.timeout(timeout):
            if self._open >= self.size:
                handed = await self._wait()
                if handed is not None:
                    return handed
            else:
                self._open += 1
            try:
                return await self._connect()
            except BaseException:
                self._place_freed()
                raise

    async def _wait(self) -> asyncpg.Connection | None:
        waiter: asyncio.Future[asyncpg.Connection | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiters.append(waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                # Handed something as it gave up (a timeout, a cancellation): pass it on.
                handed = waiter.result()
                if handed is None:
                    self._place_freed()
                else:
                    self.give(handed)
            else:
                waiter.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def give(self, conn: asyncpg.Connection) -> None:
        """Take ``conn`` back: to the first caller waiting, or idle; closed instead if it is
        closed already, inside a transaction, or these connections are closing."""
        if self.closed or conn.is_closed() or conn.is_in_transaction():
            self.discard(conn)
            return
        if self._waiters and self._hand_over(conn):
            return
        loop = asyncio.get_running_loop()
        self._idle.append((conn, loop.time()))
        if self._sweeper is None:
            self._sweeper = loop.call_later(self.idle_seconds, self._sweep)

    def discard(self, conn: asyncpg.Connection) -> None:
        """Close ``conn`` at once (a read cut or cancelled under it): its place is freed."""
        if not conn.is_closed():
            conn.terminate()
        self._place_freed()

    def _place_freed(self) -> None:
        """One connection fewer: the first caller waiting may open one in its place."""
        if not self._hand_over(None):
            self._open -= 1

    def _hand_over(self, handed: asyncpg.Connection | None) -> bool:
        """Hand ``handed`` (a connection, or None: a place to open one in) to the first caller
        still waiting; False when none is."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(handed)
                return True
        return False

    def _sweep(self) -> None:
        """Close the connections idle ``idle_seconds`` or more; come back when the oldest left
        will have been."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        idle, now = self._idle, loop.time()
        while idle and now - idle[0][1] >= self.idle_seconds:
            conn, _since = idle.pop(0)
            self._open -= 1
            self._close_later(conn)
        if idle and not self.closed:
            wait = idle[0][1] + self.idle_seconds - now
            self._sweeper = loop.call_later(wait, self._sweep)

    def _close_later(self, conn: asyncpg.Connection) -> None:
        task = asyncio.get_running_loop().create_task(self._close_one(conn))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_one(conn: asyncpg.Connection) -> None:
        try:
            await conn.close(timeout=5)
        except Exception:  # noqa: BLE001 - gone already, or hung: closed the hard way
            conn.terminate()

    async def close(self) -> None:
        """Close the idle connections, and every one lent as it comes back; callers waiting
        and those to come get ``InterfaceError``."""
        self.closed = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(asyncpg.InterfaceError("the driver's connections are closed"))
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        idle, self._idle = self._idle, []
        for conn, _since in idle:
            self._open -= 1
            self._close_later(conn)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


class DriverReads:
    """Runs ``Query`` objects: on PostgreSQL on ``Connections`` of their own, at most
    ``pool_size``; on SQLite on ``engine``. The deal reads (``fetch``), and the one statement
    that stores a new deal (``fetch_alone``)."""

    def __init__(self, engine: AsyncEngine, pool_size: int, pool_timeout: float) -> None:
        self.engine = engine
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        self._postgresql = engine.dialect.name == "postgresql"
        self.connections = Connections(self._connect, pool_size)
        # Called when a statement has run: the database answers (the app's end of an outage).
        self.answered: Callable[[], None] | None = None

    async def _connect(self) -> asyncpg.Connection:
        # No codec for JSON, unlike the engine's connections: its values arrive as their text,
        # which ``Query.read_rows`` decodes, and a JSON parameter goes as its text
        # (``Query.bound_args`` serialises it as the engine does).
        try:
            return await asyncpg.connect(**connect_kwargs(self.engine))
        except TimeoutError as exc:  # asyncpg's own, after ``CONNECT_TIMEOUT``: no answer
            # Out of reach, as a connection refused (not the wait for a free connection, which
            # ``take``'s own deadline ends, and ``_run`` raises as ``PoolTimeout``).
            raise ConnectionError("the database did not answer the connection") from exc

    async def fetch(
        self, query: Query, params: dict[str, Any], conn: AsyncConnection | None = None
    ) -> list[Any]:
        """The rows of ``query`` with ``params`` (by name); on ``conn`` when one is given (a
        route that holds a transaction already: on SQLite a second one would wait for it)."""
        if conn is not None:
            return list((await conn.execute(query.statement, params)).all())
        if not self._postgresql:
            async with self.engine.begin() as own:
                return list((await own.execute(query.statement, params)).all())
        return query.read_rows(await self._run(query, query.args(params)))

    async def fetch_alone(self, query: Query, params: dict[str, Any]) -> list[Any]:
        """PostgreSQL only: the rows of ``query``, a statement atomic by itself that writes (the
        API's create, ``deals.repository.add``), run by itself in autocommit on these
        connections, its parameters bound as the engine binds them (``Query.bound_args``): no
        checkout of the engine's pool (about 45 µs of CPU, ``fetch_on_driver``'s), no BEGIN
        and no COMMIT. Its errors are the engine's own (``_as_engines``), as its callers
        always had them."""
        assert self._postgresql
        return query.read_rows(await self._run(query, query.bound_args(params), as_engine=True))

    async def _run(
        self, query: Query, args: list[Any], *, as_engine: bool = False
    ) -> list[asyncpg.Record]:
        connections = self.connections

        def wrap(exc: Exception, closed: bool) -> DBAPIError:
            if as_engine:
                return _as_engines(self.engine.dialect, query.sql, exc, closed=closed)
            return _wrapped(query.sql, exc)

        with tracing.span(query.verb, {"db.system": "postgresql", "db.statement": query.sql}):
            try:
                driver = await connections.take(self.pool_timeout)
            except TimeoutError:
                raise PoolTimeout(
                    f"no connection free for the driver's statements within {self.pool_timeout} s"
                ) from None
            except (asyncpg.PostgresError, *_CUT) as exc:
                raise wrap(exc, True) from None
            try:
                records = await driver.fetch(query.sql, *args)
            except asyncpg.PostgresError as exc:
                wrapped = wrap(exc, driver.is_closed())
                if wrapped.connection_invalidated:  # the database is going away under it
                    connections.discard(driver)
                else:  # the statement failed; its connection did not
                    connections.give(driver)
                raise wrapped from None
            except BaseException as exc:  # cut, or cancelled mid-statement: not lent again
                connections.discard(driver)
                if isinstance(exc, _CUT):
                    raise wrap(exc, True) from None
                raise
            connections.give(driver)
        if self.answered is not None:
            self.answered()
        return records

    async def close(self) -> None:
        await self.connections.close()


class _Driver(Exception):
    """The driver's error as SQLAlchemy's adapter would hold it: the asyncpg exception as its
    cause, its SQLSTATE as ``sqlstate`` (what ``core.db.is_outage`` and ``describe_error``
    read). Its message is the class's name alone."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(type(exc).__name__)
        self.sqlstate = getattr(exc, "sqlstate", None)
        self.__cause__ = exc


def _wrapped(sql: str, exc: BaseException) -> DBAPIError:
    orig = _Driver(exc)
    code = str(orig.sqlstate or "")
    cut = isinstance(exc, _CUT) or code.startswith(OUTAGE_SQLSTATES)
    kind = OperationalError if cut else DBAPIError
    return kind(sql, None, orig, hide_parameters=True, connection_invalidated=cut)


# --- on an engine's own pooled connection (the delivery job's statements, given an engine) ---


async def fetch_on_driver(
    engine: AsyncEngine, sql: str, args: Sequence[Any], record_class: Any = None
) -> list[Any]:
    """PostgreSQL: run ``sql`` (asyncpg's ``$n`` placeholders, e.g. a statement compiled once
    for the asyncpg dialect) by itself in autocommit, with ``args``, on the asyncpg connection of
    a pooled connection, and return its records (of ``record_class``, asyncpg's ``Record`` if
    none). For a statement run on every round of a busy loop: SQLAlchemy's execution path
    (its asyncio adapter, execution context, result rows) cost about a third of such a
    statement's CPU (measured: bench/README.md). What it would give is kept: its errors are
    SQLAlchemy's (``DBAPIError`` wrapping the adapter's error, itself caused by asyncpg's), so
    the callers' outage handling holds; a connection lost is invalidated in the pool; with
    tracing on, the statement has its span, without its parameters. Parameters and results
    are asyncpg's own values: the caller converts what its columns' types would have."""
    async with engine.connect() as conn:
        fairy = await conn.get_raw_connection()
        driver = fairy.driver_connection
        assert driver is not None
        wrapped: DBAPIError | None = None
        with tracing.span(sql.split(None, 1)[0], _db_attributes(engine, sql)) as span:
            try:
                return await driver.fetch(sql, *args, record_class=record_class)
            except Exception as error:
                if isinstance(error, TimeoutError):  # the server did not answer in time
                    driver.terminate()  # closed at once, not politely (``core.db``)
                wrapped = await _driver_error(conn, fairy.dbapi_connection, sql, error)
                if span is not None:  # as ``tracing.instrument_engine`` marks a statement's
                    tracing.mark_failed(span, describe_error(wrapped))
        assert wrapped is not None
        raise wrapped from wrapped.orig


def _db_attributes(engine: AsyncEngine, sql: str) -> dict[str, Any] | None:
    if not tracing.enabled():
        return None
    return {"db.system": "postgresql", "db.statement": sql, "db.name": engine.url.database}


async def _driver_error(
    conn: AsyncConnection, adapted: Any, sql: str, error: Exception
) -> DBAPIError:
    """``error``, raised by asyncpg running ``sql`` on ``conn``, as SQLAlchemy would have raised
    it (``_as_engines``); the connection invalidated if it is gone."""
    wrapped = _as_engines(conn.dialect, sql, error, adapted=adapted)
    if wrapped.connection_invalidated:
        await conn.invalidate()
    return wrapped


def _as_engines(
    dialect: Any, sql: str, error: Exception, *, adapted: Any = None, closed: bool = False
) -> DBAPIError:
    """``error``, raised by asyncpg running ``sql``, as an engine of ``dialect`` raises it: the
    adapter's error (caused by asyncpg's), through ``adapted`` (an engine connection's adapter)
    if there is one, wrapped in the matching ``DBAPIError`` (``IntegrityError``,
    ``DataError``...), marked invalidated if its connection is gone (``closed``, or as the
    dialect judges it)."""
    dbapi = dialect.loaded_dbapi
    try:
        if adapted is None:
            _ADAPTER._handle_exception_no_connection(dbapi, error)
        else:
            adapted._handle_exception(error)  # raises asyncpg's error as the adapter's
    except dbapi.Error as exc:
        translated: Any = exc
    except Exception as exc:  # the socket's own (OSError): the database is out of reach
        translated = dbapi.OperationalError(type(exc).__name__, exc)
        translated.__cause__ = exc
    # A statement the server did not answer in time (asyncpg's ``TimeoutError``, an OSError):
    # its connection is not used again.
    invalidated = (
        closed
        or isinstance(error, OSError)
        or bool(dialect.is_disconnect(translated, adapted, None))
    )
    wrapped = DBAPIError.instance(
        sql,
        None,
        translated,
        dbapi.Error,
        hide_parameters=True,
        connection_invalidated=invalidated,
        dialect=dialect,
    )
    assert isinstance(wrapped, DBAPIError)
    return wrapped
