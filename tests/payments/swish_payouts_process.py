"""The Swish payouts emulator (``tests.payments.swish_payouts_emulator``) as its own process on
free loopback ports, with the certificates mutual TLS and the payload signature need, made for
the test run: a test CA (Swish's, here) that issues the emulator's server certificate and our
client certificate, and the payout signing certificate the emulator verifies payloads with."""

import sys
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from tests.payments.swish_payouts_emulator import MERCHANT
from tests.processes import EmulatorProcess, free_port, wait_until


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificate(
    subject: str,
    key: rsa.RSAPrivateKey,
    issuer: tuple[x509.Name, rsa.RSAPrivateKey] | None = None,
    *,
    ca: bool = False,
    server: bool = False,
    days: int = 30,
) -> x509.Certificate:
    issuer_name, issuer_key = issuer or (_name(subject), key)
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, name: str, cert: x509.Certificate, key: rsa.RSAPrivateKey) -> None:
    (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file = directory / f"{name}-key.pem"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)


def make_certificates(directory: Path) -> None:
    """ca.pem; server.pem (127.0.0.1) and client.pem issued by it; signing.pem (self-signed,
    as Swish's Certificate Management gives it): each with its ``-key.pem``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _certificate("Test Swish Root CA", ca_key, ca=True)
    _write(directory, "ca", ca, ca_key)
    for name, server in (("server", True), ("client", False)):
        key = _key()
        _write(
            directory,
            name,
            _certificate(f"swish {name}", key, (ca.subject, ca_key), server=server),
            key,
        )
    make_signing_certificate(directory)


def make_signing_certificate(directory: Path, merchant: str = MERCHANT) -> None:
    """signing.pem and signing-key.pem: the payout signing certificate (self-signed, as Swish's
    Certificate Management gives it)."""
    signing_key = _key()
    _write(directory, "signing", _certificate(merchant, signing_key), signing_key)


def signing_serial(directory: Path) -> str:
    """The serial number of ``directory``'s signing.pem, as Swish's portal shows it (hex)."""
    cert = x509.load_pem_x509_certificate((directory / "signing.pem").read_bytes())
    return f"{cert.serial_number:X}"


def signing_settings(directory: Path) -> dict[str, str]:
    """The ``DEALBROKER_*`` variables of the payout signing certificate in ``directory``."""
    return {
        "DEALBROKER_SWISH_PAYOUTS": "true",
        "DEALBROKER_SWISH_PAYOUT_SIGNING_CERT_FILE": str(directory / "signing.pem"),
        "DEALBROKER_SWISH_PAYOUT_SIGNING_KEY_FILE": str(directory / "signing-key.pem"),
        "DEALBROKER_SWISH_PAYOUT_SIGNING_SERIAL": signing_serial(directory),
    }


class PayoutsControl:
    """The control endpoints of a Swish payouts emulator (its own process's, or the payment
    requests' emulator's that serves payouts beside them), at ``control``."""

    def __init__(self, control: str) -> None:
        self.control = control

    def _post(self, what: str, body: dict[str, Any]) -> None:
        httpx.post(f"{self.control}/{what}", json=body, timeout=10).raise_for_status()

    def enrol(self, alias: str, ssn: str) -> None:
        self._post("payees", {"alias": alias, "ssn": ssn})

    def fail(
        self,
        mode: str,
        count: int = 1,
        *,
        hang_seconds: float = 5,
        method: str | None = "POST",
        made: bool = False,
        code: str | None = None,
    ) -> None:
        """The next ``count`` requests (of ``method``; None: any) fail as ``mode`` says (see
        the emulator's ``/_emulator/fail``)."""
        self._post(
            "fail",
            {
                "mode": mode,
                "count": count,
                "hang_seconds": hang_seconds,
                "method": method,
                "made": made,
                "code": code,
            },
        )

    def callbacks(self, send: bool = True, delay: float = 0.2) -> None:
        self._post("callbacks", {"send": send, "delay": delay})

    def state(self) -> dict[str, Any]:
        answer = httpx.get(f"{self.control}/payouts", timeout=10)
        answer.raise_for_status()
        found: dict[str, Any] = answer.json()
        return found

    def wait_settled(self, count: int = 1, timeout: float = 10) -> None:
        """Until ``count`` payouts are PAID or ERROR at Swish (each is, shortly after it is
        made)."""
        wait_until(
            lambda: sum(p["status"] in ("PAID", "ERROR") for p in self.state()["payouts"]) >= count,
            timeout,
            "Swish to settle the payouts",
            interval=0.1,
        )

    def reset(self) -> None:
        self._post("reset", {})


class SwishPayoutsEmulator(PayoutsControl, EmulatorProcess):
    name = "the Swish payouts emulator"

    def __init__(self, workdir: Path) -> None:
        self.certs = workdir / "certs"
        make_certificates(self.certs)
        self.port, self.control_port = free_port(), free_port()
        self.base = f"https://127.0.0.1:{self.port}/swish-cpcapi"
        super().__init__(f"http://127.0.0.1:{self.control_port}/_emulator")
        self.spawn(
            [
                sys.executable,
                "-m",
                "tests.payments.swish_payouts_emulator",
                str(self.port),
                str(self.control_port),
                str(self.certs),
            ],
            workdir / "swish-payouts-emulator.log",
            lambda: httpx.get(f"{self.control}/payouts", timeout=1).status_code == 200,
        )

    @property
    def signing_serial(self) -> str:
        return signing_serial(self.certs)

    def settings(self, **extra: str) -> dict[str, str]:
        """The ``DEALBROKER_*`` variables of a server that pays sellers by Swish through it."""
        return {
            "DEALBROKER_CURRENCY": "SEK",
            "DEALBROKER_PAYMENT_METHODS": "card",
            "DEALBROKER_SWISH_MERCHANT_NUMBER": MERCHANT,
            "DEALBROKER_SWISH_API_BASE": self.base,
            "DEALBROKER_SWISH_CERT_FILE": str(self.certs / "client.pem"),
            "DEALBROKER_SWISH_KEY_FILE": str(self.certs / "client-key.pem"),
            "DEALBROKER_SWISH_CA_FILE": str(self.certs / "ca.pem"),
            **signing_settings(self.certs),
            **extra,
        }

    def values(self, **extra: str) -> dict[str, str]:
        """``settings()`` as ``Settings`` keyword arguments."""
        return {k.removeprefix("DEALBROKER_").lower(): v for k, v in self.settings(**extra).items()}
