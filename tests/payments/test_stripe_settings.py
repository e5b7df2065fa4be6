"""Choosing the Stripe provider: its keys are required, checked and never shown; production
starts with it, and never with the simulated one."""

import subprocess
import sys

import httpx
import pytest
from pydantic import ValidationError

from dealbroker.core.settings import InvalidSettings, Settings, get_settings
from dealbroker.payments.provider import (
    BankFilePayouts,
    SimulatedProvider,
    provider_for,
    startup_problem,
)
from dealbroker.payments.stripe_provider import StripeProvider
from tests.payments.bank import RAIL
from tests.payments.emulator import LocalStripe
from tests.processes import Server, env

SECRET = "sk_live_never_printed_0123456789"
HOOK_SECRET = "whsec_never_printed_either"
KEYS = {
    "payment_provider": "stripe",
    "stripe_secret_key": SECRET,
    "stripe_publishable_key": "pk_live_public",
    "stripe_webhook_secret": HOOK_SECRET,
}
PRODUCTION = {
    "environment": "production",
    "secret_key": "x" * 40,
    "support_email": "support@market.example.com",
}
BANK_RAIL = {name.removeprefix("DEALBROKER_").lower(): value for name, value in RAIL.items()}


def test_stripe_needs_each_of_its_keys_and_names_the_missing_one():
    for missing, name in [
        ("stripe_secret_key", "DEALBROKER_STRIPE_SECRET_KEY"),
        ("stripe_publishable_key", "DEALBROKER_STRIPE_PUBLISHABLE_KEY"),
        ("stripe_webhook_secret", "DEALBROKER_STRIPE_WEBHOOK_SECRET"),
    ]:
        with pytest.raises(ValidationError, match=name):
            Settings(**{**KEYS, missing: ""})  # type: ignore[arg-type]
    # A publishable key pasted where the secret one belongs is refused too.
    with pytest.raises(ValidationError, match="DEALBROKER_STRIPE_SECRET_KEY"):
        Settings(**{**KEYS, "stripe_secret_key": "pk_live_public"})  # type: ignore[arg-type]


def test_the_keys_are_never_shown_by_a_repr_or_a_refusal(monkeypatch):
    settings = Settings(**KEYS)  # type: ignore[arg-type]
    assert SECRET not in repr(settings)
    assert HOOK_SECRET not in str(settings.model_dump())
    monkeypatch.setenv("DEALBROKER_PAYMENT_PROVIDER", "stripe")
    monkeypatch.setenv("DEALBROKER_STRIPE_SECRET_KEY", SECRET)
    monkeypatch.setenv("DEALBROKER_STRIPE_WEBHOOK_SECRET", HOOK_SECRET)
    get_settings.cache_clear()
    try:
        with pytest.raises(InvalidSettings) as refused:
            get_settings()
    finally:
        get_settings.cache_clear()
    assert "DEALBROKER_STRIPE_PUBLISHABLE_KEY" in str(refused.value)
    assert SECRET not in str(refused.value)
    assert HOOK_SECRET not in str(refused.value)


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_a_refused_configuration_is_one_line_without_the_keys(command, tmp_path):
    settings = {
        "DEALBROKER_PAYMENT_PROVIDER": "stripe",
        "DEALBROKER_STRIPE_SECRET_KEY": SECRET,
        "DEALBROKER_STRIPE_WEBHOOK_SECRET": HOOK_SECRET,
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
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: configuration refused: ")
    assert "DEALBROKER_STRIPE_PUBLISHABLE_KEY" in lines[0]
    assert SECRET not in done.stderr + done.stdout
    assert HOOK_SECRET not in done.stderr + done.stdout


def test_production_runs_on_stripe_and_never_on_the_simulated_provider():
    simulated = Settings(**PRODUCTION)  # type: ignore[arg-type]
    assert startup_problem(simulated) is not None
    without_rail = Settings(**PRODUCTION, **KEYS)  # type: ignore[arg-type]
    assert "DEALBROKER_PAYOUT_RAIL" in (startup_problem(without_rail) or "")
    stripe = Settings(**PRODUCTION, **KEYS, **BANK_RAIL)  # type: ignore[arg-type]
    assert startup_problem(stripe) is None
    provider = provider_for(stripe)
    assert isinstance(provider, StripeProvider)
    # Payouts are bank transfers in files, never simulated in production.
    assert isinstance(provider._payouts, BankFilePayouts)
    sandbox = provider_for(Settings(**KEYS))  # type: ignore[arg-type]
    assert isinstance(sandbox, StripeProvider)
    assert isinstance(sandbox._payouts, SimulatedProvider)


def test_the_server_logs_no_key(localstripe: LocalStripe, tmp_path):
    settings = {
        **localstripe.settings(),
        "DEALBROKER_LOG_LEVEL": "debug",
        "DEALBROKER_EMBEDDED_WORKER": "off",
    }
    server = Server(f"sqlite+aiosqlite:///{tmp_path / 'logs.db'}", tmp_path, **settings)
    try:
        webhook = f"{server.base}/payments/v1/stripe/webhook"
        assert (
            httpx.post(webhook, content=b"{}", headers={"Stripe-Signature": "t=1,v1=0"}).status_code
            == 400
        )
        assert httpx.get(f"{server.base}/pay/stripe/unknown").status_code == 404
    finally:
        server.stop()
    output = server.output()
    for key in ("DEALBROKER_STRIPE_SECRET_KEY", "DEALBROKER_STRIPE_WEBHOOK_SECRET"):
        assert settings[key] not in output
