"""The quick start in README.md and docs/integration-guide.md work when pasted: their shell
blocks run under bash against a real server process, the guide's Python block too."""

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import Server

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


def test_the_integration_guide_with_the_python_client(server):
    block = _blocks(ROOT / "docs/integration-guide.md", "python")[0]
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
