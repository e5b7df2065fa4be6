"""The Swish emulator (``tests.payments.swish_emulator``) as its own process on loopback, and
the test certificates it and our client use: a test CA, the emulator's server certificate for
127.0.0.1, the merchant's client certificate (its common name the merchant number, as Swish
issues them) and certificates that must be refused (another CA's, an expired one, one not yet
valid). Made with ``cryptography``, as the production code checks them."""

import ipaddress
import json
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from dealbroker.auth.service import Principal
from dealbroker.core.settings import Settings
from dealbroker.deals import repository as deal_rows
from dealbroker.deals import service as deals
from dealbroker.deals.schemas import DealCreate
from dealbroker.events import service as events
from dealbroker.integrations import service as integrations
from dealbroker.payments import service as payments
from dealbroker.payments.methods import Method
from tests.lifecycle_helpers import SELLER, DealDriver
from tests.payments.swish_payouts_process import (
    PayoutsControl,
    make_signing_certificate,
    signing_settings,
)
from tests.processes import EmulatorProcess, free_port, run_on

MERCHANT = "1231181189"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> None:
    crypt = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, crypt)
    )
    path.chmod(0o600)


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
) -> x509.Certificate:
    now = datetime.now(UTC)
    issuer_name, issuer_key = issuer or (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - timedelta(days=1))
        .not_valid_after(not_after or now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def make_certificates(directory: Path) -> Path:
    """Every certificate the tests need, in ``directory``; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("Swish test CA", ca_key, None, ca=True)
    _pem(directory / "ca.pem", ca)
    issuer = (ca.subject, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    _pem(directory / "server.pem", _cert("127.0.0.1", server_key, issuer, server=True))
    _write_key(directory / "server.key", server_key)
    merchant_key = ec.generate_private_key(ec.SECP256R1())
    _pem(directory / "merchant.pem", _cert(MERCHANT, merchant_key, issuer))
    _write_key(directory / "merchant.key", merchant_key)
    _write_key(directory / "merchant-encrypted.key", merchant_key, b"test-password")
    now = datetime.now(UTC)
    _pem(
        directory / "expired.pem",
        _cert(
            MERCHANT,
            merchant_key,
            issuer,
            not_before=now - timedelta(days=400),
            not_after=now - timedelta(days=1),
        ),
    )
    _pem(
        directory / "future.pem",
        _cert(MERCHANT, merchant_key, issuer, not_before=now + timedelta(days=2)),
    )
    rogue_key = ec.generate_private_key(ec.SECP256R1())
    rogue_ca = _cert("Not Swish's CA", rogue_key, None, ca=True)
    _pem(directory / "rogue.pem", _cert(MERCHANT, merchant_key, (rogue_ca.subject, rogue_key)))
    (directory / "merchant.json").write_text(json.dumps({"merchant": MERCHANT}))
    return directory


class SwishEmulator(EmulatorProcess):
    """The payment requests' emulator, with Swish's Payouts API served beside them (``payouts``:
    its controls; ``settings(payouts=True)``: a deployment that pays sellers by Swish too)."""

    name = "the Swish emulator"

    def __init__(self, workdir: Path) -> None:
        self.certs = make_certificates(workdir / "certs")
        make_signing_certificate(self.certs, MERCHANT)
        self.port, self.control_port = free_port(), free_port()
        self.base = f"https://127.0.0.1:{self.port}/swish-cpcapi"
        self.control = f"http://127.0.0.1:{self.control_port}/_emulator"
        payouts_port = free_port()
        self.payouts = PayoutsControl(f"http://127.0.0.1:{payouts_port}/_emulator")
        self.spawn(
            [
                sys.executable,
                "-m",
                "tests.payments.swish_emulator",
                str(self.port),
                str(self.control_port),
                str(self.certs),
                str(payouts_port),
            ],
            workdir / "swish-emulator.log",
            self._ready,
            env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        )

    def _ready(self) -> bool:
        """The emulator's control answers, and its payouts' (``state`` raises until then)."""
        if httpx.get(f"{self.control}/log", timeout=1).status_code != 200:
            return False
        self.payouts.state()
        return True

    def settings(self, *, payouts: bool = False, **extra: str) -> dict[str, str]:
        """The ``DEALBROKER_*`` variables of a server that takes Swish payments through it (and,
        ``payouts``, pays sellers who give a Swish number through it too)."""
        return {
            "DEALBROKER_CURRENCY": "SEK",
            "DEALBROKER_SWISH_MERCHANT_NUMBER": MERCHANT,
            "DEALBROKER_SWISH_CERT_FILE": str(self.certs / "merchant.pem"),
            "DEALBROKER_SWISH_KEY_FILE": str(self.certs / "merchant.key"),
            "DEALBROKER_SWISH_CA_FILE": str(self.certs / "ca.pem"),
            "DEALBROKER_SWISH_API_BASE": self.base,
            **(signing_settings(self.certs) if payouts else {}),
            **extra,
        }

    def post(self, path: str, body: dict[str, Any]) -> Any:
        answer = httpx.post(f"{self.control}/{path}", json=body, timeout=15)
        answer.raise_for_status()
        return answer.json()

    def get(self, what: str) -> Any:
        return httpx.get(f"{self.control}/{what}", timeout=15).json()

    def reset(self) -> None:
        self.post("reset", {})
        self.payouts.reset()


def signed_swish_deal(
    db_url: str, settings: Settings, *, bank_account: bool = True, webhook: str | None = None
) -> tuple[uuid.UUID, str]:
    """A signed Pickup deal in SEK whose buyer chose Swish: its id and the checkout token. Its
    seller gives a bank account at once (``bank_account``; else the seller's page asks for one
    later); ``webhook``: the URL of its integration's webhook endpoint, for every event."""

    async def work(sessionmaker: Any) -> tuple[uuid.UUID, str]:
        async with sessionmaker() as session, session.begin():
            created = await integrations.create(session, "Swish")
            if webhook is not None:
                await events.create_endpoint(
                    session,
                    created.integration.id,
                    settings,
                    url=webhook,
                    event_kinds=None,
                    description=None,
                    enabled=True,
                )
            principal = Principal(created.integration.id, frozenset({"deals:read", "deals:write"}))
            deal = await deals.create(
                session, principal, DealCreate(name="Cykel", price=1500, seller=SELLER), "SEK"
            )
        d = DealDriver(sessionmaker, deal.id, created.integration.id)
        await d.to_signed("Pickup")
        if bank_account:
            await d.payout_account()
        _, token = await d.step(lambda s, deal: payments.start(s, deal, settings, Method.SWISH))
        return deal.id, token

    return run_on(db_url, work)


def pay_again(db_url: str, settings: Settings, deal_id: uuid.UUID) -> str:
    """The buyer of a deal whose Swish payment failed starts another: its checkout token."""

    async def work(sessionmaker: Any) -> str:
        async with sessionmaker() as session, session.begin():
            deal = await deal_rows.by_id_for_update(session, deal_id)
            _, token = await payments.start(session, deal, settings, Method.SWISH)
            return token

    return run_on(db_url, work)  # type: ignore[no-any-return]
