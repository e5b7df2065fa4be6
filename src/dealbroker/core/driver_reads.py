"""The API's hottest reads (one deal, a page of deals) on asyncpg directly, on PostgreSQL.

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
from sqlalchemy import Select
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from dealbroker.core import tracing
from dealbroker.core.db import OUTAGE_SQLSTATES

_DIALECT = asyncpg_dialect()
# Connection-level failures: the database went away under the statement.
_CUT = (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError)


class Query:
    """A read-only ``SELECT`` compiled once for asyncpg (``$n`` placeholders), with the
    result processors of its columns; its rows have the statement's column names as
    attributes, like SQLAlchemy's rows."""

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement
        compiled = statement.compile(dialect=_DIALECT)
        self.sql = compiled.string
        self.params: tuple[str, ...] = tuple(compiled.positiontup or ())
        self.literals = compiled.params  # the statement's own values (e.g. a coalesce's 0)
        columns = list(statement.selected_columns)
        self.row: Any = namedtuple("Row", [c.key for c in columns])  # type: ignore[misc]
        self.processors: tuple[Callable[[Any], Any] | None, ...] = tuple(
            c.type.dialect_impl(_DIALECT).result_processor(_DIALECT, None) for c in columns
        )
        self._converts = any(p is not None for p in self.processors)

    def rows(self, records: Sequence[asyncpg.Record]) -> list[Any]:
        make, processors = self.row._make, self.processors
        if not self._converts:
            return [make(r) for r in records]
        return [
            make(
                [v if p is None or v is None else p(v) for p, v in zip(processors, r, strict=True)]
            )
            for r in records
        ]


async def _init(conn: asyncpg.Connection) -> None:
    # JSON columns arrive decoded, as the engine's do (its asyncpg dialect sets these codecs).
    for name in ("json", "jsonb"):
        await conn.set_type_codec(
            name,
            schema="pg_catalog",
            encoder=lambda v: orjson.dumps(v).decode(),
            decoder=orjson.loads,
        )


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
                    url = make_url(self.engine.url).set(drivername="postgresql")
                    self._pool = await asyncpg.create_pool(
                        url.render_as_string(hide_password=False),
                        min_size=0,
                        max_size=self.pool_size,
                        init=_init,
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
        args = [params[n] if n in params else query.literals[n] for n in query.params]
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
