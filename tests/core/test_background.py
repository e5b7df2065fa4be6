"""The server's background tasks under one supervisor: a task that fails is logged in one line
(a bug's traceback once), counted, started again after a pause, and named by ``/readyz``
meanwhile; it is never ended for the process's life."""

import asyncio
import logging
import time
import uuid

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.process_collector import ProcessCollector
from sqlalchemy import func, select
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from dealbroker.app import create_app
from dealbroker.core import metrics
from dealbroker.core.background import Supervisor
from dealbroker.integrations.models import ApiRequest
from tests.conftest import BASE_URL, make_caller, make_settings

METRIC = "dealbroker_background_task_failures_total"


def _failures(task: str) -> float:
    return REGISTRY.get_sample_value(METRIC, {"task": task}) or 0.0


async def _until(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_failing_task_is_logged_counted_and_started_again(caplog) -> None:
    name = f"flaky-{uuid.uuid4().hex[:6]}"
    runs: list[float] = []

    async def flaky(stop: asyncio.Event) -> None:
        runs.append(time.monotonic())
        if len(runs) <= 3:
            raise RuntimeError("a bug")
        await stop.wait()

    background = Supervisor(first=0.1, most=0.15)
    with caplog.at_level(logging.WARNING, "dealbroker.background"):
        background.start(name, flaky)
        await _until(lambda: name in background.restarting())
        await _until(lambda: len(runs) == 4)
        assert background.restarting() == []
        await background.stop()

    assert _failures(name) == 3
    # Paused 0.1 s, then doubled up to the most, 0.15 s.
    pauses = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    for pause, expected in zip(pauses, [0.1, 0.15, 0.15], strict=True):
        assert expected <= pause < expected + 0.5, pauses
    records = [r for r in caplog.records if name in r.getMessage()]
    assert len(records) == 3  # one line each
    first, *again = records
    assert first.exc_info is not None  # the bug's traceback, once
    assert first.getMessage() == f"background task {name} failed, starting it again in 0.1 s"
    assert [r.exc_info for r in again] == [None, None]
    assert again[0].getMessage() == (
        f"background task {name} failed again with RuntimeError, starting it again in 0.15 s"
    )


async def test_a_database_error_is_one_line_without_its_text(caplog) -> None:
    name = f"pool-{uuid.uuid4().hex[:6]}"

    async def pool_full(stop: asyncio.Event) -> None:
        raise PoolTimeout("QueuePool limit of size 2 overflow 0 reached, secret@example.com")

    background = Supervisor(first=0.05, most=0.05)
    with caplog.at_level(logging.WARNING, "dealbroker.background"):
        background.start(name, pool_full)
        await _until(lambda: _failures(name) >= 2)
        await background.stop()
    records = [r for r in caplog.records if name in r.getMessage()]
    assert records[0].getMessage() == (
        f"background task {name} failed, starting it again in 0.05 s: no database connection free"
    )
    assert all(r.exc_info is None and "secret" not in r.getMessage() for r in records)


async def test_a_task_that_failed_has_its_last_run_when_the_process_stops() -> None:
    """A buffer's flusher that failed before the stop still makes its last flush at the stop;
    one that fails at the stop is not started again."""
    runs: list[bool] = []

    async def flusher(stop: asyncio.Event) -> None:
        runs.append(stop.is_set())
        raise RuntimeError("fails every time")

    background = Supervisor(first=60, most=60)
    background.start(f"last-{uuid.uuid4().hex[:6]}", flusher)
    await _until(lambda: runs == [False])
    started = time.monotonic()
    await background.stop()  # ends the 60 s pause
    assert time.monotonic() - started < 1
    assert runs == [False, True]


async def test_stop_waits_only_so_long_for_a_task_given_a_bound() -> None:
    cancelled = asyncio.Event()

    async def deaf(stop: asyncio.Event) -> None:
        try:
            await asyncio.sleep(60)  # a connection attempt that does not hear the stop
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def done_at_once(stop: asyncio.Event) -> None:
        return

    background = Supervisor()
    background.start(f"deaf-{uuid.uuid4().hex[:6]}", deaf, stop_within=0.1)
    background.start(f"done-{uuid.uuid4().hex[:6]}", done_at_once)
    started = time.monotonic()
    await background.stop()
    assert time.monotonic() - started < 1
    assert cancelled.is_set()


async def test_the_servers_request_log_writer_survives_a_bug_and_readyz_says_so(
    db_url: str,
    engine: AsyncEngine,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real app's writer of the request log fails with an unexpected error: the failure is
    counted, ``/readyz`` names the writer while it waits to start again (still 200), and once
    it has, the requests it held are written."""
    app = create_app(make_settings(db_url, api_request_log_flush_seconds=0.05), engine)
    before = _failures("api-request-log")
    async with app.router.lifespan_context(app):
        buffer = app.state.api_requests
        written = buffer._write

        async def broken(session: AsyncSession, pending: list) -> None:  # type: ignore[type-arg]
            raise KeyError("a bug")

        monkeypatch.setattr(buffer, "_write", broken)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            caller = await make_caller(client, sessionmaker)
            answer = await client.get("/deals/v1/deals", headers=caller.headers)
            request_id = answer.headers["x-request-id"]
            await _until(lambda: _failures("api-request-log") > before)
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            assert ready.json()["restarting"] == ["api-request-log"]

            monkeypatch.setattr(buffer, "_write", written)
            await _until(lambda: not app.state.background.restarting(), timeout=3)
            assert (await client.get("/readyz")).json()["restarting"] == []
            await _until_written(sessionmaker, request_id)
    assert any(
        r.exc_info is not None and "background task api-request-log failed" in r.getMessage()
        for r in caplog.records
    )


async def _until_written(sessionmaker: async_sessionmaker[AsyncSession], request_id: str) -> None:
    deadline = time.monotonic() + 5
    while True:
        async with sessionmaker() as session:
            query = select(func.count()).where(ApiRequest.request_id == request_id)
            if await session.scalar(query):
                return
        assert time.monotonic() < deadline, "the held request was never written"
        await asyncio.sleep(0.05)


async def test_the_process_figures_go_on_after_a_failure(monkeypatch, caplog) -> None:
    """The thread writing the process's figures fails once: counted, its traceback logged,
    and the next round writes them."""
    calls: list[int] = []

    class OnceBroken(ProcessCollector):
        def collect(self):  # type: ignore[no-untyped-def]
            calls.append(1)
            if len(calls) == 1:
                raise OSError("/proc unreadable")
            return super().collect()

    monkeypatch.setattr(metrics, "ProcessCollector", OnceBroken)
    monkeypatch.setattr(metrics, "PROCESS_SECONDS", 0.05)
    monkeypatch.setattr(metrics, "_watched", None)
    before = _failures("process-metrics")
    process = f"test-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.ERROR, "dealbroker.background"):
        metrics.watch_process(process)
        await _until(lambda: len(calls) >= 2)
        labels = {"process": process}
        name = "dealbroker_process_start_time_seconds"
        await _until(lambda: (REGISTRY.get_sample_value(name, labels) or 0) > 0)
    assert _failures("process-metrics") == before + 1
    assert [r.getMessage() for r in caplog.records if r.exc_info] == [
        "background task process-metrics failed, going on"
    ]
