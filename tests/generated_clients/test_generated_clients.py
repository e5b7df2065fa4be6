"""Clients generated from the service's ``/openapi.json`` build, type-check and work: a Python
package from openapi-python-client (checked by ``mypy --strict`` and driven against the real
server by ``usage.py``) and TypeScript types from openapi-typescript (checked by
``tsc --noEmit --strict`` with ``usage.ts``). Either generator reporting anything about the
document fails the test: what it skips, an integration's generated code would lack.

``scripts/test`` installs both generators, pinned, under ``.cache/``. The document does not
depend on the database, so one server on SQLite serves it, once per run.
"""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes import Server

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PYTHON_GENERATOR = ROOT / ".cache" / "openapi-python-client" / "bin"
TYPESCRIPT_BIN = ROOT / ".cache" / "openapi-typescript" / "node_modules" / ".bin"
PACKAGE = "dealbroker_openapi"
# The generator's fixed client.py (the same for every document) passes ``*args: object`` on to
# httpx's typed ``__exit__`` and ``__aexit__``: 12 arg-type errors under --strict. Everything
# generated from the document itself, and usage.py, is checked with every strict flag.
MYPY_CONFIG = f"""\
[mypy]
strict = True

[mypy-{PACKAGE}.client]
disable_error_code = arg-type
"""
TSC_FLAGS = ["--noEmit", "--strict", "--target", "es2022", "--module", "es2022"]
TSC_FLAGS += ["--moduleResolution", "bundler"]


def _tool(path: Path) -> Path:
    """Missing tools fail, never skip, so a run without them cannot pass for a check."""
    if not os.access(path, os.X_OK):
        pytest.fail(f"The generated clients' tests need {path}: run scripts/test", pytrace=False)
    return path


def _run(command: list[str | Path], cwd: Path, timeout: float, **env: str) -> str:
    """Run ``command``; its output, stdout and stderr together, or a failure showing it."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{command[0]} exited with {done.returncode}:\n{done.stdout}"
    return done.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("generated-clients-server")
    srv = Server(f"sqlite+aiosqlite:///{tmp / 'clients.db'}", tmp)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def document(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec: dict[str, Any] = httpx.get(f"{server.base}/openapi.json", timeout=10).json()
    path = tmp_path_factory.mktemp("generated-clients-document") / "openapi.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


@pytest.fixture(scope="module")
def python_client(document: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The generated package and usage.py in one directory, and what the generator printed.
    The generator runs ruff on its output, so its own virtual environment comes first on PATH."""
    generator = _tool(PYTHON_GENERATOR / "openapi-python-client")
    out = tmp_path_factory.mktemp("generated-python-client")
    output = _run(
        [
            generator,
            "generate",
            "--path",
            document,
            "--output-path",
            out / PACKAGE,
            "--meta",
            "none",
            "--fail-on-warning",
        ],
        cwd=out,
        timeout=120,
        PATH=f"{PYTHON_GENERATOR}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    shutil.copy(HERE / "usage.py", out / "usage.py")
    return out, output


@pytest.fixture(scope="module")
def typescript_types(document: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """schema.d.ts and usage.ts in one directory, and what the generator printed."""
    generator = _tool(TYPESCRIPT_BIN / "openapi-typescript")
    out = tmp_path_factory.mktemp("generated-typescript")
    output = _run([generator, document, "--output", out / "schema.d.ts"], cwd=out, timeout=120)
    shutil.copy(HERE / "usage.ts", out / "usage.ts")
    return out, output


def test_the_python_client_is_generated_without_warnings(python_client):
    out, output = python_client
    said = [line for line in output.splitlines() if line.strip()]
    assert said == [f"Generating {out / PACKAGE}"], output
    models = [p for p in (out / PACKAGE / "models").glob("*.py") if p.name != "__init__.py"]
    assert len(models) > 80, sorted(p.name for p in models)


def test_the_python_client_type_checks(python_client):
    out, _ = python_client
    (out / "mypy.ini").write_text(MYPY_CONFIG)
    command = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", PACKAGE, "usage.py"]
    output = _run(command, cwd=out, timeout=300)
    assert output.startswith("Success: no issues found"), output


def test_the_python_client_works_against_the_server(python_client, server):
    """usage.py gets a token, creates, reads and moves a deal, and is refused with a Problem."""
    out, _ = python_client
    _run(
        [
            sys.executable,
            "usage.py",
            server.base,
            server.credential("client id"),
            server.credential("client secret"),
        ],
        cwd=out,
        timeout=60,
    )


def test_the_typescript_types_are_generated_without_warnings(typescript_types):
    out, output = typescript_types
    said = [line for line in output.splitlines() if line.strip()]
    # A banner, then one line naming the file written; anything else is a warning or error.
    assert len(said) == 2, output
    assert "openapi-typescript" in said[0], output
    assert "schema.d.ts" in said[1], output
    assert (out / "schema.d.ts").stat().st_size > 0


def test_the_typescript_usage_type_checks(typescript_types):
    out, _ = typescript_types
    tsc = _tool(TYPESCRIPT_BIN / "tsc")
    assert _run([tsc, *TSC_FLAGS, "usage.ts"], cwd=out, timeout=120) == ""
