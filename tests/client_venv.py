"""A virtual environment holding only the Python client (``clients/python``) and its
dependencies, as an integrator installs it: for tests that run its ``dealbroker-client`` command
as a real process, where neither the server package nor this checkout is importable.

The install itself never reaches the network: pip installs from a wheelhouse under ``.cache``
(``--no-index``), which holds the client's dependencies at the floors its ``pyproject.toml``
names (the versions ``scripts/setup`` tests with) and its build backend. The wheelhouse is
downloaded once, the first time it is missing, with pip from the package index; it is keyed by
those requirements, so a change to them fetches a new one.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "python"
PIP = ("-m", "pip", "--disable-pip-version-check", "--no-input")


def requirements() -> list[str]:
    """What installing the client needs: its build backend, and each dependency at its floor."""
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())
    floors = []
    for requirement in project["project"]["dependencies"]:
        name, floor = re.fullmatch(r"([A-Za-z0-9_.\[\]-]+)>=([^,]+),.*", requirement).groups()  # type: ignore[union-attr]
        floors.append(f"{name}=={floor}")
    return [*project["build-system"]["requires"], *floors]


def wheelhouse() -> Path:
    """The directory of wheels the client installs from offline (downloaded when missing)."""
    wanted = requirements()
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
    house = (
        ROOT
        / ".cache"
        / "client-wheels"
        / f"py{sys.version_info.major}{sys.version_info.minor}-{key}"
    )
    if house.is_dir():
        return house
    partial = house.with_name(house.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        [sys.executable, *PIP, "download", "--quiet", "--only-binary=:all:", "-d", str(partial)]
        + wanted,
        check=True,
        timeout=600,
    )
    try:
        partial.rename(house)
    except OSError:  # another run made it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
    return house


@dataclass(frozen=True)
class ClientVenv:
    path: Path

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def command(self) -> Path:
        return self.bin / "dealbroker-client"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment its processes run in: nothing of this checkout's Python path or of
        the server's settings, the venv's bin first on PATH."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("DEALBROKER_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
        }
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return {**env, **extra}


def make_client_venv(where: Path) -> ClientVenv:
    """A new virtual environment at ``where`` with the client installed from a copy of
    ``clients/python`` (an in-tree build would leave ``build/`` in the checkout). It is made
    without pip (ensurepip took 7 s of each test worker's setup) and the client is installed
    into it by this environment's pip (``--python``), so it holds the client and its
    dependencies only."""
    source = where / "source"
    shutil.copytree(
        CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    venv = ClientVenv(where / "venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv.path)], check=True, timeout=120
    )
    subprocess.run(
        [sys.executable, *PIP, "--python", str(venv.bin / "python"), "install", "--quiet"]
        + ["--no-index", "--find-links", str(wheelhouse()), str(source)],
        env=venv.env(),
        check=True,
        timeout=600,
    )
    return venv


@pytest.fixture(scope="session")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> ClientVenv:
    return make_client_venv(tmp_path_factory.mktemp("client-venv"))
