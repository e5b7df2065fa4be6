"""Live bearer tokens kept in memory, so checking a token costs no database round trip.

PostgreSQL only. An entry holds what ``auth.repository.live_token`` read for a token hash (the
integration, the scopes, the expiry); the expiry is checked against the clock on every use, and
a token not found is never cached. Revocation stays immediate in every process:

* Each code path that revokes tokens (``integrations.repository.revoke_tokens``: disabling an
  integration, rotating its client secret, from the API, the CLI or a test alike) calls
  ``notify_revoked`` in its transaction: ``pg_notify`` on ``CHANNEL`` with the integration id,
  which PostgreSQL delivers when the transaction commits. Every server process LISTENs on a
  connection of its own (``Listener``) and evicts that integration's tokens. The process that
  revoked also evicts when the session commits, without waiting for the round trip.
* A lookup that read the row before a revocation committed must not store it after the
  eviction ran: ``generation`` counts evictions; a filler reads it before its query and
  ``put`` drops the entry if it changed.
* While the listening connection is down, notifications could be missed: the cache is
  cleared and stores nothing until LISTEN is back (``listening``), so every check goes to the
  database meanwhile. The connection is probed every ``PROBE_SECONDS`` so a silent loss is
  noticed too. It is opened as the engine opens its own (``core.db.connect_kwargs``: the
  engine's reading of the URL, its connect and statement timeouts), and a run of failures to
  listen is logged as one (``core.logs.Failures``): the first, a count a minute, the recovery.

Not on SQLite: other processes (the CLI) revoke tokens there and have no way to tell the server,
and its queries are in-process calls that cost little next to a network round trip.
"""

import asyncio
import logging
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from sqlalchemy import func, select
from sqlalchemy.event import listens_for
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session as SyncSession
from sqlalchemy.orm import SessionTransaction

from dealbroker.core import logs
from dealbroker.core.db import connect_kwargs, describe_error

log = logging.getLogger("dealbroker.auth")

CHANNEL = "dealbroker_tokens_revoked"
MAX_ENTRIES = 10_000
PROBE_SECONDS = 2.0
RETRY_SECONDS = 1.0
# How the listening connections show in pg_stat_activity.
APPLICATION_NAME = "dealbroker-token-cache"
# Where a session keeps the integrations it revoked tokens of until it commits.
_REVOKED = "dealbroker_revoked_integrations"


@dataclass(frozen=True, slots=True)
class CachedToken:
    integration_id: uuid.UUID
    scopes: frozenset[str]
    expires_at: datetime


class TokenCache:
    """A bounded LRU of live tokens by token hash. ``put`` stores only while ``listening`` and
    only if no eviction happened since the caller read ``generation``."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.generation = 0
        self.listening = False
        self._entries: OrderedDict[str, CachedToken] = OrderedDict()
        _CACHES.add(self)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token_hash: str) -> CachedToken | None:
        entry = self._entries.get(token_hash)
        if entry is not None:
            self._entries.move_to_end(token_hash)
        return entry

    def put(self, token_hash: str, entry: CachedToken, generation: int) -> None:
        """Store ``entry``, read after ``generation`` was taken, unless an eviction has run
        since (the row may be revoked already) or revocations could be missed now."""
        if not self.listening or generation != self.generation:
            return
        self._entries[token_hash] = entry
        self._entries.move_to_end(token_hash)
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def evict_integration(self, integration_id: uuid.UUID) -> None:
        self.generation += 1
        stale = [h for h, e in self._entries.items() if e.integration_id == integration_id]
        for token_hash in stale:
            del self._entries[token_hash]

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()

    def stop_caching(self) -> None:
        """Revocations could be missed from now on: forget everything, store nothing."""
        self.listening = False
        self.clear()


# Every cache of this process, for the eviction at commit of a revocation made here.
_CACHES: "weakref.WeakSet[TokenCache]" = weakref.WeakSet()


def _evict_everywhere(integration_id: uuid.UUID) -> None:
    for cache in list(_CACHES):
        cache.evict_integration(integration_id)


async def notify_revoked(session: AsyncSession, integration_id: uuid.UUID) -> None:
    """Tell every server process, at commit, that ``integration_id``'s tokens are revoked;
    this process's caches evict them when the session commits."""
    session.sync_session.info.setdefault(_REVOKED, set()).add(integration_id)
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(select(func.pg_notify(CHANNEL, str(integration_id))))


@listens_for(SyncSession, "after_commit")
def _after_commit(session: SyncSession) -> None:
    for integration_id in session.info.pop(_REVOKED, ()):
        _evict_everywhere(integration_id)


@listens_for(SyncSession, "after_soft_rollback")
def _after_rollback(session: SyncSession, previous: SessionTransaction) -> None:
    if not previous.nested:  # a savepoint's rollback leaves the outer revocation standing
        session.info.pop(_REVOKED, None)


def _described(exc: BaseException) -> str:
    """``exc`` as the log shows it: its class (and SQLSTATE), never its text."""
    if isinstance(exc, OSError):
        return describe_error(exc)
    code = getattr(exc, "sqlstate", None)
    name = f"{type(exc).__module__}.{type(exc).__name__}"
    return f"{name} ({code})" if code else name


class Listener:
    """LISTENs on ``CHANNEL`` on a connection of its own to ``engine``'s database and evicts
    from ``cache``; while that connection is down, the cache is off
    (``TokenCache.stop_caching``) and it reconnects every ``RETRY_SECONDS``. ``run`` is a task
    of the server's ``core.background.Supervisor``; stopping it need not wait for a connection
    attempt in flight (``STOP_WITHIN``)."""

    STOP_WITHIN = RETRY_SECONDS

    def __init__(self, cache: TokenCache, engine: AsyncEngine) -> None:
        self.cache = cache
        self.engine = engine
        # Not a line per attempt while the database is down: one every few seconds otherwise.
        self.failures = logs.Failures(
            log,
            "token cache listener",
            "cache off, every token checked against the database",
            logging.WARNING,
        )

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            integration_id = uuid.UUID(payload)
        except ValueError:
            self.cache.clear()
            return
        self.cache.evict_integration(integration_id)

    def _lost(self, _conn: object) -> None:
        self.cache.stop_caching()

    async def run(self, stop: asyncio.Event) -> None:
        """Listen, and listen again after each loss of the connection, until ``stop``."""
        try:
            while not stop.is_set():
                try:
                    await self._listen(stop)
                except (
                    OSError,
                    asyncpg.PostgresError,
                    asyncpg.InterfaceError,
                    TimeoutError,
                ) as exc:
                    self.failures.failed(_described(exc))
                else:
                    if not stop.is_set():
                        self.failures.failed("connection lost")
                self.cache.stop_caching()
                try:
                    await asyncio.wait_for(stop.wait(), RETRY_SECONDS)
                except TimeoutError:
                    pass
        finally:
            self.cache.stop_caching()  # whatever ended it: nothing is cached unheard

    def _connect_kwargs(self) -> dict[str, object]:
        kwargs = connect_kwargs(self.engine)
        settings = dict(kwargs.get("server_settings") or {})
        settings["application_name"] = APPLICATION_NAME
        kwargs["server_settings"] = settings
        return kwargs

    async def _listen(self, stop: asyncio.Event) -> None:
        conn = await asyncpg.connect(**self._connect_kwargs())
        try:
            conn.add_termination_listener(self._lost)
            await conn.add_listener(CHANNEL, self._notified)
            # Heard from now on: what was cached before is gone, what is read from now is safe.
            self.cache.clear()
            self.cache.listening = True
            self.failures.succeeded()
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), PROBE_SECONDS)
                except TimeoutError:
                    pass
                if conn.is_closed():
                    return
                await conn.fetchval("SELECT 1", timeout=PROBE_SECONDS)
        finally:
            self.cache.stop_caching()
            conn.terminate()
