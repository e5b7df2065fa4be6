"""A server process's long-lived background tasks, each run under one ``Supervisor``.

``serve`` runs a few loops beside its requests for as long as it lives: the buffers' flushers
(``core.buffered``: the API's request log, the rate limits' refusals), the rate limits' sync,
the token cache's listener, the embedded worker, and the retry of the deployment's links while
the database is down. Each handles the errors it expects (the database down, the pool full)
itself. Whatever else escapes one must not end it for the process's life, silently: the
supervisor logs the failure in one line (a traceback the first time a task fails with an
unexpected error of its kind, never for a database error, whose text may hold personal data),
counts it in ``dealbroker_background_task_failures_total{task}``, and starts the task again
after a pause, doubled at each failure in a row up to ``most`` seconds. Meanwhile ``/readyz``
names the task among those ``restarting``.

A task is a coroutine function taking the process's stop event; it returns once the event is
set (a task may also return earlier, its work done: it is not started again). A task waiting
to start again when the stop comes is started at once, for its last run (a buffer's last flush
at shutdown); one that fails in that run, or after the stop, is not started again.

The process's own figures (``core.metrics.watch_process``) are written by a thread, not a task,
so that they go on while the event loop is busy; it follows the same rule: a failure is counted
(``task="process-metrics"``), its traceback logged once, and the next round comes as usual.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dealbroker.core.db import DATABASE_FAILURES, describe_error
from dealbroker.core.metrics import background_task_failures

log = logging.getLogger("dealbroker.background")

Run = Callable[[asyncio.Event], Awaitable[None]]

# Seconds before a failed task is started again, doubled at each failure in a row up to
# MOST_SECONDS; a run that lasted HEALTHY_SECONDS starts the count again.
FIRST_SECONDS = 1.0
MOST_SECONDS = 30.0
HEALTHY_SECONDS = 60.0


@dataclass
class _Task:
    name: str
    task: "asyncio.Task[None]"
    stop_within: float | None


def _expected(exc: BaseException) -> str | None:
    """A database or network error in one line, described, never printed (its text may hold
    personal data); None for anything else (a bug)."""
    return describe_error(exc) if isinstance(exc, DATABASE_FAILURES) else None


class Supervisor:
    """Starts, watches and stops the process's background tasks (``start``, ``stop``)."""

    def __init__(self, first: float = FIRST_SECONDS, most: float = MOST_SECONDS) -> None:
        self.first = first
        self.most = most
        self.stopping = asyncio.Event()
        self._tasks: list[_Task] = []
        self._restarting: set[str] = set()
        # The unexpected errors each task has logged with their traceback: (task, error type).
        self._told: set[tuple[str, str]] = set()

    def start(self, name: str, run: Run, stop_within: float | None = None) -> None:
        """Run ``run(stopping)`` as the task ``name`` until it returns, starting it again after
        each failure. ``stop_within``: seconds ``stop`` waits for it before cancelling it
        (None: until it returns)."""
        task = asyncio.create_task(self._supervise(name, run), name=name)
        self._tasks.append(_Task(name, task, stop_within))

    def restarting(self) -> list[str]:
        """The tasks that failed and wait to be started again, by name."""
        return sorted(self._restarting)

    async def stop(self) -> None:
        """Tell every task to stop, and wait for each, in the order they were started."""
        self.stopping.set()
        for entry in self._tasks:
            done, _ = await asyncio.wait({entry.task}, timeout=entry.stop_within)
            if not done:  # e.g. a connection attempt in flight: not waited for
                entry.task.cancel()
                await asyncio.gather(entry.task, return_exceptions=True)

    async def _supervise(self, name: str, run: Run) -> None:
        in_a_row = 0  # failures in a row: each doubles the pause before the next start
        while True:
            started = time.monotonic()
            try:
                await run(self.stopping)
                return
            except Exception as exc:
                failure = exc
            if self.stopping.is_set():  # it failed while stopping: it has had its last run
                self._failed(name, failure, None)
                return
            if time.monotonic() - started >= HEALTHY_SECONDS:
                in_a_row = 0
            pause = min(self.first * 2**in_a_row, self.most)
            in_a_row += 1
            self._failed(name, failure, pause)
            self._restarting.add(name)
            try:
                await asyncio.wait_for(self.stopping.wait(), pause)
            except TimeoutError:
                pass
            finally:
                self._restarting.discard(name)

    def _failed(self, name: str, exc: Exception, pause: float | None) -> None:
        """Log and count task ``name``'s failure; ``pause``: seconds until it starts again
        (None: it does not, the process is stopping)."""
        background_task_failures.labels(name).inc()
        then = "not started again" if pause is None else f"starting it again in {pause:g} s"
        expected = _expected(exc)
        if expected is not None:
            log.warning("background task %s failed, %s: %s", name, then, expected)
            return
        kind = type(exc).__name__
        if (name, kind) in self._told:
            log.error("background task %s failed again with %s, %s", name, kind, then)
            return
        self._told.add((name, kind))
        log.error("background task %s failed, %s", name, then, exc_info=exc)
