"""Waking the job runner as soon as a transaction that queued background work commits.

Webhook deliveries and payment-provider calls are rows a transaction writes; the worker should
start on them at once, not at its next poll. In-process: an ``asyncio.Event`` set after commit
(the embedded worker on SQLite, and any worker in the same process). Across processes on
PostgreSQL: ``NOTIFY`` sent inside the queuing transaction, which PostgreSQL delivers to
listeners only when it commits, and never for a transaction rolled back.
"""

import asyncio

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

CHANNEL = "dealbroker_deliveries"
_FLAG = "dealbroker_emitted"
_waiters: set[asyncio.Event] = set()


def subscribe() -> asyncio.Event:
    """An event set whenever a transaction in this process commits queued work."""
    waiter = asyncio.Event()
    _waiters.add(waiter)
    return waiter


def unsubscribe(waiter: asyncio.Event) -> None:
    _waiters.discard(waiter)


async def mark(session: AsyncSession) -> None:
    """Note that this transaction queued work; wake workers once it commits."""
    if session.info.get(_FLAG):
        return
    session.info[_FLAG] = True
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(text(f"NOTIFY {CHANNEL}"))


def notified(session: AsyncSession) -> None:
    """Note that this transaction queued work and already sent the ``NOTIFY`` itself (a
    statement that calls ``pg_notify``): in-process waiters still wake once it commits."""
    session.info[_FLAG] = True


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    if session.info.pop(_FLAG, False):
        for waiter in _waiters:
            waiter.set()


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_FLAG, None)
