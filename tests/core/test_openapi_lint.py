"""The OpenAPI document passes the linters integrators run, as the service serves it:
Redocly's recommended rules with no error (and no warning but one, below), and Spectral's ``spectral:oas``
(``.spectral.yaml``, which turns off only what the project cannot state) with no finding.

Both are pinned npm packages that ``scripts/test`` installs under ``.cache/``."""

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
REDOCLY = ROOT / ".cache/redocly/node_modules/.bin/redocly"
SPECTRAL = ROOT / ".cache/spectral/node_modules/.bin/spectral"


@pytest.fixture
async def document(client, tmp_path: Path) -> Path:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    path = tmp_path / "openapi.json"
    path.write_text(json.dumps(response.json()))
    return path


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not Path(args[0]).exists():
        pytest.fail(f"{args[0]} is missing: scripts/test installs it")
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=180, check=False
    )


# Operations that take no input at all (no parameter, no body, no credential) have no 4xx to
# state: a 4xx there would be a lie, so Redocly's operation-4xx-response warns on these alone.
NO_INPUT = {
    "#/paths/~1.well-known~1oauth-authorization-server/get/responses",
    "#/paths/~1ping/get/responses",
    "#/paths/~1healthz/get/responses",
    "#/paths/~1readyz/get/responses",
}


async def test_redocly_recommended(document: Path) -> None:
    result = run(
        REDOCLY,
        "lint",
        "--extends",
        "recommended",
        "--format",
        "json",
        document,
        cwd=document.parent,
    )
    report = json.loads(result.stdout)
    problems = [
        f"{p['severity']} {p['ruleId']}: {p['message']} at {p['location'][0]['pointer']}"
        for p in report["problems"]
        if not (
            p["ruleId"] == "operation-4xx-response"
            and p["severity"] == "warn"
            and p["location"][0]["pointer"] in NO_INPUT
        )
    ]
    assert problems == [], "\n".join(problems)
    assert result.returncode == 0, result.stderr


async def test_spectral_oas(document: Path) -> None:
    result = run(
        SPECTRAL,
        "lint",
        "--ruleset",
        ROOT / ".spectral.yaml",
        "--format",
        "json",
        "--fail-severity",
        "hint",
        document,
        cwd=document.parent,
    )
    # The JSON report, then (when it is empty) a line saying there were no results.
    findings, _ = json.JSONDecoder().raw_decode(result.stdout)
    problems = [f"{f['code']}: {f['message']} at {'.'.join(map(str, f['path']))}" for f in findings]
    assert problems == [], "\n".join(problems)
    assert result.returncode == 0, result.stderr
