"""Rate limits: requests per integration, failed token requests per client id, per minute.

Counted in fixed one-minute windows. Each process counts in memory, so a check costs no
database round trip; on PostgreSQL every process adds its counts to one shared row per key and
window (``rate_limit_counters``) once a second and reads back the total of all processes, so
the limit holds across several ``serve`` processes, overshooting by at most what the processes
let through in one second between two syncs. On SQLite the one server process counts alone.

Memory is bounded: at most ``MAX_KEYS`` keys per process and window, the least recently used
dropped first (a flood of made-up client ids can only make a key forget its count after that
many other keys, each of which costs the flood a request).
"""

import asyncio
import hashlib
import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import BigInteger, Integer, String, delete
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base, describe_error

log = logging.getLogger("dealbroker.ratelimit")

WINDOW_SECONDS = 60
MAX_KEYS = 10_000


class RateLimitCounter(Base):
    """How many requests all processes counted for a key in one window (PostgreSQL only)."""

    __tablename__ = "rate_limit_counters"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    window: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(Integer)


@dataclass
class _Count:
    shared: int = 0  # every process's count at the last sync, this one's included
    pending: int = 0  # this process's since the last sync


# What a counter row stores as it is; a longer key, or one with characters outside printable
# ASCII (a made-up client id), is stored by its hash.
MAX_KEY_LENGTH = 100


def _bounded(key: str) -> str:
    if len(key) <= MAX_KEY_LENGTH and key.isascii() and key.isprintable():
        return key
    return key[:36] + "#" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class RateLimiter:
    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self.max_keys = max_keys
        self._window = -1
        self._counts: OrderedDict[str, _Count] = OrderedDict()

    def _current(self, now: float) -> int:
        window = int(now // WINDOW_SECONDS)
        if window != self._window:
            self._window, self._counts = window, OrderedDict()
        return window

    def retry_after(self, key: str, limit: int, now: float | None = None) -> int | None:
        """Seconds until ``key`` may go on, if it has reached ``limit`` in this window; else
        None. A limit of 0 is no limit."""
        now = time.time() if now is None else now
        self._current(now)
        count = self._counts.get(_bounded(key))
        if not limit or count is None or count.shared + count.pending < limit:
            return None
        return max(1, math.ceil((self._window + 1) * WINDOW_SECONDS - now))

    def hit(self, key: str, now: float | None = None) -> None:
        """Count one request (or one failure) of ``key``."""
        self._current(time.time() if now is None else now)
        key = _bounded(key)
        self._count(key, self._counts.get(key))

    def _count(self, key: str, count: _Count | None) -> None:
        if count is None:
            if len(self._counts) >= self.max_keys:
                self._counts.popitem(last=False)
            count = self._counts[key] = _Count()
        else:
            self._counts.move_to_end(key)
        count.pending += 1

    def take(self, key: str, limit: int, now: float | None = None) -> int | None:
        """Count a request of ``key`` unless it is over ``limit``: then the seconds to wait.
        ``retry_after`` then ``hit`` in one pass: it runs on every authenticated request."""
        now = time.time() if now is None else now
        self._current(now)
        key = _bounded(key)
        count = self._counts.get(key)
        if limit and count is not None and count.shared + count.pending >= limit:
            return max(1, math.ceil((self._window + 1) * WINDOW_SECONDS - now))
        self._count(key, count)
        return None

    async def sync(self, session: AsyncSession) -> None:
        """Add this process's counts to the shared ones and read back every process's total
        (PostgreSQL); drops the rows of windows past."""
        window = self._current(time.time())
        deltas = {key: count.pending for key, count in self._counts.items()}
        if deltas:
            rows = insert(RateLimitCounter).values(
                [{"key": key, "window": window, "count": delta} for key, delta in deltas.items()]
            )
            upsert = rows.on_conflict_do_update(
                index_elements=["key", "window"],
                set_={"count": RateLimitCounter.count + rows.excluded.count},
            ).returning(RateLimitCounter.key, RateLimitCounter.count)
            totals = {key: count for key, count in await session.execute(upsert)}
            if window == self._window:  # not rolled over while the database answered
                for key, delta in deltas.items():
                    count = self._counts.get(key)
                    if count is not None:
                        count.pending -= delta
                        count.shared = totals.get(key, count.shared)
        await session.execute(delete(RateLimitCounter).where(RateLimitCounter.window < window))


async def keep_in_sync(
    limiter: RateLimiter,
    sessionmaker: async_sessionmaker[AsyncSession],
    stop: asyncio.Event,
    every: float = 1.0,
) -> None:
    """Sync ``limiter`` with the other processes' counts every ``every`` seconds until ``stop``.
    While the database does not answer, each process goes on counting alone."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
        try:
            async with sessionmaker() as session, session.begin():
                await limiter.sync(session)
        except DBAPIError as exc:
            log.warning("rate limit counts not shared this time: %s", describe_error(exc))
        except OSError as exc:
            log.warning("rate limit counts not shared this time: %s", type(exc).__name__)
