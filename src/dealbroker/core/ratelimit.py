"""Rate limits: requests per integration, failed token requests, per minute.

Counted in fixed one-minute windows. On SQLite the one server process counts in memory.

On PostgreSQL the server processes share each key's budget for the window through one row
(``rate_limit_counters``: key, window, units claimed by all processes). A process claims a
block of the budget at a time (``BLOCK_SHARE`` of the limit, at least one) with one UPSERT, lets
requests through from memory while its block lasts, and claims the next when it is spent. The
claims never add up to more than the limit, so however the requests of a burst fall on the
processes, the deployment lets at most the limit through in a window, and a request pays a
database round trip only once per block. A process gives back the part of a block it has not
used once the key has been idle for ``IDLE_SECONDS`` (``keep_in_sync``), so another process can
use it. What the processes hold unused when the budget runs out is the only shortfall: at most a
block each, for at most a second. A process the database refused asks again at most once every
``RECHECK_SECONDS`` (for units given back meanwhile). While the database does not answer, or
no pooled connection comes free for a claim within ``DEALBROKER_DB_POOL_TIMEOUT_SECONDS``, each
process counts alone, up to the whole limit (logged as a run, ``logs.Failures``).

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
from dataclasses import dataclass, field

from sqlalchemy import BigInteger, Integer, String, bindparam, delete, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core import logs
from dealbroker.core.db import DATABASE_FAILURES, Base, describe_error
from dealbroker.core.metrics import rate_limit_refusals

log = logging.getLogger("dealbroker.ratelimit")

WINDOW_SECONDS = 60
MAX_KEYS = 10_000
# A claim takes this share of a key's limit per minute: 5 %, so two processes strand at most
# 10 % of it when the budget runs out, and a request at the limit of 6000 a minute costs a round
# trip once in 300.
BLOCK_SHARE = 0.05
IDLE_SECONDS = 1.0
RECHECK_SECONDS = 1.0


class RateLimitCounter(Base):
    """Units of a key's budget that all processes claimed in one window (PostgreSQL only)."""

    __tablename__ = "rate_limit_counters"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    window: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(Integer)


@dataclass
class _Budget:
    used: int = 0  # requests this process let through (or failures it counted) in the window
    granted: int = 0  # units this process claimed from the shared budget (PostgreSQL)
    last_used: float = 0.0
    refused_until: float = 0.0  # the shared budget was spent: ask the database again after it
    claiming: asyncio.Lock = field(default_factory=asyncio.Lock)


# What a counter row stores as it is; a longer key, or one with characters outside printable
# ASCII (a made-up client id), is stored by its hash.
MAX_KEY_LENGTH = 100


def _bounded(key: str) -> str:
    if len(key) <= MAX_KEY_LENGTH and key.isascii() and key.isprintable():
        return key
    return key[:36] + "#" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def block_size(limit: int) -> int:
    """Units one claim takes of a key whose limit is ``limit``."""
    return max(1, math.ceil(limit * BLOCK_SHARE))


class RateLimiter:
    """Counts requests per key. ``engine`` (PostgreSQL, autocommit) shares each key's budget
    with the other processes on it; without one, this process counts alone."""

    def __init__(self, engine: AsyncEngine | None = None, max_keys: int = MAX_KEYS) -> None:
        self.engine = engine
        self.max_keys = max_keys
        self._window = -1
        self._budgets: OrderedDict[str, _Budget] = OrderedDict()
        # Claims the database did not take, logged as a run (``logs.Failures``), not a line per
        # request while it is down.
        self._claims_failing = logs.Failures(
            log, "claiming shared rate limits", "counting in this process alone", logging.WARNING
        )

    def _current(self, now: float) -> int:
        window = int(now // WINDOW_SECONDS)
        if window != self._window:
            self._window, self._budgets = window, OrderedDict()
        return window

    def _retry_after(self, now: float) -> int:
        return max(1, math.ceil((self._window + 1) * WINDOW_SECONDS - now))

    def _budget(self, key: str) -> _Budget:
        budget = self._budgets.get(key)
        if budget is None:
            if len(self._budgets) >= self.max_keys:
                self._budgets.popitem(last=False)
            budget = self._budgets[key] = _Budget()
        else:
            self._budgets.move_to_end(key)
        return budget

    async def take(self, name: str, key: str, limit: int, now: float | None = None) -> int | None:
        """Count a request of ``key`` unless that would pass ``limit`` this window: then the
        seconds until the next window (and one more refusal of the limit ``name`` in the
        metrics). A limit of 0 is no limit. Runs on every authenticated request."""
        if not limit:
            return None
        now = time.time() if now is None else now
        self._current(now)
        budget = self._budget(_bounded(key))
        budget.last_used = now
        if self.engine is None:
            allowed = budget.used < limit
        else:
            allowed = budget.used < budget.granted or await self._claim(key, budget, limit, now)
        if not allowed:
            rate_limit_refusals.labels(name).inc()
            return self._retry_after(now)
        budget.used += 1
        return None

    def give_back(self, key: str) -> None:
        """Uncount one request of ``key`` counted in this window (a token request whose secret
        turned out right: only failures count)."""
        budget = self._budgets.get(_bounded(key))
        if budget is not None and budget.used > 0:
            budget.used -= 1

    async def _claim(self, key: str, budget: _Budget, limit: int, now: float) -> bool:
        """Claim a block of ``key``'s shared budget; whether this request may now go on. One
        claim at a time per key: the requests that arrive meanwhile share its block."""
        async with budget.claiming:
            if budget.used < budget.granted:
                return True
            if now < budget.refused_until:
                return False
            window, block = self._window, block_size(limit)
            try:
                got = await self._claim_rows(_bounded(key), window, block, limit)
            except DATABASE_FAILURES as exc:
                # The database out of reach, or no pooled connection free in time (a full pool
                # under load, or every one waiting on a hung database): counted here, not a 503.
                return self._alone(budget, limit, describe_error(exc))
            self._claims_failing.succeeded()
            if window != self._window:  # the window ended during the claim: this one is new
                return True
            budget.granted += got
            if got < block:
                budget.refused_until = now + RECHECK_SECONDS
            return budget.used < budget.granted

    def _alone(self, budget: _Budget, limit: int, failure: str) -> bool:
        """The claim failed (``failure``): this process counts the key alone, up to ``limit``."""
        self._claims_failing.failed(failure)
        budget.granted = max(budget.granted, limit)
        return budget.used < budget.granted

    async def _claim_rows(self, key: str, window: int, block: int, limit: int) -> int:
        """Add ``block`` to the key's claimed units and return how many of them fit under
        ``limit``; any that do not are returned at once."""
        assert self.engine is not None
        rows = insert(RateLimitCounter).values(key=key, window=window, count=block)
        claim = rows.on_conflict_do_update(
            index_elements=["key", "window"],
            set_={"count": RateLimitCounter.count + rows.excluded.count},
        ).returning(RateLimitCounter.count)
        async with self.engine.connect() as conn:
            total = (await conn.execute(claim)).scalar_one()
            got = max(0, min(block, limit - (total - block)))
            if got < block:
                await conn.execute(_give_back, [{"k": key, "w": window, "n": block - got}])
        return got

    async def sync(self, now: float | None = None) -> None:
        """Give back to the shared budget what this process holds unused for keys idle for
        ``IDLE_SECONDS``, and drop the rows of windows past (PostgreSQL)."""
        assert self.engine is not None
        now = time.time() if now is None else now
        window = self._current(now)
        returned = []
        for key, budget in self._budgets.items():
            unused = budget.granted - budget.used
            if unused > 0 and now - budget.last_used >= IDLE_SECONDS:
                budget.granted = budget.used  # first, so that no request spends them meanwhile
                returned.append({"k": key, "w": window, "n": unused})
        async with self.engine.connect() as conn:
            if returned:
                await conn.execute(_give_back, returned)
            await conn.execute(delete(RateLimitCounter).where(RateLimitCounter.window < window))


_give_back = (
    update(RateLimitCounter)
    .where(RateLimitCounter.key == bindparam("k"), RateLimitCounter.window == bindparam("w"))
    .values(count=RateLimitCounter.count - bindparam("n"))
)


async def keep_in_sync(limiter: RateLimiter, stop: asyncio.Event, every: float = 1.0) -> None:
    """``limiter.sync()`` every ``every`` seconds until ``stop``. While the database does not
    answer, or the pool has no connection free, the units wait for the next time."""
    # Logged as a run (``logs.Failures``), not a line a second while the database is down.
    failures = logs.Failures(
        log, "sharing rate limit counts", "kept for the next time", logging.WARNING
    )
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass
        try:
            await limiter.sync()
        except DATABASE_FAILURES as exc:
            failures.failed(describe_error(exc))
        else:
            failures.succeeded()
