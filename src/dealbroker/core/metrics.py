"""The metrics every process records: its requests, its webhook attempts, its timers, its pool.

Each process writes its own values; under ``serve`` and ``worker`` with metrics on they are
files shared by the host's processes (``core.metrics_directory``), elsewhere (tests, CLI
commands) plain memory. The gauges about the database's queues are not here: the listener
reads them from the database when scraped (``dealbroker.metrics_server``). docs/operations/monitor.md
lists every metric with its labels.
"""

import gc
import logging
import os
import threading
import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.process_collector import ProcessCollector
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger("dealbroker.background")

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
# By endpoint id (never its URL, which may hold the integration's secret): one endpoint that
# fails or slows down shows as itself. Bounded by the endpoints that exist.
webhook_endpoint_attempts = Counter(
    "dealbroker_webhook_endpoint_attempts",
    "Webhook attempts by endpoint id and outcome: success (2xx), http_error, timeout, "
    "network_error, refused.",
    ["endpoint", "outcome"],
)
emails = Counter(
    "dealbroker_emails",
    "Messages to sellers and buyers by outcome: sent, retrying (this attempt failed, another "
    "is scheduled), failed (given up: refused for good, too many attempts, or too old).",
    ["outcome"],
)
retention_rows_purged = Counter(
    "dealbroker_retention_rows_purged",
    "Rows deleted by the retention job, by table (an event's deliveries and their attempts go "
    "with it, counted as the event).",
    ["table"],
)
timers_fired = Counter(
    "dealbroker_deal_timers_fired",
    "Deal deadlines handled, by outcome: fired (the transition ran), skipped (the deal had "
    "moved on), failed.",
    ["outcome"],
)
reminders = Counter(
    "dealbroker_deal_reminders",
    "Reminders before a deal deadline handled, by outcome: sent (to the parties who must act), "
    "skipped (the deadline was met, cancelled or already due, or no party could be written to), "
    "failed (the deadline has no reminder).",
    ["outcome"],
)
timer_lag = Histogram(
    "dealbroker_deal_timer_lag_seconds",
    "How late a deal deadline was handled, after its due time.",
    buckets=TIMER_LAG_BUCKETS,
)
# Requests refused 429 by a rate limit, by the limit's name (core.ratelimit): "api" (an
# integration's requests), "token_failures" (a client id's failed token requests from one
# address), "token_failures_client" (a client id's from all addresses). Never a client's id or
# address: those would make a series of every caller.
rate_limit_refusals = Counter(
    "dealbroker_rate_limit_refusals",
    "Requests refused with 429 by a rate limit, by limit.",
    ["limit"],
)
# Evidence photo uploads refused, by reason (``web.evidence``): before the body is read
# "closed" (the deal is not in dispute), "suspended", "not_a_party" (an offerer whose offer was
# not approved), "no_places" (the party's photos are all added), "pixel_budget" (the party's
# pixels per hour are spent); from the file "no_photo", "too_large" (bytes), "too_many_pixels"
# (from its header), "not_an_image" (does not decode as a photo we take); "other" (anything
# else; none is known).
evidence_photo_refusals = Counter(
    "dealbroker_evidence_photo_refusals",
    "Evidence photo uploads refused, by reason.",
    ["reason"],
)
# What a process's in-memory buffers (core.buffered) had no room for, by buffer: "rate-limit
# refusals", "api requests".
buffer_dropped = Counter(
    "dealbroker_buffer_dropped",
    "Entries a full in-memory buffer dropped instead of writing them, by buffer.",
    ["buffer"],
)
# A long-lived task of a server process (core.background) that raised, by the task's name:
# "api-request-log", "rate-limit-refusals", "worker", ... Each is started again after a pause.
background_task_failures = Counter(
    "dealbroker_background_task_failures",
    "Failures of a server process's long-lived background tasks, by task; each failed task "
    "is started again after a pause.",
    ["task"],
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


# The process's own figures, per process (the pid label, added in multiprocess mode; gone when
# it stops): prometheus_client's process and platform collectors read the process that answers
# the scrape only, so each process writes its own here, every few seconds.
PROCESS_SECONDS = 5.0
process_resident_memory = Gauge(
    "dealbroker_process_resident_memory_bytes",
    "Resident memory of this process.",
    ["process"],
    multiprocess_mode="liveall",
)
process_virtual_memory = Gauge(
    "dealbroker_process_virtual_memory_bytes",
    "Virtual memory of this process.",
    ["process"],
    multiprocess_mode="liveall",
)
process_open_fds = Gauge(
    "dealbroker_process_open_fds",
    "File descriptors this process has open (sockets and database connections among them).",
    ["process"],
    multiprocess_mode="liveall",
)
process_max_fds = Gauge(
    "dealbroker_process_max_fds",
    "The most file descriptors this process may open.",
    ["process"],
    multiprocess_mode="liveall",
)
process_start_time = Gauge(
    "dealbroker_process_start_time_seconds",
    "When this process started, in seconds since the Unix epoch.",
    ["process"],
    multiprocess_mode="liveall",
)
process_threads = Gauge(
    "dealbroker_process_threads",
    "Python threads alive in this process.",
    ["process"],
    multiprocess_mode="liveall",
)
# Counters: summed over the host's processes, those stopped since included, so rate() reads
# the CPU the deployment uses, whichever process used it.
process_cpu = Counter(
    "dealbroker_process_cpu_seconds",
    "CPU time (user and system) used by the processes, by kind.",
    ["process"],
)
python_gc_collections = Counter(
    "dealbroker_python_gc_collections",
    "Garbage collections by the processes, by kind and generation.",
    ["process", "generation"],
)
_watched: int | None = None  # the pid whose figures are written


def watch_process(process: str) -> None:
    """Write this process's figures, as ``process`` (``serve``, ``worker``), now and every
    ``PROCESS_SECONDS`` from a daemon thread; once per process (the embedded worker leaves
    serve's)."""
    global _watched
    if _watched == os.getpid():
        return
    _watched = os.getpid()
    collector = ProcessCollector(namespace="", registry=None)
    gauges = {
        "process_resident_memory_bytes": process_resident_memory.labels(process),
        "process_virtual_memory_bytes": process_virtual_memory.labels(process),
        "process_open_fds": process_open_fds.labels(process),
        "process_max_fds": process_max_fds.labels(process),
        "process_start_time_seconds": process_start_time.labels(process),
    }
    cpu = process_cpu.labels(process)
    threads = process_threads.labels(process)
    last_cpu = [0.0]
    last_gc = [0] * len(gc.get_stats())

    def update() -> None:
        for family in collector.collect():
            for sample in family.samples:
                if sample.name in gauges:
                    gauges[sample.name].set(sample.value)
        used = sum(os.times()[:2])
        cpu.inc(max(used - last_cpu[0], 0.0))
        last_cpu[0] = used
        for generation, stats in enumerate(gc.get_stats()):
            done = stats["collections"]
            python_gc_collections.labels(process, str(generation)).inc(done - last_gc[generation])
            last_gc[generation] = done
        threads.set(threading.active_count())

    failures = background_task_failures.labels("process-metrics")

    def loop() -> None:
        told = False
        while True:
            try:
                update()
            except Exception:  # never frozen for the process's life (as core.background)
                failures.inc()
                if not told:  # the traceback once; the count says the rest
                    log.exception("background task process-metrics failed, going on")
                    told = True
            time.sleep(PROCESS_SECONDS)

    threading.Thread(target=loop, name="process-metrics", daemon=True).start()


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
