"""``serve`` and ``worker`` refuse to start on payment methods that cannot run here, in one line,
before touching the database or a port (``payments.methods.startup_problem``)."""

import subprocess
import sys

import httpx
import pytest

from tests.cli.test_server import PRODUCTION, REAL_MONEY
from tests.processes import Server, env, free_port

CASES = [
    # A provider that cannot take the deployment's currency (the sandbox too).
    (
        {"DEALBROKER_CURRENCY": "SEK", "DEALBROKER_PAYMENT_METHODS": "vipps,card"},
        "error: vipps cannot take SEK",
    ),
    (
        {"DEALBROKER_CURRENCY": "NOK", "DEALBROKER_PAYMENT_METHODS": "swish,card"},
        "error: swish cannot take NOK",
    ),
    # A method production would have to simulate.
    (
        {**PRODUCTION, **REAL_MONEY, "DEALBROKER_PAYMENT_METHODS": "vipps,card"},
        "error: vipps is offered (DEALBROKER_PAYMENT_METHODS) but its provider is not configured",
    ),
    # Not a method at all.
    (
        {"DEALBROKER_PAYMENT_METHODS": "card,paypal"},
        "error: configuration refused: payment_methods: Value error, unknown payment method",
    ),
]


@pytest.mark.parametrize("command", ["serve", "worker"])
@pytest.mark.parametrize(("settings", "line"), CASES)
def test_start_is_refused_in_one_line(command, settings, line, tmp_path):
    database = tmp_path / "refused.db"
    args = [command, "--port", str(free_port())] if command == "serve" else [command]
    done = subprocess.run(
        [sys.executable, "-m", "dealbroker", *args],
        env=env(f"sqlite+aiosqlite:///{database}", **settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(line), lines[0]
    assert not database.exists()  # refused before migrating


def test_the_sandbox_starts_on_the_currency_s_simulated_methods(tmp_path):
    """The same lists run in the sandbox when the currency fits: simulated, no refusal."""
    server = Server(
        f"sqlite+aiosqlite:///{tmp_path / 'sandbox.db'}",
        tmp_path,
        DEALBROKER_CURRENCY="SEK",
        DEALBROKER_PAYMENT_METHODS="swish,card",
    )
    try:
        assert httpx.get(f"{server.base}/readyz").status_code == 200
    finally:
        server.stop()
