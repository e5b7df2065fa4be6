"""What scripts/setup installs and what runs before a commit: requirements/*.lock are in step
with the pyproject files (scripts/lock writes them again after a dependency changes), and the
pre-commit hooks run the checks of scripts/test."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
# One pinned package of a lock: its name, version and the hashes on the lines after it.
PIN = re.compile(
    r"^([A-Za-z0-9._-]+)==([^\s;\\]+)[^\n]*\\\n((?:\s+--hash=sha256:[0-9a-f]{64}[ \\]*\n)+)", re.M
)


def _pyproject(path: str) -> dict:
    with (ROOT / path).open("rb") as file:
        return tomllib.load(file)


def _locked(name: str) -> dict[str, set[str]]:
    """The lock's versions of each package (two under exclusive markers, at most)."""
    text = (ROOT / "requirements" / name).read_text()
    versions: dict[str, set[str]] = {}
    for package, version, _ in PIN.findall(text):
        versions.setdefault(canonicalize_name(package), set()).add(version)
    pinned = sum(1 for line in text.splitlines() if re.match(r"[A-Za-z0-9]", line))
    assert sum(len(v) for v in versions.values()) == pinned, f"{name}: a package without hashes"
    return versions


DEALBROKER = _pyproject("pyproject.toml")
CLIENT = _pyproject("clients/python/pyproject.toml")
BUILD = [
    *DEALBROKER["build-system"]["requires"],
    *CLIENT["build-system"]["requires"],
    "pip",
]
LOCKS = {
    "runtime.lock": [*DEALBROKER["project"]["dependencies"], *BUILD],
    "test.lock": [
        *DEALBROKER["project"]["dependencies"],
        *DEALBROKER["project"]["optional-dependencies"]["test"],
        *CLIENT["project"]["dependencies"],
        *BUILD,
    ],
}


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_each_requirement_is_locked_at_a_version_it_allows(lock: str) -> None:
    locked = _locked(lock)
    stale = []
    for line in LOCKS[lock]:
        requirement = Requirement(line)
        versions = locked.get(canonicalize_name(requirement.name), set())
        if not versions or not all(requirement.specifier.contains(v) for v in versions):
            stale.append(f"{line} (locked: {', '.join(sorted(versions)) or 'nothing'})")
    assert not stale, f"requirements/{lock} is out of step; run scripts/lock: {stale}"


def test_the_runtime_lock_has_the_test_lock_versions() -> None:
    """scripts/serve and scripts/test run the service on the same packages."""
    test = _locked("test.lock")
    differ = {
        name: (versions, test.get(name))
        for name, versions in _locked("runtime.lock").items()
        if versions != test.get(name)
    }
    assert not differ


def test_the_pre_commit_hooks_run_the_checks_of_scripts_test() -> None:
    checks = re.findall(
        r"^(\.venv/bin/(?:ruff|mypy) .*)$", (ROOT / "scripts/test").read_text(), re.M
    )
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    hooks = [hook for repo in yaml.safe_load(config)["repos"] for hook in repo["hooks"]]
    assert len(checks) == 3
    assert set(checks) <= {hook["entry"] for hook in hooks}
    subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", ".pre-commit-config.yaml"],
        cwd=ROOT,
        check=True,
    )
