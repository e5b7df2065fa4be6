"""Statements on asyncpg directly, on PostgreSQL, for the hottest paths: the API's deal reads
(one deal, a page of deals) on a pool of their own (``DriverReads``), and the webhook worker's
claim and record and the API's create (``deals.repository.add``) on their engine's pooled
connection (``fetch_on_driver``).

A statement through SQLAlchemy's asyncio layer costs several times its driver's CPU: a pool
checkout with its events, a greenlet switch, the execution context, the result's wrapping
(measured on one deal's read: about 90 µs of CPU on asyncpg, 500-600 µs through the engine on
one connection, 1.3 ms with the checkout). A ``Query`` is still written with SQLAlchemy, in the
repository that owns it, and compiled once for asyncpg; ``DriverReads`` runs it on an asyncpg
pool of its own, where asyncpg prepares it once per connection, and converts its values as
the engine would (the column types' result processors: enums, UTC datetimes, JSON).

What the engine gives every statement is kept here too: a database that is down, restarting
or cut off is SQLAlchemy's ``OperationalError`` (the API's 503, ``app``), another driver error
its ``DBAPIError`` (a 500 whose log line names classes and code, never the text), a pool with
no connection free within ``DEALBROKER_DB_POOL_TIMEOUT_SECONDS`` its ``TimeoutError`` (503,
busy), and each statement is a traced span when tracing is on (``core.tracing``).

On SQLite (no asyncpg) a ``Query`` runs on the engine, in a transaction like any other read.
"""

import asyncio
from collections import namedtuple
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg
import orjson
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from dealbroker.core import tracing
from dealbroker.core.db import OUTAGE_SQLSTATES, describe_error

_DIALECT = asyncpg_dialect()
# Connection-level failures: the database went away under the statement.
_CUT = (
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,  # a connection left broken by a restart
    OSError,
)


class Query:
    """A statement compiled once for asyncpg (``$n`` placeholders), with the bind processors of
    its parameters (``bound_args``); for a ``SELECT``, with the result processors of its
    columns, its rows having the columns' names as attributes, like SQLAlchemy's rows
    (``DriverReads`` runs only these)."""

    def __init__(self, statement: Any) -> None:
        self.statement = statement
        compiled = statement.compile(dialect=_DIALECT)
        self.sql = compiled.string
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
        make, conversions = self.row._make, self._conversions
        if not conversions:
            return [make(r) for r in records]
        rows = []
        for record in records:
            values = list(record)
            for i, process in conversions:
                if values[i] is not None:
                    values[i] = process(values[i])
            rows.append(make(values))
        return rows


async def _init(conn: asyncpg.Connection) -> None:
    # JSON columns arrive decoded, as the engine's do (its asyncpg dialect sets these codecs).
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name,
            schema="pg_catalog",
            encoder=lambda v: orjson.dumps(v).decode(),
            decoder=orjson.loads,
        )


# Options of SQLAlchemy's asyncpg adapter, which asyncpg itself does not take.
_ADAPTER_ONLY = (
    "prepared_statement_cache_size",
    "prepared_statement_name_func",
    "async_creator_fn",
)


def _connect_kwargs(engine: AsyncEngine) -> dict[str, Any]:
    """What ``asyncpg.connect`` takes to reach the engine's database: the dialect's own reading
    of the URL (host, port, user, password, database, and what its query string adds, such as
    ``ssl=require``), as the engine connects. A URL handed to asyncpg as a DSN would send such
    options to PostgreSQL as settings, which refuses them."""
    _args, kwargs = engine.dialect.create_connect_args(engine.url)
    for name in _ADAPTER_ONLY:
        kwargs.pop(name, None)
    return dict(kwargs)


async def _nothing_to_reset(conn: asyncpg.Connection) -> None:
    """The pool's reset of a connection it takes back: nothing beyond what asyncpg always does
    (an open transaction is rolled back, listeners dropped). The default sends
    ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`` and waits for it, a round
    trip after every read; this pool's connections only ever run ``Query`` statements, one
    at a time, which set no session state, take no advisory lock, listen to nothing and leave
    no cursor open."""


class DriverReads:
    """Runs ``Query`` objects: on PostgreSQL on an asyncpg pool of at most ``pool_size``
    connections, opened as needed (a database down at start delays nothing); on SQLite on
    ``engine``."""

    def __init__(self, engine: AsyncEngine, pool_size: int, pool_timeout: float) -> None:
        self.engine = engine
        self.pool_size = pool_size
        self.pool_timeout = pool_timeout
        self._postgresql = engine.dialect.name == "postgresql"
        self._pool: asyncpg.Pool | None = None
        self._opening: asyncio.Lock | None = None

    async def _get_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            self._opening = self._opening or asyncio.Lock()
            async with self._opening:
                if self._pool is None:
                    self._pool = await asyncpg.create_pool(
                        **_connect_kwargs(self.engine),
                        min_size=0,
                        max_size=self.pool_size,
                        init=_init,
                        reset=_nothing_to_reset,
                    )
        return self._pool

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
        args = query.args(params)
        with tracing.span("SELECT", {"db.system": "postgresql", "db.statement": query.sql}):
            try:
                pool = await self._get_pool()
                async with pool.acquire(timeout=self.pool_timeout) as driver:
                    records = await driver.fetch(query.sql, *args)
            except TimeoutError:
                raise PoolTimeout(
                    f"no connection free for the driver's reads within {self.pool_timeout} s"
                ) from None
            except (asyncpg.PostgresError, *_CUT) as exc:
                raise _wrapped(query.sql, exc) from None
        return query.rows(records)

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()


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


# --- on the engine's own pooled connection (the worker) --------------------------------------


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
    """``error``, raised by asyncpg running ``sql``, as SQLAlchemy would have raised it: the
    adapter's error (caused by asyncpg's) wrapped in a ``DBAPIError``; the connection
    invalidated if it is gone."""
    dialect = conn.dialect
    dbapi = dialect.loaded_dbapi
    try:
        adapted._handle_exception(error)  # raises asyncpg's error as the adapter's
    except dbapi.Error as exc:
        translated: Any = exc
    except Exception as exc:  # the socket's own (OSError): the database is out of reach
        translated = dbapi.OperationalError(type(exc).__name__, exc)
        translated.__cause__ = exc
    invalidated = bool(dialect.is_disconnect(translated, adapted, None))
    if invalidated:
        await conn.invalidate()
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
