"""Rate-limit refusals per integration, for the back office's integrations page.

A refusal costs no database write when it happens: a 429 must stay cheap under the flood that
causes it. Each server process counts its refusals in memory (``Tally``: at most ``MAX_PENDING``
integration, limit and hour triples; more are dropped, with a warning) and adds them every
``FLUSH_SECONDS`` to one row per integration, limit and hour (``RateLimitRefusal``), with one
upsert each. A token request's refusal names a client id, which may be made up: only one that
is an integration's gets a row. The retention job deletes the hours older than ``KEEP``, so the
table holds at most integrations x limits x ``KEEP`` hours rows.
"""

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core.db import describe_error
from dealbroker.integrations import repository

log = logging.getLogger("dealbroker.ratelimit")

MAX_PENDING = 10_000
FLUSH_SECONDS = 5.0
# What the back office shows: the last day and the last week. The rows are kept as long.
WINDOWS = (timedelta(hours=24), timedelta(days=7))
KEEP = timedelta(days=7)


def hour_of(at: float) -> int:
    """Hours since the epoch of ``at`` (seconds since the epoch)."""
    return int(at // 3600)


@dataclass(frozen=True)
class Counts:
    """An integration's refusals in each of ``WINDOWS``, in that order, by every limit."""

    last_day: int = 0
    last_week: int = 0


class Tally:
    """This process's refusals not yet added to the table: by integration id or client id."""

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self.max_pending = max_pending
        self._pending: dict[tuple[str, str, int], int] = {}
        self._dropped = 0

    def note(self, limit: str, integration: uuid.UUID | str, now: float | None = None) -> None:
        """One refusal by ``limit`` of the integration with this id (a ``UUID``) or client id
        (a ``str``)."""
        ident = (
            f"id:{integration}" if isinstance(integration, uuid.UUID) else f"client:{integration}"
        )
        key = (limit, ident, hour_of(time.time() if now is None else now))
        if key not in self._pending and len(self._pending) >= self.max_pending:
            self._dropped += 1
            return
        self._pending[key] = self._pending.get(key, 0) + 1

    async def flush(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        """Add what is pending to the table, in one transaction; kept for the next time if the
        database does not take it."""
        pending, self._pending = self._pending, {}
        if self._dropped:
            log.warning("%d rate-limit refusals not counted per integration", self._dropped)
            self._dropped = 0
        if not pending:
            return
        try:
            async with sessions() as session, session.begin():
                for (limit, ident, hour), count in pending.items():
                    kind, _, value = ident.partition(":")
                    if kind == "id":
                        await repository.add_refusals(
                            session, limit, hour, count, integration_id=uuid.UUID(value)
                        )
                    else:
                        await repository.add_refusals(session, limit, hour, count, client_id=value)
        except (DBAPIError, OSError):
            for key, count in pending.items():
                if key in self._pending or len(self._pending) < self.max_pending:
                    self._pending[key] = self._pending.get(key, 0) + count
            raise


async def keep_flushing(
    tally: Tally,
    sessions: async_sessionmaker[AsyncSession],
    stop: asyncio.Event,
    every: float = FLUSH_SECONDS,
) -> None:
    """``tally.flush()`` every ``every`` seconds, and once more at ``stop``."""
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        try:
            await tally.flush(sessions)
        except DBAPIError as exc:
            log.warning("rate-limit refusals not added this time: %s", describe_error(exc))
        except OSError as exc:
            log.warning("rate-limit refusals not added this time: %s", type(exc).__name__)
        if stop.is_set():
            return


async def counts(session: AsyncSession, now: datetime) -> dict[uuid.UUID, Counts]:
    """Every integration's refusals over ``WINDOWS``, counted by whole hours up to ``now``'s."""
    current = hour_of(now.timestamp())
    day, week = (current - int(w.total_seconds() // 3600) + 1 for w in WINDOWS)
    rows = await repository.refusals_since(session, week)
    found: dict[uuid.UUID, Counts] = {}
    for integration_id, hour, count in rows:
        seen = found.get(integration_id, Counts())
        found[integration_id] = Counts(
            seen.last_day + (count if hour >= day else 0), seen.last_week + count
        )
    return found


async def purge(session: AsyncSession, now: datetime, limit: int) -> int:
    """Delete one batch of the hours older than ``KEEP``; returns how many rows went."""
    return await repository.purge_refusals(session, hour_of((now - KEEP).timestamp()), limit)
