"""Statements run on asyncpg directly, on PostgreSQL, on connections of their own
(``DriverStatements``): the API's deal reads (one deal, a page of deals), its create's one
statement (``deals.repository.add``) and the webhook delivery job's claim and record.

A ``DriverStatement`` is still written with SQLAlchemy, in the repository that owns it, and
compiled once for asyncpg; ``DriverStatements`` runs it on asyncpg connections of its own
(``DriverConnections``), where asyncpg prepares it once per connection, and converts its values
to what the engine gives (``DriverStatement.read_rows``: the column types' result processors
where they change a value, JSON decoded from its text). What SQLAlchemy's asyncio layer adds to
each statement (a pool checkout with its events, a greenlet switch, the execution context, the
result's wrapping) is what this saves; ``bench/README.md`` has the figures.

What the engine gives every statement is kept: a database that is down, restarting or cut off
is SQLAlchemy's ``OperationalError`` (the API's 503, ``app``), another driver error its
``DBAPIError`` (a 500 whose log line names classes and code, never the text), no connection
free within ``DEALBROKER_DB_POOL_TIMEOUT_SECONDS`` its ``TimeoutError`` (503, busy), and each
statement is a traced span when tracing is on (``core.tracing``).

With ``DEALBROKER_FAST_PATHS=false``, or on SQLite (no asyncpg), ``DriverStatements.fetch``
runs a statement on the engine, in a transaction like any other read.
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

from dealbroker.core import tracing
from dealbroker.core.db import OUTAGE_SQLSTATES, connect_kwargs
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
      it, and is decoded here with orjson (cheaper than asyncpg calling the same
      ``orjson.loads`` as its codec).
    * ``UTCDateTime`` on a ``timestamptz``: asyncpg decodes one as an aware datetime in
      ``datetime.timezone.utc`` (``core.types.UTC``), which the processor's
      ``astimezone(UTC)`` returns as it is; the call is skipped."""
    type_ = column.type
    if isinstance(type_, JSON):
        return orjson.loads
    if isinstance(type_, UTCDateTime) and type_.impl.timezone:
        return None
    return processor


class DriverStatement:
    """A statement compiled once for asyncpg (``$n`` placeholders), with the bind processors of
    its parameters (``bound_args``); for a ``SELECT``, with the result processors of its
    columns, its rows (``read_rows``) having the columns' names as attributes, like
    SQLAlchemy's rows."""

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

    def read_rows(self, records: Sequence[asyncpg.Record]) -> list[Any]:
        """The rows of ``records`` read on ``DriverConnections``: named tuples (C-level
        attribute access, cheaper than a ``Record`` subclass with ``__getattr__``)."""
        conversions = self._read_conversions
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


class DriverConnections:
    """The driver reads' asyncpg connections: at most ``size``, opened as they are needed (a
    database down at start delays nothing) and lent one at a time; one idle for
    ``idle_seconds`` is closed, as asyncpg's pool closes its own.

    Not asyncpg's ``Pool``, whose acquire and release cost more CPU than the statement
    (``bench/bench_read_connections.py``), most of it the task it makes to shield the release
    and the task and timer of the acquire's timeout. Here
    a connection idle is lent at once and taken back with no task and no timer of its own (one
    timer, for the oldest idle connection, closes what has been idle too long); only a caller
    that must wait (every connection lent) or connect has a deadline. What asyncpg's pool
    does on taking a connection back is kept where it applies: a connection closed, cut, or
    inside a transaction is closed, not lent again. Nothing else is reset: these connections
    run only ``DriverStatement`` statements, one at a time, which set no session state, take no
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


class DriverStatements:
    """Runs ``DriverStatement``s, reads and writes alike. With the fast paths on
    (``DEALBROKER_FAST_PATHS``, ``fast``) on PostgreSQL (``on_driver``), on
    ``DriverConnections`` of their own, at most ``pool_size``, each statement by itself in
    autocommit; otherwise on ``engine``, in a transaction of its own, as SQLAlchemy runs any
    statement."""

    def __init__(
        self, engine: AsyncEngine, pool_size: int, pool_timeout: float, *, fast: bool = True
    ) -> None:
        self.engine = engine
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        self.fast = fast
        self.on_driver = fast and engine.dialect.name == "postgresql"
        self.connections = DriverConnections(self._connect, pool_size)
        # Called when a statement has run: the database answers (the app's end of an outage).
        self.answered: Callable[[], None] | None = None

    async def _connect(self) -> asyncpg.Connection:
        # No codec for JSON, unlike the engine's connections: its values arrive as their text,
        # which ``DriverStatement.read_rows`` decodes, and a JSON parameter goes as its text
        # (``DriverStatement.bound_args`` serialises it as the engine does).
        try:
            return await asyncpg.connect(**connect_kwargs(self.engine))
        except TimeoutError as exc:  # asyncpg's own, after ``CONNECT_TIMEOUT``: no answer
            # Out of reach, as a connection refused (not the wait for a free connection, which
            # ``take``'s own deadline ends, and ``_run`` raises as ``PoolTimeout``).
            raise ConnectionError("the database did not answer the connection") from exc

    async def fetch(
        self,
        statement: DriverStatement,
        params: dict[str, Any],
        conn: AsyncConnection | None = None,
    ) -> list[Any]:
        """The rows of ``statement`` with ``params`` (by name, asyncpg's own values); on
        ``conn`` when one is given (a route that holds a transaction already: on SQLite a
        second one would wait for it)."""
        if conn is not None:
            return list((await conn.execute(statement.statement, params)).all())
        if not self.on_driver:
            async with self.engine.begin() as own:
                return list((await own.execute(statement.statement, params)).all())
        return statement.read_rows(await self._run(statement, statement.args(params)))

    async def fetch_as_engine(
        self, statement: DriverStatement, params: dict[str, Any]
    ) -> list[Any]:
        """``on_driver`` only: the rows of ``statement``, a statement atomic by itself that
        writes (the API's create, ``deals.repository.add``), run by itself in autocommit on
        these connections, its parameters bound as the engine binds them
        (``DriverStatement.bound_args``): no checkout of the engine's pool, no BEGIN and no
        COMMIT. Its errors are the engine's own (``_as_engines``), as its callers always had
        them."""
        assert self.on_driver
        args = statement.bound_args(params)
        return statement.read_rows(await self._run(statement, args, as_engine=True))

    async def _run(
        self, query: DriverStatement, args: list[Any], *, as_engine: bool = False
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
                records: list[asyncpg.Record] = await driver.fetch(query.sql, *args)
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


def _as_engines(dialect: Any, sql: str, error: Exception, *, closed: bool = False) -> DBAPIError:
    """``error``, raised by asyncpg running ``sql``, as an engine of ``dialect`` raises it: the
    adapter's error (caused by asyncpg's), wrapped in the matching ``DBAPIError``
    (``IntegrityError``, ``DataError``...), marked invalidated if its connection is gone
    (``closed``, or as the dialect judges it)."""
    dbapi = dialect.loaded_dbapi
    try:
        _ADAPTER._handle_exception_no_connection(dbapi, error)
    except dbapi.Error as exc:
        translated: Any = exc
    except Exception as exc:  # the socket's own (OSError): the database is out of reach
        translated = dbapi.OperationalError(type(exc).__name__, exc)
        translated.__cause__ = exc
    # A statement the server did not answer in time (asyncpg's ``TimeoutError``, an OSError):
    # its connection is not used again.
    invalidated = (
        closed or isinstance(error, OSError) or bool(dialect.is_disconnect(translated, None, None))
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
