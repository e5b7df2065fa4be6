"""The merchant's Swish certificate: checked before a process starts, and presented to Swish
over mutual TLS.

Swish's APIs (the Commerce API's payment requests and refunds, the payouts) know the merchant
only by the client certificate of the TLS connection: whoever holds its key can take and send
the merchant's money. So the key must be the operator's alone (no permission for the file's
group or others), and a certificate that has expired, or is not yet valid, is refused at start
with one line rather than at the buyer's first payment. See "Certificates" in Swish's
integration guide: https://developer.swish.nu/documentation/environments (TLS 1.2 or later,
the client certificate issued through the Swish Certificate Management portal).

The pay-in provider (``payments.swish``) and the payouts rail use the same ``client``: one
place loads the certificate, one place builds the TLS context.
"""

import os
import ssl
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from dealbroker.core import clock
from dealbroker.core.settings import Settings

# Swish answers in well under a second; a request not answered in this time is retried later.
TIMEOUT = httpx.Timeout(15.0, connect=10.0)


@dataclass(frozen=True)
class Credentials:
    """Where the merchant's certificate, its key (and the key's password) and the CA that
    Swish's server certificate is verified against are (``ca_file`` empty: the system's)."""

    cert_file: str
    key_file: str
    key_password: str = ""
    ca_file: str = ""
    # The settings that name the files, for the one line a problem is told in.
    cert_setting: str = "DEALBROKER_SWISH_CERT_FILE"
    key_setting: str = "DEALBROKER_SWISH_KEY_FILE"


def credentials(settings: Settings) -> Credentials:
    """The merchant's transport certificate as the settings name it: the one certificate of
    both the payment requests (``payments.swish``) and the payouts (``payments.swish_payouts``)."""
    return Credentials(
        settings.swish_cert_file,
        settings.swish_key_file,
        settings.swish_key_password.get_secret_value(),
        settings.swish_ca_file,
    )


def _readable(path: str, what: str) -> str | None:
    if not path:
        return f"{what} is not set"
    try:
        Path(path).read_bytes()
    except OSError as exc:
        return f"{what} {path} cannot be read ({exc.strerror or exc})"
    return None


def problem(creds: Credentials, now: datetime | None = None) -> str | None:
    """Why these credentials cannot be used (one line), or None: a file unreadable, a key file
    that its group or others may read, a certificate that is expired or not yet valid, a key
    that does not open (wrong password) or does not belong to the certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert_name, key_name = creds.cert_setting, creds.key_setting
    checks = [(creds.cert_file, cert_name), (creds.key_file, key_name)]
    if creds.ca_file:
        checks.append((creds.ca_file, "DEALBROKER_SWISH_CA_FILE"))
    for path, what in checks:
        if (found := _readable(path, what)) is not None:
            return found
    mode = os.stat(creds.key_file).st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return (
            f"{key_name} {creds.key_file} may be read by its group or others "
            f"(mode {stat.S_IMODE(mode):o}); chmod 600 it"
        )
    try:
        cert = x509.load_pem_x509_certificate(Path(creds.cert_file).read_bytes())
    except ValueError:
        return f"{cert_name} {creds.cert_file} is not a PEM certificate"
    now = now or clock.now()
    if cert.not_valid_after_utc <= now:
        return (
            f"the Swish certificate {creds.cert_file} expired on "
            f"{cert.not_valid_after_utc:%Y-%m-%d}; renew it in Swish's certificate portal"
        )
    if cert.not_valid_before_utc > now:
        return (
            f"the Swish certificate {creds.cert_file} is not valid before "
            f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )
    password = creds.key_password.encode() or None
    try:
        key = serialization.load_pem_private_key(
            Path(creds.key_file).read_bytes(), password=password
        )
    except (ValueError, TypeError):
        return (
            f"{key_name} {creds.key_file} does not open (not a PEM key, or "
            "DEALBROKER_SWISH_KEY_PASSWORD is wrong)"
        )
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    pem = serialization.Encoding.PEM
    if key.public_key().public_bytes(pem, spki) != cert.public_key().public_bytes(pem, spki):
        return f"{key_name} is not the key of {cert_name}"
    return None


def expires(creds: Credentials) -> datetime:
    """When the merchant's certificate stops being valid (for the operator's warnings)."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(Path(creds.cert_file).read_bytes())
    return cert.not_valid_after_utc.astimezone(UTC)


def context(creds: Credentials) -> ssl.SSLContext:
    """A TLS 1.2+ client context that verifies Swish's server and presents our certificate."""
    ctx = ssl.create_default_context(cafile=creds.ca_file or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(creds.cert_file, creds.key_file, password=creds.key_password or None)
    return ctx


def client(creds: Credentials, base_url: str) -> httpx.AsyncClient:
    """An HTTP client for Swish's API at ``base_url``, over mutual TLS; the caller closes it
    (``async with``). Redirects are not followed: Swish's answers carry their ``Location`` as
    data."""
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        verify=context(creds),
        timeout=TIMEOUT,
        follow_redirects=False,
    )
