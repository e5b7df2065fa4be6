"""Metrics end to end: real ``serve`` and ``worker`` processes with ``DEALBROKER_METRICS_BIND``
on a loopback port, API calls and webhooks to a loopback receiver, and /metrics scraped over
HTTP and read with the Prometheus client's own parser.

* The request histogram is labelled by route template (never a path, never a capability
  link's secret), unmatched paths by one fixed label, with the counts of the requests made.
* The queue gauges are the database's due rows: deliveries, timers, outbox messages.
* A ``worker`` beside ``serve`` on one host leaves the port to it and is counted through it
  (their shared directory); when ``serve`` stops, the worker takes the port over.
* ``serve --workers 2`` (PostgreSQL): both server processes' requests are counted.
* The API's port has no /metrics; the listener has nothing but /metrics.
* The pool gauge stays true across a restart of PostgreSQL.
"""

import asyncio
import contextlib
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select, text

from dealbroker import __version__
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.migrate import head_revision, upgrade
from dealbroker.deals.models import Deal, DealTimer
from dealbroker.events.models import Delivery
from dealbroker.metrics_server import CACHE_SECONDS, QueueCollector
from dealbroker.notifications.models import OutboxMessage
from tests.conftest import BACKENDS, SELLER, database_url
from tests.pg_cluster import Cluster, running
from tests.processes import Server, Worker, free_port, token, wait_until
from tests.receiver import Receiver
from tests.smtp_server import SmtpServer

pytestmark = pytest.mark.server

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
DEAL = "/deals/v1/deals/{dealId}"


def scrape(url: str) -> Samples:
    """Every sample of /metrics, parsed by prometheus_client's parser."""
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 if absent)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def matching(samples: Samples, name: str, **labels: str) -> list[dict[str, str]]:
    """The label sets of every ``name`` sample that has ``labels`` among its labels."""
    return [
        dict(key)
        for (n, key), _ in samples.items()
        if n == name and set(labels.items()) <= set(key)
    ]


def requests(samples: Samples, route: str, status: str, method: str = "GET") -> float:
    return value(
        samples,
        "dealbroker_http_request_duration_seconds_count",
        method=method,
        route=route,
        status=status,
    )


@pytest.fixture(scope="module", params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return database_url(request.param, tmp_path_factory.mktemp(request.param), "metrics")


def add_due_rows(db_url: str, deal_id: str, timers: int, messages: int) -> dict[str, int]:
    """Unfired timers due a minute ago and unsent messages on ``deal_id``; returns what the
    database then holds as due (deliveries, timers) and pending (messages)."""

    async def run() -> dict[str, int]:
        engine = create_engine(db_url, pool_size=1)
        try:
            async with create_sessionmaker(engine)() as session, session.begin():
                deal = await session.get(Deal, uuid.UUID(deal_id))
                assert deal is not None
                now = datetime.now(UTC)
                for _ in range(timers):
                    session.add(
                        DealTimer(
                            id=uuid.uuid4(),
                            deal_id=deal.id,
                            integration_id=deal.integration_id,
                            trigger="pickup_expired",  # illegal for a Draft: skipped
                            due_at=now - timedelta(seconds=60),
                            created_at=now,
                        )
                    )
                for _ in range(messages):
                    session.add(
                        OutboxMessage(
                            id=uuid.uuid4(),
                            integration_id=deal.integration_id,
                            deal_id=deal.id,
                            kind="test",
                            to_email="kari@example.com",
                            subject="s",
                            body="b",
                            created_at=now,
                            next_attempt_at=now,
                        )
                    )
            async with create_sessionmaker(engine)() as session:
                count = select(func.count())
                return {
                    "deliveries": int(
                        await session.scalar(
                            count.select_from(Delivery).where(Delivery.status == "pending")
                        )
                        or 0
                    ),
                    "timers": int(
                        await session.scalar(
                            count.select_from(DealTimer).where(DealTimer.fired_at.is_(None))
                        )
                        or 0
                    ),
                    "messages": int(
                        await session.scalar(
                            count.select_from(OutboxMessage).where(
                                OutboxMessage.next_attempt_at.is_not(None)
                            )
                        )
                        or 0
                    ),
                }
        finally:
            await engine.dispose()

    return asyncio.run(run())


def test_serve_and_worker_share_one_metrics_listener(
    db_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    metrics_port = free_port()
    metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    shared = {
        "DEALBROKER_METRICS_BIND": f"127.0.0.1:{metrics_port}",
        "DEALBROKER_METRICS_DIR": str(tmp_path / "metrics"),
    }
    smtp = SmtpServer(refuse_first=1)
    # No worker at first (none embedded, even on SQLite): what the API queues stays due.
    server = Server(db_url, tmp_path, DEALBROKER_EMBEDDED_WORKER="off", **shared)
    worker = None
    try:
        wait_until(lambda: _answers(metrics), 10, "the metrics listener")
        assert httpx.get(metrics.removesuffix("/metrics") + "/other").status_code == 404
        headers = token(server)
        created = httpx.post(
            f"{server.base}/integrations/v1/webhook-endpoints",
            json={"url": receiver.url},
            headers=headers,
        )
        assert created.status_code == 201, created.text
        deals = [
            httpx.post(
                f"{server.base}/deals/v1/deals",
                json={"name": "Lamp", "price": 250, "seller": SELLER},
                headers=headers,
            ).json()
            for _ in range(2)
        ]
        for deal in deals:
            got = httpx.get(f"{server.base}/deals/v1/deals/{deal['id']}", headers=headers)
            assert got.status_code == 200
        # A capability link: its secret must not become a label.
        seller_page = httpx.get(deals[0]["url"])
        assert seller_page.status_code == 200
        assert httpx.get(f"{server.base}/no/such/path").status_code == 404
        assert httpx.get(f"{server.base}/metrics").status_code == 404  # not on the API's port
        in_db = add_due_rows(db_url, deals[0]["id"], timers=3, messages=4)
        assert in_db["deliveries"] == 2

        time.sleep(CACHE_SECONDS)  # the queue gauges read at the first scrape are stale now
        samples = scrape(metrics)
        assert requests(samples, "/deals/v1/deals", "201", "POST") == 2
        assert requests(samples, DEAL, "200") == 2
        assert requests(samples, "/oauth2/token", "200", "POST") == 1
        assert requests(samples, "/d/{deal_id}/{signature}", "200") == 1
        assert requests(samples, "unmatched", "404") == 2  # /no/such/path and /metrics
        routes = {
            labels["route"]
            for labels in matching(samples, "dealbroker_http_request_duration_seconds_count")
        }
        assert all(r.startswith("/") or r == "unmatched" for r in routes)
        assert not any(deals[0]["id"] in r for r in routes)
        assert value(samples, "dealbroker_queue_gauges_up") == 1
        assert value(samples, "dealbroker_webhook_deliveries_due") == in_db["deliveries"]
        assert value(samples, "dealbroker_webhook_oldest_due_age_seconds") > 0
        assert value(samples, "dealbroker_deal_timers_due") == in_db["timers"] == 3
        assert value(samples, "dealbroker_deal_timers_due_lag_seconds") >= 60
        assert value(samples, "dealbroker_outbox_messages_pending") == in_db["messages"] >= 4
        (pool,) = matching(samples, "dealbroker_db_pool_size", process="serve")
        assert value(samples, "dealbroker_db_pool_size", **pool) >= 1
        endpoint_id = created.json()["id"]
        due = {"endpoint": endpoint_id}
        assert value(samples, "dealbroker_webhook_endpoint_deliveries_due", **due) == 2
        (build,) = matching(samples, "dealbroker_build_info")
        assert build == {"version": __version__, "schema_revision": head_revision()}
        assert value(samples, "dealbroker_build_info", **build) == 1
        assert_process_metrics(samples, "serve")

        # A worker on the same host: the port is taken, so serve's listener counts its work.
        # Its mail server refuses the first message once ("try again later").
        worker = Worker(db_url, tmp_path, **smtp.env(**shared))
        worker.wait_ready()
        wait_until(lambda: len(receiver.requests) >= 2, 20, "both webhooks")

        def delivered() -> bool:
            s = scrape(metrics)
            return (
                value(s, "dealbroker_webhook_deliveries_total", outcome="succeeded") == 2
                and value(s, "dealbroker_deal_timers_fired_total", outcome="skipped") == 3
                # The queue gauges are read at most every CACHE_SECONDS: a scrape can see
                # the counters of work done after the gauges it serves were read.
                and value(s, "dealbroker_webhook_deliveries_due") == 0
                and value(s, "dealbroker_deal_timers_due") == 0
                and value(s, "dealbroker_emails_total", outcome="sent") == in_db["messages"] - 1
                and bool(matching(s, "dealbroker_process_resident_memory_bytes", process="worker"))
            )

        wait_until(delivered, 20, "the worker's metrics through serve's listener", 0.5)
        samples = scrape(metrics)
        assert (
            value(samples, "dealbroker_webhook_attempt_duration_seconds_count", outcome="success")
            == 2
        )
        assert value(samples, "dealbroker_deal_timer_lag_seconds_count") == 3
        assert matching(samples, "dealbroker_db_pool_size", process="worker")
        attempts = {"endpoint": endpoint_id, "outcome": "success"}
        assert value(samples, "dealbroker_webhook_endpoint_attempts_total", **attempts) == 2
        assert not matching(samples, "dealbroker_webhook_endpoint_deliveries_due")  # none due
        assert value(samples, "dealbroker_emails_total", outcome="retrying") == 1
        assert value(samples, "dealbroker_emails_total", outcome="failed") == 0
        assert_process_metrics(samples, "worker")
        # The endpoint by id only: its URL appears nowhere.
        exposition = httpx.get(metrics).text
        assert receiver.url.split("//", 1)[1] not in exposition
        assert lint(exposition) == []

        # serve stops: the worker takes the port over, and serve's counts stay.
        server.stop()
        wait_until(lambda: _answers(metrics), 15, "the worker to take the port over", 0.5)
        samples = scrape(metrics)
        assert requests(samples, "/deals/v1/deals", "201", "POST") == 2
        assert value(samples, "dealbroker_webhook_deliveries_total", outcome="succeeded") == 2
        assert not matching(samples, "dealbroker_db_pool_size", process="serve")  # marked dead
    finally:
        server.stop()
        if worker is not None:
            worker.process.terminate()
            worker.wait()
            worker.close()
        smtp.stop()


# The checks of ``promtool check metrics`` (client_golang's promlint) that apply to names,
# help and types.
_SNAKE = re.compile(r"^[a-z_:][a-z0-9_:]*$")
_NON_BASE_UNITS = re.compile(
    r"_(milliseconds|microseconds|nanoseconds|minutes|hours|days|ms|us|ns|kilobytes|"
    r"megabytes|gigabytes|kb|mb|gb|percent)(_|$)"
)


def lint(exposition: str) -> list[str]:
    """What promtool would say about ``exposition`` (Prometheus' text format)."""
    problems = []
    helped = set(re.findall(r"^# HELP (\S+) \S", exposition, re.MULTILINE))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)", exposition, re.MULTILINE))
    for name, kind in types.items():
        if name not in helped:
            problems.append(f"{name}: no help text")
        if not _SNAKE.match(name):
            problems.append(f"{name}: not snake_case")
        if _NON_BASE_UNITS.search(name):
            problems.append(f"{name}: use base units (seconds, bytes, ratio)")
        if kind == "counter" and not name.endswith("_total"):
            problems.append(f"{name}: counter without _total")
        if kind != "counter" and name.endswith("_total"):
            problems.append(f"{name}: non-counter with _total")
        if kind not in ("histogram", "summary") and name.endswith(("_count", "_sum", "_bucket")):
            problems.append(f"{name}: reserved suffix")
        if any(word in name.split("_") for word in ("gauge", "counter", "metric")):
            problems.append(f"{name}: names its type")
    return problems


def assert_process_metrics(samples: Samples, process: str) -> None:
    """The process's own figures, per process (a pid label), and its CPU and collections."""
    for name in (
        "dealbroker_process_resident_memory_bytes",
        "dealbroker_process_virtual_memory_bytes",
        "dealbroker_process_open_fds",
        "dealbroker_process_max_fds",
        "dealbroker_process_start_time_seconds",
        "dealbroker_process_threads",
    ):
        (labels,) = matching(samples, name, process=process)
        assert labels.keys() == {"process", "pid"}, name
        assert value(samples, name, **labels) > 0, name
    assert value(samples, "dealbroker_process_cpu_seconds_total", process=process) > 0
    assert matching(samples, "dealbroker_python_gc_collections_total", process=process)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="several workers need PostgreSQL")
def test_serve_with_two_server_processes_counts_both(tmp_path: Path) -> None:
    url = database_url("postgresql", tmp_path, "metrics_workers")
    metrics_port = free_port()
    metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    server = Server(
        url,
        tmp_path,
        "--workers",
        "2",
        start_timeout=60,
        DEALBROKER_METRICS_BIND=f"127.0.0.1:{metrics_port}",
        DEALBROKER_METRICS_DIR=str(tmp_path / "metrics"),
    )
    try:
        calls = 40
        deadline = time.monotonic() + 30
        # New connections each time: uvicorn's processes share the socket, and each takes some.
        while len(_answering_pids(tmp_path / "metrics")) < 2:
            assert time.monotonic() < deadline, "one server process answered everything"
            before = requests(scrape(metrics), "/ping", "200")
            for _ in range(calls):
                assert httpx.get(f"{server.base}/ping").status_code == 200
            assert requests(scrape(metrics), "/ping", "200") - before == calls
        samples = scrape(metrics)
        assert len(matching(samples, "dealbroker_db_pool_size", process="serve")) == 2
    finally:
        server.stop()


def _answering_pids(directory: Path) -> set[str]:
    """The processes whose files in the shared directory hold request timings."""
    return {
        path.stem.rsplit("_", 1)[1]
        for path in directory.glob("histogram_*.db")
        if any(
            "dealbroker_http_request_duration_seconds" in key
            for key, *_ in MmapedDict.read_all_values_from_file(str(path))
        )
    }


def test_queue_gauges_report_an_unreachable_database_quickly() -> None:
    collector = QueueCollector(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/none")
    started = time.monotonic()
    families = {f.name: f for f in collector.collect()}
    assert time.monotonic() - started < 3
    assert families["dealbroker_queue_gauges_up"].samples[0].value == 0
    assert "dealbroker_webhook_deliveries_due" not in families


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with running("dealbroker-metrics-outage-") as pg:
        yield pg


def _create_database(server: str, name: str) -> str:
    async def run() -> None:
        engine = create_engine(f"{server}/postgres", pool_size=1)
        try:
            async with engine.connect() as connection:
                connection = await connection.execution_options(isolation_level="AUTOCOMMIT")
                await connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            await engine.dispose()

    asyncio.run(run())
    upgrade(f"{server}/{name}")
    return f"{server}/{name}"


def _pool_in_use(samples: Samples, process: str = "serve") -> list[float]:
    return [
        value(samples, "dealbroker_db_pool_connections_in_use", **labels)
        for labels in matching(samples, "dealbroker_db_pool_connections_in_use", process=process)
    ]


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="an outage of PostgreSQL")
def test_pool_gauge_stays_true_across_a_postgresql_restart(cluster: Cluster, tmp_path: Path):
    """The in-use gauge once went negative for good after a restart (-529 in production), so
    its alert could never fire again. Requests run while the database stops and starts; once
    they are done, no connection is in use, and the gauge says so. A worker polls through the
    outage too (its pool's gauge the same)."""
    db = _create_database(cluster.url, "metrics_outage")
    metrics_port = free_port()
    metrics = f"http://127.0.0.1:{metrics_port}/metrics"
    shared = {
        "DEALBROKER_METRICS_BIND": f"127.0.0.1:{metrics_port}",
        "DEALBROKER_METRICS_DIR": str(tmp_path / "metrics"),
    }
    server = Server(db, tmp_path, DEALBROKER_EMBEDDED_WORKER="off", **shared)
    worker = Worker(db, tmp_path, poll=0.1, **shared)
    statuses: list[int] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=server.base, timeout=30) as client:
            for _ in range(3_000):  # bounded, whatever happens
                if stop.is_set():
                    return
                with contextlib.suppress(httpx.HTTPError):
                    statuses.append(client.get("/ping").status_code)
                time.sleep(0.01)

    threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    try:
        worker.wait_ready()
        wait_until(lambda: _answers(metrics), 10, "the metrics listener")
        for thread in threads:
            thread.start()
        wait_until(lambda: statuses.count(200) >= 20, 30, "pings before the outage")
        cluster.stop()
        down = len(statuses)
        wait_until(lambda: statuses[down:].count(503) >= 10, 30, "503s while it is down")
        cluster.start()
        up = len(statuses)
        wait_until(lambda: statuses[up:].count(200) >= 20, 30, "pings after the restart")
        stop.set()
        for thread in threads:
            thread.join(timeout=40)
        # (Whether a restart ever answers 500 is tests/core/test_db_outage.py's concern.)
        in_use = _pool_in_use(scrape(metrics))
        assert in_use == [0.0], (Counter(statuses), server.output())
        # The worker holds a connection only while a job runs: between rounds its gauge is 0
        # (it stayed below zero for good before), and never negative meanwhile.
        seen: list[float] = []

        def worker_idle() -> bool:
            seen.extend(_pool_in_use(scrape(metrics), "worker"))
            return seen[-1:] == [0.0]

        wait_until(worker_idle, 15, "the worker's pool gauge at 0", 0.02)
        assert min(seen) >= 0, (seen, worker.output())
    finally:
        stop.set()
        server.stop()
        worker.close()
