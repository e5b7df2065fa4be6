"""Choosing the carrier: production ships with Bring only with its credentials, customer number
and Event Cast secret (and never the test indicator), and never with the simulated carrier; a
refused configuration stops ``serve`` and ``worker`` with one line that shows no secret."""

import subprocess
import sys

import pytest

from dealbroker.carriers.bring import BringCarrier
from dealbroker.carriers.registry import carrier_for, startup_problem
from dealbroker.core.settings import Settings
from tests.payments.bank import RAIL
from tests.processes import env

KEY = "bring-api-key-never-printed"
SECRET = "event-cast-secret-never-printed-0123456789"
BRING = {
    "carrier": "bring",
    "bring_api_uid": "shipping@market.example.com",
    "bring_api_key": KEY,
    "bring_customer_number": "20001234567",
    "bring_event_cast_secret": SECRET,
}
PRODUCTION = {
    "environment": "production",
    "secret_key": "x" * 40,
    "support_email": "support@market.example.com",
}


def test_production_needs_each_bring_setting_and_names_the_missing_ones():
    assert startup_problem(Settings(**PRODUCTION, **BRING)) is None  # type: ignore[arg-type]
    for missing, name in [
        ("bring_api_uid", "DEALBROKER_BRING_API_UID"),
        ("bring_api_key", "DEALBROKER_BRING_API_KEY"),
        ("bring_customer_number", "DEALBROKER_BRING_CUSTOMER_NUMBER"),
        ("bring_event_cast_secret", "DEALBROKER_BRING_EVENT_CAST_SECRET"),
    ]:
        problem = startup_problem(Settings(**PRODUCTION, **{**BRING, missing: ""}))  # type: ignore[arg-type]
        assert problem is not None
        assert name in problem
        assert "\n" not in problem
    short = startup_problem(Settings(**PRODUCTION, **{**BRING, "bring_event_cast_secret": "short"}))  # type: ignore[arg-type]
    assert short is not None
    assert "32" in short
    testing = startup_problem(Settings(**PRODUCTION, **BRING, bring_test_indicator=True))  # type: ignore[arg-type]
    assert testing is not None
    assert "DEALBROKER_BRING_TEST_INDICATOR" in testing
    # The sandbox may run on Bring's test credentials, or none.
    assert startup_problem(Settings(carrier="bring")) is None  # type: ignore[arg-type]
    assert isinstance(carrier_for(Settings(carrier="bring")), BringCarrier)  # type: ignore[arg-type]
    simulated = startup_problem(Settings(**PRODUCTION, carrier="simulated"))  # type: ignore[arg-type]
    assert simulated is not None
    assert "sandbox" in simulated
    assert carrier_for(Settings(**PRODUCTION)) is None  # type: ignore[arg-type]


def test_the_keys_are_never_shown_by_a_repr():
    settings = Settings(**BRING)  # type: ignore[arg-type]
    assert KEY not in repr(settings)
    assert SECRET not in str(settings.model_dump())


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_production_with_bring_and_no_credentials_exits_2_with_one_line(command, tmp_path):
    settings = {  # a production that would start, but for Bring's settings
        "DEALBROKER_ENVIRONMENT": "production",
        "DEALBROKER_SECRET_KEY": "x" * 40,
        "DEALBROKER_SUPPORT_EMAIL": "support@market.example.com",
        "DEALBROKER_PAYMENT_PROVIDER": "stripe",
        "DEALBROKER_STRIPE_SECRET_KEY": "sk_live_never_printed",
        "DEALBROKER_STRIPE_PUBLISHABLE_KEY": "pk_live_public",
        "DEALBROKER_STRIPE_WEBHOOK_SECRET": "whsec_never_printed",
        "DEALBROKER_SIMPLE_SIGNATURE": "true",
        **RAIL,
        "DEALBROKER_CARRIER": "bring",
        "DEALBROKER_BRING_API_KEY": KEY,
    }
    done = subprocess.run(
        [sys.executable, "-m", "dealbroker", command],
        env=env(f"sqlite+aiosqlite:///{tmp_path / 'refused.db'}", **settings),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert "DEALBROKER_BRING_API_UID" in lines[0]
    assert "DEALBROKER_BRING_API_KEY" not in lines[0]  # it is set
    assert KEY not in done.stderr + done.stdout
