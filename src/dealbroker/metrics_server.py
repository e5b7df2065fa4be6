"""The /metrics listener: one per host, on its own address, never on the API's port.

``serve`` (its main process: the server itself, or uvicorn's supervisor with ``--workers``) and
every ``worker`` with ``DEALBROKER_METRICS_BIND`` set try to listen there. One process of the
host gets the port and answers for all of them, since every process writes its metrics to the
host's shared directory (``core.metrics_directory``); the others try again every few seconds,
so when that one stops another takes over.

A scrape answers with the processes' counters, histograms and gauges, added up by
``prometheus_client``'s ``MultiProcessCollector``, and with the queue gauges, which
``QueueCollector`` reads from the database then and there: how many webhook deliveries and deal
deadlines are due and how late the oldest is, how many messages wait in the outbox. Those are
facts of the database, the same whichever process asks, so no process has to keep them up to
date; each is one bounded query on a partial index, on a connection of the listener's own with
a short timeout, and the answer is kept for a moment so that close scrapes share it.
"""

import asyncio
import errno
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from dealbroker import __version__
from dealbroker.core import clock
from dealbroker.core.migrate import head_revision
from dealbroker.core.settings import Settings
from dealbroker.deals import repository as deals
from dealbroker.events import repository as events
from dealbroker.notifications import repository as notifications

log = logging.getLogger("dealbroker.metrics")

RETRY_BIND_SECONDS = 5.0
QUERY_TIMEOUT_SECONDS = 2.0  # a scrape never waits longer for the database
CACHE_SECONDS = 2.0
COUNT_CAP = 100_000  # counts stop here: a backlog that large is alarm enough
ENDPOINTS_SHOWN = 50  # the endpoints with most due deliveries, each a series of its own


@dataclass(frozen=True)
class QueueStats:
    deliveries_due: int
    oldest_delivery_due: datetime | None
    timers_due: int
    oldest_timer_due: datetime | None
    outbox_pending: int
    due_by_endpoint: dict[uuid.UUID, int]


def _age(now: datetime, then: datetime | None) -> float:
    return max((now - then).total_seconds(), 0.0) if then is not None else 0.0


class QueueCollector(Collector):
    """The database's queue gauges, read at scrape time in an event loop of its own."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="metrics-db", daemon=True).start()
        self._engine: AsyncEngine | None = None
        self._lock = threading.Lock()
        self._read_at = -CACHE_SECONDS
        self._stats: QueueStats | None = None
        self._now = clock.now()

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # concurrent scrapes share one reading
            if time.monotonic() - self._read_at >= CACHE_SECONDS:
                self._now = clock.now()
                self._stats = self._read(self._now)
                self._read_at = time.monotonic()
            stats, now = self._stats, self._now
        yield _build_info()
        yield GaugeMetricFamily(
            "dealbroker_queue_gauges_up",
            "1 if the queue gauges below could be read from the database at this scrape.",
            value=0 if stats is None else 1,
        )
        if stats is None:
            return
        for name, text, value in [
            (
                "dealbroker_webhook_deliveries_due",
                "Webhook deliveries due and not claimed by a worker "
                f"(enabled endpoints; counted up to {COUNT_CAP}).",
                stats.deliveries_due,
            ),
            (
                "dealbroker_webhook_oldest_due_age_seconds",
                "How long the oldest due webhook delivery has waited for a worker (0: none).",
                _age(now, stats.oldest_delivery_due),
            ),
            (
                "dealbroker_deal_timers_due",
                f"Deal deadlines due and not yet handled (counted up to {COUNT_CAP}).",
                stats.timers_due,
            ),
            (
                "dealbroker_deal_timers_due_lag_seconds",
                "How far past its due time the oldest unhandled deal deadline is (0: none).",
                _age(now, stats.oldest_timer_due),
            ),
            (
                "dealbroker_outbox_messages_pending",
                f"Messages to sellers and buyers not yet sent nor given up (counted up to "
                f"{COUNT_CAP}).",
                stats.outbox_pending,
            ),
        ]:
            yield GaugeMetricFamily(name, text, value=value)
        by_endpoint = GaugeMetricFamily(
            "dealbroker_webhook_endpoint_deliveries_due",
            f"Webhook deliveries due and not claimed, by endpoint id: the {ENDPOINTS_SHOWN} "
            f"endpoints with most (among the oldest {COUNT_CAP} due); an endpoint with none "
            "has no series.",
            labels=["endpoint"],
        )
        for endpoint_id, count in sorted(stats.due_by_endpoint.items(), key=lambda i: str(i[0])):
            by_endpoint.add_metric([str(endpoint_id)], count)
        yield by_endpoint

    def _read(self, now: datetime) -> QueueStats | None:
        future = asyncio.run_coroutine_threadsafe(self._query(now), self._loop)
        try:
            return future.result(timeout=QUERY_TIMEOUT_SECONDS + 0.5)
        except Exception as exc:  # a scrape reports the failure (queue_gauges_up 0), never a 500
            future.cancel()
            log.warning("queue gauges not read: %s", type(exc).__name__)
            return None

    async def _query(self, now: datetime) -> QueueStats:
        if self._engine is None:
            self._engine = _engine(self.database_url)
        async with asyncio.timeout(QUERY_TIMEOUT_SECONDS):
            async with async_sessionmaker(self._engine)() as session:
                deliveries, oldest_delivery = await events.due_deliveries(session, now, COUNT_CAP)
                timers, oldest_timer = await deals.due_timers(session, now, COUNT_CAP)
                outbox = await notifications.pending_count(session, COUNT_CAP)
                by_endpoint = await events.due_deliveries_by_endpoint(
                    session, now, COUNT_CAP, ENDPOINTS_SHOWN
                )
        return QueueStats(deliveries, oldest_delivery, timers, oldest_timer, outbox, by_endpoint)


def _build_info() -> GaugeMetricFamily:
    info = GaugeMetricFamily(
        "dealbroker_build_info",
        "Always 1: the version of the code that answers, and the schema revision it needs.",
        labels=["version", "schema_revision"],
    )
    info.add_metric([__version__, head_revision()], 1)
    return info


def _engine(url: str) -> AsyncEngine:
    """One connection, autocommit (no lock taken, on SQLite neither), each statement cut off
    at the timeout by the database too."""
    if url.startswith("sqlite"):
        connect_args: dict[str, object] = {"timeout": QUERY_TIMEOUT_SECONDS}
    else:
        millis = str(int(QUERY_TIMEOUT_SECONDS * 1000))
        connect_args = {
            "timeout": QUERY_TIMEOUT_SECONDS,
            "server_settings": {
                "statement_timeout": millis,
                "application_name": "dealbroker-metrics",
            },
        }
    return create_async_engine(
        url,
        connect_args=connect_args,
        pool_size=1,
        max_overflow=0,
        pool_pre_ping=True,
        hide_parameters=True,
        isolation_level="AUTOCOMMIT",
    )


def registry(settings: Settings) -> CollectorRegistry:
    """Every process's metrics from the shared directory, and the queue gauges."""
    reg = CollectorRegistry()
    MultiProcessCollector(reg)
    reg.register(QueueCollector(settings.database_url))
    return reg


PATH = "/metrics"
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def only_metrics(app: WSGIApp) -> WSGIApp:
    """``app`` at ``/metrics`` alone: any other path is 404, not the metrics again."""

    def route(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"Not found: metrics are at /metrics\n"]
        return app(environ, start_response)

    return route


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """No access line per scrape."""


def serve(host: str, port: int, reg: CollectorRegistry) -> ThreadingWSGIServer:
    """Answer /metrics from ``reg`` on ``host:port`` in a daemon thread."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (ThreadingWSGIServer,), {"address_family": family})
    httpd: ThreadingWSGIServer = make_server(
        host, port, only_metrics(make_wsgi_app(reg)), server_class, handler_class=_QuietHandler
    )
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return httpd


def start(settings: Settings) -> None:
    """Listen on ``DEALBROKER_METRICS_BIND`` in a background thread, now or once the process of
    this host that holds it stops. Nothing happens when metrics are off."""
    if not settings.metrics_enabled:
        return
    host, port = settings.metrics_address
    threading.Thread(
        target=_listen_when_free, args=(host, port, settings), name="metrics", daemon=True
    ).start()


def _listen_when_free(host: str, port: int, settings: Settings) -> None:
    told = False
    reg = registry(settings)
    while True:
        try:
            serve(host, port, reg)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                log.error("metrics cannot listen on %s:%d: %s", host, port, exc)
                return
            if not told:
                log.info(
                    "metrics address %s:%d is taken, by another process of this host that "
                    "answers for this one too; taking over if it stops",
                    host,
                    port,
                )
                told = True
            time.sleep(RETRY_BIND_SECONDS)
            continue
        log.info("metrics on http://%s:%d/metrics", host, port)
        return
