"""The directory the processes of one host share their metrics through.

``prometheus_client`` in multiprocess mode keeps every counter, histogram and gauge of a process
in memory-mapped files in ``PROMETHEUS_MULTIPROC_DIR``; the listener that answers /metrics adds
up the files of all processes. The client chooses between those files and plain process memory
once, when it is first imported, so ``serve`` and ``worker`` call ``prepare_for_command`` before
anything imports it (``dealbroker.cli`` does so first thing). uvicorn's server processes
inherit the variable from ``serve``.

The rules, for every ``serve`` and ``worker`` of one host:

- They share one directory: ``DEALBROKER_METRICS_DIR``, or by default one under the system's
  temporary directory named after the user and the database, so the processes of one deployment
  find each other without configuration and two deployments on one host never mix.
- Each process holds a shared lock on ``<dir>/.lock`` while it lives. A process that starts
  while no other holds it (the host's first, or the first after all stopped) empties the
  directory: counters start again from zero, which Prometheus reads as a restart.
- A process that stops marks itself dead (``mark_process_dead``), which removes its live gauges;
  its counters and histograms stay, so a total never goes down while the others run. A process
  killed without that is marked dead by the next one to start.
"""

import atexit
import errno
import fcntl
import hashlib
import os
import sys
import tempfile
from pathlib import Path

from pydantic import ValidationError

from dealbroker.core.settings import Settings

ENV = "PROMETHEUS_MULTIPROC_DIR"
COMMANDS = ("serve", "worker")
_lock_fd: int | None = None  # held for the life of the process


def default_directory(settings: Settings) -> Path:
    """One per user and database: every process of a deployment on this host agrees on it."""
    digest = hashlib.sha256(settings.database_url.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"dealbroker-metrics-{os.getuid()}-{digest}"


def prepare_for_command(args: list[str]) -> Path | None:
    """For ``serve`` and ``worker`` with metrics on: set up the shared directory and switch
    ``prometheus_client`` to it. Must run before ``prometheus_client`` is first imported."""
    if not args or args[0] not in COMMANDS:
        return None
    try:
        settings = Settings()
    except ValidationError:
        return None  # the command itself reports the configuration's error
    if not settings.metrics_enabled:
        return None
    return prepare(settings)


def prepare(settings: Settings) -> Path:
    if "prometheus_client" in sys.modules and ENV not in os.environ:
        # Its metrics would live in this process's memory, unseen by the listener.
        raise RuntimeError("prometheus_client was imported before its directory was chosen")
    directory = Path(settings.metrics_dir) if settings.metrics_dir else default_directory(settings)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    _lock_and_maybe_empty(directory)
    os.environ[ENV] = str(directory)
    _mark_gone_processes_dead(directory)
    atexit.register(mark_dead)
    return directory


def _lock_and_maybe_empty(directory: Path) -> None:
    global _lock_fd
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
    else:  # no other process of this host runs: last run's files are stale
        for old in directory.glob("*.db"):
            old.unlink(missing_ok=True)
    # Shared from now on, so that the next process to start leaves the files alone.
    fcntl.flock(fd, fcntl.LOCK_SH)
    _lock_fd = fd


def _mark_gone_processes_dead(directory: Path) -> None:
    from prometheus_client import multiprocess

    pids = {int(p.stem.rsplit("_", 1)[1]) for p in directory.glob("gauge_live*_*.db")}
    for pid in pids:
        if not _alive(pid):
            multiprocess.mark_process_dead(pid, str(directory))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_dead() -> None:
    """Remove this process's live gauges (at exit; uvicorn's server processes at shutdown)."""
    if ENV not in os.environ:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(os.getpid())
