"""The quick start in README.md and docs/integration-guide.md work when pasted: their shell
blocks run under bash against a real server process, the guide's Python block too."""

import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.processes import Server, free_port

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(shutil.which("curl") is None, reason="the docs' examples use curl"),
]
ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDERS = re.compile(r"^export (BASE|CLIENT_ID|CLIENT_SECRET|WEBHOOK_SECRET)=.*$", re.M)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("docs")
    srv = Server(f"sqlite+aiosqlite:///{tmp / 'docs.db'}", tmp)
    yield srv
    srv.stop()


def _blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), re.S)


def _env(server: Server) -> dict[str, str]:
    return {
        **os.environ,
        "BASE": server.base,
        "CLIENT_ID": server.credential("client id"),
        "CLIENT_SECRET": server.credential("client secret"),
        "WEBHOOK_SECRET": server.credential("webhook secret"),
    }


def _bash(script: str, server: Server) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_readme_quick_start(server):
    block = next(b for b in _blocks(ROOT / "README.md", "sh") if "oauth2/token" in b)
    script = PLACEHOLDERS.sub("", block).replace("http://127.0.0.1:8000", server.base)
    out = _bash(script, server)
    assert '"status":"Draft"' in out


def test_the_integration_guide_with_curl(server):
    blocks = [b for b in _blocks(ROOT / "docs/integration-guide.md", "sh") if "curl" in b]
    out = _bash(PLACEHOLDERS.sub("", "\n".join(blocks)), server)
    lines = out.splitlines()
    assert "Completed" in lines
    assert "deal.status Completed" in lines
    assert '"status":409' in out


def _python_block(marker: str) -> str:
    return next(b for b in _blocks(ROOT / "docs/integration-guide.md", "python") if marker in b)


def _sh_block(marker: str) -> str:
    return next(b for b in _blocks(ROOT / "docs/integration-guide.md", "sh") if marker in b)


def test_the_integration_guide_with_the_python_client(server):
    block = _python_block("DealbrokerClient(")
    done = subprocess.run(
        [sys.executable, "-c", block],
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "409 illegal-transition" in done.stdout


def test_the_guides_requests_oauthlib_token_against_the_http_sandbox(server):
    """requests-oauthlib refuses an http:// token URL unless OAUTHLIB_INSECURE_TRANSPORT is set,
    which the guide's snippet does for the local sandbox only."""
    block = _python_block("OAuth2Session")
    env = {k: v for k, v in _env(server).items() if k != "OAUTHLIB_INSECURE_TRANSPORT"}
    done = subprocess.run(
        [sys.executable, "-c", block],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "'pageSize'" in done.stdout
    unguarded = block.replace('os.environ["OAUTHLIB_INSECURE_TRANSPORT"] = "1"', "pass")
    refused = subprocess.run(
        [sys.executable, "-c", unguarded],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "InsecureTransportError" in refused.stderr


def _lines(stream: IO[str]) -> "queue.Queue[str]":
    """A process's output lines as they come, read by a thread (a test waits with a timeout)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return lines


def _wait_for(lines: "queue.Queue[str]", wanted: str, timeout: float = 30) -> list[str]:
    """The lines up to the first that starts with ``wanted``."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not (seen and seen[-1].startswith(wanted)):
        try:
            seen.append(lines.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            raise AssertionError(f"no {wanted!r} in {seen}") from None
    return seen


def test_the_guides_receiver_then_listen(server, tmp_path, client_venv):
    """The guide's order, from the virtual environment holding only the client package: its
    receiver runs first, on the port its variable names, then its ``dealbroker-client listen``
    forwards to it, verified, the events of a deal made with curl and of the scenario its
    command line section runs; then that section's reading commands."""
    port = free_port()
    variables = ("BASE", "CLIENT_ID", "CLIENT_SECRET", "WEBHOOK_SECRET")
    env = client_venv.env(
        RECEIVER_PORT=str(port), **{k: v for k, v in _env(server).items() if k in variables}
    )
    (tmp_path / "receiver.py").write_text(_python_block("HTTPServer"))
    processes: list[subprocess.Popen[str]] = []
    try:
        receiver = subprocess.Popen(
            ["python", str(tmp_path / "receiver.py")],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        processes.append(receiver)
        assert receiver.stdout is not None
        received = _lines(receiver.stdout)
        _wait_for(received, f"Receiving on http://127.0.0.1:{port}/webhooks")
        block = _sh_block("listen --forward-to")
        listen = subprocess.Popen(
            [
                "bash",
                "-euo",
                "pipefail",
                "-c",
                block.replace("dealbroker-client", "exec dealbroker-client"),
            ],
            env={**env, "XDG_STATE_HOME": str(tmp_path / "state")},
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(listen)
        assert listen.stderr is not None
        forwarded = _lines(listen.stderr)
        _wait_for(forwarded, "Ready: forwarding to")
        script = _sh_block("TOKEN=$(curl") + _sh_block("DEAL_ID=$(curl")
        script = script.replace("guide-deal-1", "guide-receiver-1")
        script += (
            'curl -s -X POST "$BASE/deals/v1/deals/$DEAL_ID/status" '
            '-H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" '
            '-d \'{"status": "Cancelled"}\' > /dev/null\n'
        )
        deal_id = _bash(script, server).split()[0]
        assert f"deal {deal_id} is now Cancelled" in _wait_for(
            received, f"deal {deal_id} is now Cancelled"
        )

        cli = {**env, "DEALBROKER_API_URL": server.base}
        cli |= {f"DEALBROKER_{k}": env[k] for k in ("CLIENT_ID", "CLIENT_SECRET", "WEBHOOK_SECRET")}
        scenario = _run(_sh_block("trigger carrier-completed"), cli, tmp_path)
        completed = scenario.split()[0]
        assert scenario.split()[1] == "Completed"
        _wait_for(received, f"deal {completed} is now Completed")
        reading = _run(_sh_block("deals get"), cli, tmp_path)
        assert f'"id": "{completed}"' in reading
        assert '"clockOffsetSeconds": 86400' in reading
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=10)


def _run(script: str, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
