"""The metrics every process records: its requests, its webhook attempts, its timers, its pool.

Each process writes its own values; under ``serve`` and ``worker`` with metrics on they are
files shared by the host's processes (``core.metrics_directory``), elsewhere (tests, CLI
commands) plain memory. The gauges about the database's queues are not here: the listener
reads them from the database when scraped (``dealbroker.metrics_server``). docs/operations.md
lists every metric with its labels.
"""

from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

# Seconds. A request is mostly a few milliseconds; a webhook may take up to its 15 s timeout.
HTTP_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WEBHOOK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0)
TIMER_LAG_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

http_request_duration = Histogram(
    "dealbroker_http_request_duration_seconds",
    "Time from a request's arrival to its response's last byte, by route template; the "
    "_count series is the number of requests.",
    ["method", "route", "status"],
    buckets=HTTP_BUCKETS,
)
webhook_attempt_duration = Histogram(
    "dealbroker_webhook_attempt_duration_seconds",
    "Time of one webhook attempt, by outcome: success (2xx), http_error (any other answer), "
    "timeout, network_error, refused (a non-public address); the _count series counts them.",
    ["outcome"],
    buckets=WEBHOOK_BUCKETS,
)
webhook_deliveries = Counter(
    "dealbroker_webhook_deliveries",
    "Webhook deliveries by what their latest attempt left them: succeeded, retrying (another "
    "attempt is scheduled), failed (no attempt left, or the endpoint answered 410).",
    ["outcome"],
)
timers_fired = Counter(
    "dealbroker_deal_timers_fired",
    "Deal deadlines handled, by outcome: fired (the transition ran), skipped (the deal had "
    "moved on), failed.",
    ["outcome"],
)
timer_lag = Histogram(
    "dealbroker_deal_timer_lag_seconds",
    "How late a deal deadline was handled, after its due time.",
    buckets=TIMER_LAG_BUCKETS,
)
# Per process (the pid label): a pool that is full makes that process's requests wait.
db_pool_in_use = Gauge(
    "dealbroker_db_pool_connections_in_use",
    "Database connections checked out of this process's pool.",
    ["process"],
    multiprocess_mode="liveall",
)
db_pool_size = Gauge(
    "dealbroker_db_pool_size",
    "Connections this process's pool keeps (requests wait when all are in use).",
    ["process"],
    multiprocess_mode="liveall",
)


def instrument_pool(engine: AsyncEngine, process: str) -> None:
    """Report ``engine``'s checked-out connections, as ``process`` (``serve`` or ``worker``).

    The gauge is set to the pool's own count at each checkout and checkin, never moved by one:
    while the database is down, a connection that fails to open is checked in without having
    been checked out, so counting events drifted below zero for good after a restart (seen at
    -529 in production), and the alert on it could never fire again."""
    in_use = db_pool_in_use.labels(process)
    size = getattr(engine.sync_engine.pool, "size", None)
    db_pool_size.labels(process).set(size() if callable(size) else 0)

    def count() -> int:
        # The engine's current pool: a dispose replaces it (and carries these listeners over).
        checkedout = getattr(engine.sync_engine.pool, "checkedout", None)
        return checkedout() if callable(checkedout) else 0

    def checkout(*_: Any) -> None:
        in_use.set(count())

    def checkin(*_: Any) -> None:
        # Called before the connection is back in the pool, which still counts it as out.
        in_use.set(max(count() - 1, 0))

    event.listen(engine.sync_engine.pool, "checkout", checkout)
    event.listen(engine.sync_engine.pool, "checkin", checkin)
