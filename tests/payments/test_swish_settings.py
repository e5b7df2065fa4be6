"""The Swish provider's certificate and key: production refuses, in one line and before it
starts, a file it cannot read, a key its group or others may read, a certificate expired or not
yet valid, a key that does not open or is not the certificate's."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dealbroker.core.settings import Settings
from dealbroker.payments import swish_tls
from dealbroker.payments.provider import startup_problem
from tests.payments.swish_fixture import MERCHANT, make_certificates
from tests.processes import env

PASSWORD = "test-password"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certificates(tmp_path_factory.mktemp("swish-certs"))


def _creds(certs: Path, cert: str = "merchant.pem", key: str = "merchant.key", **kw: str):
    return swish_tls.Credentials(str(certs / cert), str(certs / key), **kw)


def test_the_merchant_certificate_and_its_key_pass(certs):
    assert swish_tls.problem(_creds(certs)) is None
    encrypted = _creds(certs, key="merchant-encrypted.key", key_password=PASSWORD)
    assert swish_tls.problem(encrypted) is None


def test_a_key_others_may_read_is_refused(certs, tmp_path):
    key = tmp_path / "open.key"
    shutil.copy(certs / "merchant.key", key)
    for mode in (0o640, 0o604, 0o644):
        key.chmod(mode)
        refused = swish_tls.problem(swish_tls.Credentials(str(certs / "merchant.pem"), str(key)))
        assert refused is not None
        assert "group or others" in refused
        assert "chmod 600" in refused


def test_unreadable_expired_and_early_certificates_are_refused(certs, tmp_path):
    assert "cannot be read" in (swish_tls.problem(_creds(certs, cert="missing.pem")) or "")
    assert "cannot be read" in (swish_tls.problem(_creds(certs, key="missing.key")) or "")
    assert "expired on" in (swish_tls.problem(_creds(certs, cert="expired.pem")) or "")
    assert "not valid before" in (swish_tls.problem(_creds(certs, cert="future.pem")) or "")
    assert "does not open" in (
        swish_tls.problem(_creds(certs, key="merchant-encrypted.key", key_password="wrong")) or ""
    )
    assert "not a PEM certificate" in (swish_tls.problem(_creds(certs, cert="merchant.key")) or "")
    other = tmp_path / "other.key"
    shutil.copy(certs / "server.key", other)
    assert "is not the key" in (
        swish_tls.problem(swish_tls.Credentials(str(certs / "merchant.pem"), str(other))) or ""
    )


def _production(certs: Path, **extra: str) -> dict[str, str]:
    return {
        "DEALBROKER_ENVIRONMENT": "production",
        "DEALBROKER_SECRET_KEY": "x" * 40,
        "DEALBROKER_SUPPORT_EMAIL": "support@market.example.com",
        "DEALBROKER_BASE_URL": "https://escrow.example.se",
        "DEALBROKER_CURRENCY": "SEK",
        "DEALBROKER_PAYMENT_PROVIDER": "stripe",
        "DEALBROKER_STRIPE_SECRET_KEY": "sk_live_x",
        "DEALBROKER_STRIPE_PUBLISHABLE_KEY": "pk_live_x",
        "DEALBROKER_STRIPE_WEBHOOK_SECRET": "whsec_x",
        "DEALBROKER_SWISH_MERCHANT_NUMBER": MERCHANT,
        "DEALBROKER_SWISH_CERT_FILE": str(certs / "merchant.pem"),
        "DEALBROKER_SWISH_KEY_FILE": str(certs / "merchant.key"),
        **extra,
    }


def _settings(values: dict[str, str]) -> Settings:
    return Settings(**{k.removeprefix("DEALBROKER_").lower(): v for k, v in values.items()})  # type: ignore[arg-type]


def test_production_checks_swish_before_it_starts(certs):
    assert (
        startup_problem(
            _settings(_production(certs, DEALBROKER_SWISH_CERT_FILE=str(certs / "expired.pem")))
        )
        is not None
    )
    refused = startup_problem(
        _settings(_production(certs, DEALBROKER_BASE_URL="http://escrow.example.se"))
    )
    assert refused is not None
    assert "HTTPS" in refused
    wrong_number = startup_problem(
        _settings(_production(certs, DEALBROKER_SWISH_MERCHANT_NUMBER="4671234"))
    )
    assert wrong_number is not None
    assert "123 followed by 7 digits" in wrong_number
    # With everything right, the next check speaks (the payout rail), not Swish's.
    fine = startup_problem(_settings(_production(certs)))
    assert fine is not None
    assert "payout rail" in fine


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_an_expired_certificate_stops_the_process_in_one_line(command, certs, tmp_path):
    values = _production(certs, DEALBROKER_SWISH_CERT_FILE=str(certs / "expired.pem"))
    done = subprocess.run(
        [sys.executable, "-m", "dealbroker", command],
        env=env(f"sqlite+aiosqlite:///{tmp_path / 'refused.db'}", **values),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "Swish certificate" in lines[0]
    assert "expired on" in lines[0]
