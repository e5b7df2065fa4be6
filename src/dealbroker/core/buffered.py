"""Writes that a request must not wait for: buffered in memory per process, written in batches.

A request notes what it has to record (``Buffer.note``: a list append or a dict update, no
I/O); ``keep_flushing`` writes what is pending every few seconds and once more at shutdown, in
one transaction per flush. The buffer is bounded: past ``max_pending`` entries a note is
dropped, counted in ``dealbroker_buffer_dropped_total`` and, at the next flush, in one warning
line. A flush that fails, whatever the error (the database down, no pooled connection free
within ``db_pool_timeout_seconds``, a bug), keeps its entries (up to the bound) for the next
time. ``keep_flushing`` runs under the process's ``core.background.Supervisor``: an error it does
not expect is logged, counted and the flushing started again, never ended for good.

Each buffer says how it holds its entries and how it writes them: the rate limits' refusals
(``integrations.refusals``) add up counts, the API's request log
(``integrations.request_log``) appends rows.
"""

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core import logs
from dealbroker.core.db import DATABASE_FAILURES, describe_error
from dealbroker.core.metrics import buffer_dropped

Pending = TypeVar("Pending")


class Buffer(ABC, Generic[Pending]):
    """This process's entries not yet written, held as ``Pending`` (a list, a dict)."""

    # What the entries are, for the log's lines and the metric's label ("api requests").
    what: str
    # The logger the buffer's warnings go to.
    log: logging.Logger

    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self._pending = self._empty()
        self._dropped = 0
        self._dropped_metric = buffer_dropped.labels(self.what)

    @abstractmethod
    def _empty(self) -> Pending:
        """A new, empty holder of entries."""

    @abstractmethod
    def _size(self, pending: Pending) -> int:
        """How many entries ``pending`` holds, as ``max_pending`` counts them."""

    @abstractmethod
    def _merge(self, older: Pending) -> None:
        """Put back ``older``, which a flush could not write, in ``self._pending`` (up to the
        bound)."""

    @abstractmethod
    async def _write(self, session: AsyncSession, pending: Pending) -> None:
        """Write ``pending`` in ``session``'s transaction."""

    def _full(self) -> bool:
        return self._size(self._pending) >= self.max_pending

    def _drop(self) -> None:
        """A note the buffer had no room for."""
        self._dropped += 1
        self._dropped_metric.inc()

    async def flush(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        """Write what is pending, in one transaction; kept for the next time if that fails,
        whatever the error (it is raised again)."""
        pending, self._pending = self._pending, self._empty()
        if self._dropped:
            self.log.warning("%d %s dropped: the buffer was full", self._dropped, self.what)
            self._dropped = 0
        if not self._size(pending):
            return
        try:
            async with sessions() as session, session.begin():
                await self._write(session, pending)
        except BaseException:  # a bug or a cancellation too: no entry is lost to it
            self._merge(pending)
            raise


async def keep_flushing(
    buffer: Buffer[Pending],
    sessions: async_sessionmaker[AsyncSession],
    stop: asyncio.Event,
    every: float,
) -> None:
    """``buffer.flush()`` every ``every`` seconds, and once more at ``stop``. Flushes the
    database does not take are logged as a run (``logs.Failures``), not a line each."""
    failures = logs.Failures(
        buffer.log, f"writing {buffer.what}", "kept for the next time", logging.WARNING
    )
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every)
        try:
            await buffer.flush(sessions)
        except DATABASE_FAILURES as exc:
            failures.failed(describe_error(exc))
        else:
            failures.succeeded()
        if stop.is_set():
            return
