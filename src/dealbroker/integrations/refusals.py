"""Rate-limit refusals per integration, for the back office's integrations page.

A refusal costs no database write when it happens: a 429 must stay cheap under the flood that
causes it. Each server process counts its refusals in memory (``Tally``: at most ``MAX_PENDING``
integration, limit and hour triples; more are dropped, with a warning) and adds them every
``FLUSH_SECONDS`` to one row per integration, limit and hour (``RateLimitRefusal``), with one
upsert each (``core.buffered`` holds and flushes them). A token request's refusal names a
client id, which may be made up: only one that is an integration's gets a row. The retention
job deletes the hours older than ``KEEP``, so the table holds at most integrations x limits x
``KEEP`` hours rows.
"""

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.buffered import Buffer
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


class Tally(Buffer[dict[tuple[str, str, int], int]]):
    """This process's refusals not yet added to the table: by integration id or client id."""

    what = "rate-limit refusals"
    log = log

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        super().__init__(max_pending)

    def note(self, limit: str, integration: uuid.UUID | str, now: float | None = None) -> None:
        """One refusal by ``limit`` of the integration with this id (a ``UUID``) or client id
        (a ``str``)."""
        ident = (
            f"id:{integration}" if isinstance(integration, uuid.UUID) else f"client:{integration}"
        )
        key = (limit, ident, hour_of(time.time() if now is None else now))
        if key not in self._pending and self._full():
            self._drop()
            return
        self._pending[key] = self._pending.get(key, 0) + 1

    def _empty(self) -> dict[tuple[str, str, int], int]:
        return {}

    def _size(self, pending: dict[tuple[str, str, int], int]) -> int:
        return len(pending)

    def _merge(self, older: dict[tuple[str, str, int], int]) -> None:
        for key, count in older.items():
            if key in self._pending or not self._full():
                self._pending[key] = self._pending.get(key, 0) + count

    async def _write(self, session: AsyncSession, pending: dict[tuple[str, str, int], int]) -> None:
        for (limit, ident, hour), count in pending.items():
            kind, _, value = ident.partition(":")
            if kind == "id":
                await repository.add_refusals(
                    session, limit, hour, count, integration_id=uuid.UUID(value)
                )
            else:
                await repository.add_refusals(session, limit, hour, count, client_id=value)


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
