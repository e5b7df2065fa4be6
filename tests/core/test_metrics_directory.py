"""The host's shared metrics directory: emptied by the first process only, never under a
running one; one per database by default."""

import subprocess
import sys
import textwrap
from pathlib import Path

from dealbroker.core import metrics_directory
from tests.conftest import make_settings


def hold_shared_lock(directory: Path) -> subprocess.Popen[str]:
    """Another process of the host, alive: it holds the shared lock until killed."""
    code = textwrap.dedent(
        f"""
        import fcntl, os, sys, time
        fd = os.open({str(directory / ".lock")!r}, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        print("locked", flush=True)
        time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "locked"
    return process


def test_the_first_process_empties_the_directory(tmp_path):
    (tmp_path / "counter_123.db").write_bytes(b"stale")
    metrics_directory._lock_and_maybe_empty(tmp_path)
    assert not (tmp_path / "counter_123.db").exists()


def test_a_process_starting_beside_a_running_one_keeps_its_files(tmp_path):
    (tmp_path / "counter_123.db").write_bytes(b"live")
    other = hold_shared_lock(tmp_path)
    try:
        metrics_directory._lock_and_maybe_empty(tmp_path)
        assert (tmp_path / "counter_123.db").read_bytes() == b"live"
    finally:
        other.kill()
        other.wait()


def test_the_default_directory_is_one_per_database(tmp_path):
    one = metrics_directory.default_directory(make_settings("sqlite+aiosqlite:///a.db"))
    same = metrics_directory.default_directory(make_settings("sqlite+aiosqlite:///a.db"))
    other = metrics_directory.default_directory(make_settings("sqlite+aiosqlite:///b.db"))
    assert one == same != other


def test_other_commands_leave_prometheus_in_process_memory():
    assert metrics_directory.prepare_for_command(["migrate"]) is None
    assert metrics_directory.prepare_for_command([]) is None
