"""Swish payouts: the payout rail that pays a seller's Swish number from the operator's Swish
merchant account, through Swish's Payouts API (version 1), over mutual TLS, each instruction
signed with the payout signing certificate.

Written from Swish's published documentation, as seen on 2026-12-06:

- Payouts API v1, "Create payout" ``POST /swish-cpcapi/api/v1/payouts`` (body ``payload``,
  ``callbackUrl``, ``signature``; 201 with ``Location``; 4xx with a list of ``errorCode`` /
  ``errorMessage``), "Retrieve payout" ``GET /swish-cpcapi/api/v1/payouts/{payoutInstructionUUID}``
  and the callback to ``callbackUrl`` (status ``PAID`` or ``ERROR``, with ``errorCode`` and
  ``errorMessage``): https://developer.swish.nu/api/payouts/v1
- The payload signature: the payload's JSON hashed with SHA-512, that hash signed with the
  signing certificate's RSA key (PKCS #1 v1.5, SHA-512), base64;
  ``signingCertificateSerialNumber`` names the certificate (hex, as Swish's Certificate
  Management shows it): https://developer.swish.nu/documentation/guides/create-a-payout and
  Swish's "User Guide Merchant Swish Simulator" v1.6, chapters 9-10 (payout request body,
  "How to create the payload signature", error simulation codes).
- Certificates (the TLS client certificate and the signing certificate are separate, both
  from Swish Certificate Management): https://developer.swish.nu/documentation/certificates

How it is used here (see docs/payouts.md):

- ``SwishPayouts.pay_out`` is called by the provider-call job for a payout whose account is a
  Swish number. The instruction's id (``payoutInstructionUUID``) is the payout call's id, as 32
  upper-case hex digits. Swish is asked for that id before each create and after any 4xx to
  it, so an instruction an earlier attempt made (its answer lost) is found, not made again, and
  the call is refused only when Swish has none. A created instruction leaves the call
  ``submitted`` (``PayoutOutcome.SUBMITTED``) until Swish's answer. The HTTP plumbing (client,
  timeout, bounded answers, error lists, amounts, the mobile number rule) is the pay-in's
  (``payments.swish``, ``payments.swish_tls``).
- The answer comes by the callback (``web.swish_payout_callback``) or, when none has come after
  a few minutes, by the worker's poll (``SwishPayoutPollJob``); either way the status is Swish's
  own answer to our ``GET`` over mutual TLS, never the callback's body, and it is applied once
  (``apply``): ``PAID`` makes the payment ``PaidOut``, ``ERROR`` ``PayoutFailed`` with Swish's
  reason.
- The payee's personal identity number (``payeeSSN``, which Swish checks against the owner of
  the Swish number) is sealed at rest with a key derived from ``DEALBROKER_SECRET_KEY``, never
  logged, and shown by its last four digits only.
"""

import base64
import hashlib
import json
import logging
import os
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy.ext.asyncio import AsyncSession
from stdnum.exceptions import ValidationError
from stdnum.se import personnummer

from dealbroker.core import clock
from dealbroker.core.errors import FieldError
from dealbroker.core.i18n import N_, _
from dealbroker.core.jobs import ShortJob
from dealbroker.core.settings import Settings
from dealbroker.payments import repository, swish, swish_tls
from dealbroker.payments.escrow import deal_side
from dealbroker.payments.models import Payment, PayoutAccount
from dealbroker.payments.provider import PayoutOutcome, ProviderError
from dealbroker.payments.swish import SwishRefused, SwishUnavailable

log = logging.getLogger("dealbroker.payments")

RAIL = "swish"
PAYOUTS_PATH = "/api/v1/payouts"
CALLBACK_PATH = "/payments/v1/swish/payout-callback"
MAX_CALLBACK_BYTES = 16_384  # a callback is a flat object of short fields
# No callback after this long: the worker asks Swish (and again every POLL_EVERY).
POLL_AFTER = timedelta(minutes=3)
POLL_EVERY = timedelta(minutes=5)
POLL_BATCH = 20
MESSAGE = "Utbetalning"  # the payout's message in the payee's Swish app (at most 50 characters)
# Our own code (not Swish's) for a payee's identity number sealed under another secret key.
SSN_UNREADABLE = "SSN_UNREADABLE"
# The start of a refused payout call's error once Swish has paid its instruction after all.
PAID_AFTER_REFUSAL = "Swish PAID this payout after it was recorded as refused"
# Swish's codes the seller can act on, in their words; others are shown by code.
SELLER_REASONS = {
    "BE18": N_("Swish says the Swish number is not valid. Check it and give it again."),
    "ACMT07": N_("The Swish number is not connected to Swish. Check it and give it again."),
    "ACMT01": N_("The Swish number cannot receive payouts. Check it and give it again."),
    "VR02": N_(
        "Swish says the personal identity number is not the Swish number's owner's. Give "
        "the number and personal identity number of the same person."
    ),
    "VR01": N_("Swish payouts cannot be paid to this person (the age limit)."),
    "AM02": N_("The amount is too large for a Swish payout."),
    SSN_UNREADABLE: N_(
        "We can no longer read the personal identity number you gave. Give your Swish number "
        "and personal identity number again."
    ),
}


# --- the seller's input --------------------------------------------------------------------


def normalise_number(raw: str) -> str:
    """A Swedish mobile number as Swish's payee alias (``46701234567``), by the pay-in's rule
    for the payer's number (``swish.mobile_alias``); ``FieldError`` (``swish``) otherwise."""
    alias = swish.mobile_alias(raw)
    if alias is None:
        raise FieldError(
            "swish",
            _("Not a Swedish mobile number: give it as 07X XXX XX XX or +46 7X XXX XX XX."),
            "not a Swedish mobile number",
        )
    return alias


def normalise_ssn(raw: str) -> str:
    """A Swedish personal identity number as Swish's ``payeeSSN``: 12 digits, YYYYMMDDNNNN
    (python-stdnum's ``se.personnummer`` checks the date and the check digit; a co-ordination
    number passes too). ``FieldError`` (``ssn``) otherwise; the number is never in the error's
    detail."""
    try:
        valid = personnummer.validate(raw.strip())
        digits = "".join(ch for ch in valid if ch.isdigit())
        if len(digits) == 10:  # YYMMDD-NNNN: the century from the birth date ("+" past 100)
            digits = f"{personnummer.get_birth_date(valid).year:04d}"[:2] + digits
    except (ValidationError, ValueError) as exc:
        raise FieldError(
            "ssn",
            _("Not a valid Swedish personal identity number (YYYYMMDD-NNNN)."),
            "not a valid personal identity number",
        ) from exc
    return digits


def _ssn_key(settings: Settings) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"dealbroker payee ssn"
    ).derive(settings.secret_key.encode())


def seal(settings: Settings, ssn: str) -> str:
    """``ssn`` encrypted (AES-GCM, a key derived from ``DEALBROKER_SECRET_KEY``), for storing.
    A new secret key makes the sealed numbers unreadable: the seller gives theirs again."""
    nonce = os.urandom(12)
    sealed = AESGCM(_ssn_key(settings)).encrypt(nonce, ssn.encode(), b"payee-ssn")
    return base64.b64encode(nonce + sealed).decode()


def unseal(settings: Settings, sealed: str) -> str:
    raw = base64.b64decode(sealed)
    return AESGCM(_ssn_key(settings)).decrypt(raw[:12], raw[12:], b"payee-ssn").decode()


def ssn_ending(settings: Settings, sealed: str | None) -> str | None:
    """The last four digits of a sealed number, for the seller's page; None if unreadable."""
    if not sealed:
        return None
    try:
        return unseal(settings, sealed)[-4:]
    except Exception:  # sealed under another secret key
        return None


def seller_reason(error: str | None) -> str | None:
    """Why a Swish payout failed, in the seller's words, from the call's error text."""
    if not error or not error.startswith("Swish"):
        return None
    for code, text in SELLER_REASONS.items():
        if re.search(rf"\b{code}\b", error):
            return _(text)
    return _("Swish refused the payout: %(reason)s") % {"reason": error}


# --- certificates ------------------------------------------------------------------------------


def _signing(settings: Settings) -> swish_tls.Credentials:
    """The payout signing certificate and key, checked as the transport certificate is."""
    return swish_tls.Credentials(
        settings.swish_payout_signing_cert_file,
        settings.swish_payout_signing_key_file,
        cert_setting="DEALBROKER_SWISH_PAYOUT_SIGNING_CERT_FILE",
        key_setting="DEALBROKER_SWISH_PAYOUT_SIGNING_KEY_FILE",
    )


def startup_problem(settings: Settings) -> str | None:
    """Why Swish payouts cannot run with these settings (one line), or None (also when they are
    off): the pay-in's rules for the merchant number, the callback address (HTTPS outside the
    sandbox) and the certificates (``swish_tls.problem``, for the transport certificate and
    the signing certificate alike, in the sandbox too), and the signing serial."""
    if not settings.swish_payouts:
        return None
    if settings.currency != "SEK":
        return f"Swish payouts pay SEK only; DEALBROKER_CURRENCY is {settings.currency}"
    problem = (
        swish.merchant_problem(settings)
        or swish.callback_problem(settings)
        or swish_tls.problem(swish_tls.credentials(settings))
        or swish_tls.problem(_signing(settings))
    )
    if problem is not None:
        return problem
    key = serialization.load_pem_private_key(
        Path(settings.swish_payout_signing_key_file).read_bytes(), password=None
    )
    if not isinstance(key, rsa.RSAPrivateKey):
        return "DEALBROKER_SWISH_PAYOUT_SIGNING_KEY_FILE is not an RSA key"
    cert = x509.load_pem_x509_certificate(
        Path(settings.swish_payout_signing_cert_file).read_bytes()
    )
    if _serial(settings) != f"{cert.serial_number:X}":
        return (
            "DEALBROKER_SWISH_PAYOUT_SIGNING_SERIAL is not the serial number of "
            "DEALBROKER_SWISH_PAYOUT_SIGNING_CERT_FILE"
        )
    return None


def _serial(settings: Settings) -> str:
    return settings.swish_payout_signing_serial.replace(":", "").upper().lstrip("0")


# --- the payload and its signature ---------------------------------------------------------


def instruction_id(call_id: uuid.UUID) -> str:
    """A payout call's id as Swish's ``payoutInstructionUUID`` (32 upper-case hex digits)."""
    return call_id.hex.upper()


def canonical(payload: dict[str, str]) -> bytes:
    """The payload's JSON as sent and signed: compact, in its fields' order, UTF-8."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def sign(payload: dict[str, str], key: rsa.RSAPrivateKey) -> str:
    """Swish's payout signature: the SHA-512 hash of the payload's JSON, signed with RSA
    (PKCS #1 v1.5, SHA-512), base64."""
    digest = hashlib.sha512(canonical(payload)).digest()
    return base64.b64encode(key.sign(digest, padding.PKCS1v15(), hashes.SHA512())).decode()


@dataclass(frozen=True)
class Record:
    """Swish's word on one payout instruction (``GET``)."""

    instruction_id: str
    status: str  # CREATED, DEBITED, PAID or ERROR
    amount_minor: int | None
    currency: str | None
    payee_alias: str | None
    payment_reference: str | None
    error_code: str | None
    error_message: str | None

    @classmethod
    def parse(cls, body: Any) -> "Record":
        if not isinstance(body, dict):
            raise ValueError("not an object")

        def text(name: str, limit: int = 200) -> str | None:
            value = body.get(name)
            if value is None:
                return None
            if not isinstance(value, str) or len(value) > limit:
                raise ValueError(f"{name} is not a short text")
            return value

        status = text("status", 20)
        instruction = text("payoutInstructionUUID", 32)
        if not status or not instruction:
            raise ValueError("status or payoutInstructionUUID missing")
        return cls(
            instruction.upper(),
            status,
            swish.minor_units(body.get("amount")),
            text("currency", 3),
            text("payeeAlias", 15),
            text("paymentReference", 40),
            text("errorCode", 20),
            text("errorMessage", 300),
        )


class SwishPayoutsClient:
    """Swish's Payouts API over mutual TLS with the merchant's transport certificate, through
    the pay-in's plumbing (``swish_tls.client``, ``swish.read_json``, ``swish.answer_refusal``):
    one timeout, answers bounded, 429/5xx passing, any other 4xx a refusal."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.callback_url = swish.callback_base(settings) + CALLBACK_PATH

    async def _send(self, method: str, path: str, what: str, **kwargs: Any) -> swish.Answer:
        creds = swish_tls.credentials(self.settings)
        return await swish.send(creds, self.settings.swish_api_base, method, path, what, **kwargs)

    def _signing_key(self) -> rsa.RSAPrivateKey:
        data = Path(self.settings.swish_payout_signing_key_file).read_bytes()
        key = serialization.load_pem_private_key(data, password=None)
        assert isinstance(key, rsa.RSAPrivateKey)  # startup_problem checked it
        return key

    def payload(
        self, payment: Payment, account: PayoutAccount, call_id: uuid.UUID
    ) -> dict[str, str]:
        if account.payee_ssn_sealed is None:
            raise ProviderError("the Swish payout account has no personal identity number")
        try:
            ssn = unseal(self.settings, account.payee_ssn_sealed)
        except (InvalidTag, ValueError) as exc:
            # Sealed under another DEALBROKER_SECRET_KEY: only the seller can give it again.
            raise ProviderError(
                f"Swish payout not sent ({SSN_UNREADABLE}: the personal identity number was "
                "sealed under another secret key; the seller must give it again)"
            ) from exc
        return {
            "payoutInstructionUUID": instruction_id(call_id),
            "payerPaymentReference": payment.deal_id.hex[:35],
            "payerAlias": self.settings.swish_merchant_number,
            "payeeAlias": account.number,
            "payeeSSN": ssn,
            "amount": swish.amount_text(payment.payout_minor),
            "currency": "SEK",
            "payoutType": "PAYOUT",
            "message": MESSAGE,
            "instructionDate": clock.now().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "signingCertificateSerialNumber": _serial(self.settings),
        }

    async def create(self, payload: dict[str, str]) -> swish.Answer:
        body = {
            "payload": payload,
            "callbackUrl": self.callback_url,
            "signature": sign(payload, self._signing_key()),
        }
        return await self._send(
            "POST",
            PAYOUTS_PATH,
            "the payout",
            content=json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(),
            headers={"Content-Type": "application/json"},
        )

    async def get(self, instruction: str) -> Record | None:
        """Swish's record of the instruction; None when Swish has none; ``SwishUnavailable``
        when it cannot say now (no answer, 429, 5xx, an answer too large or unreadable);
        ``SwishRefused`` when it refuses to say (a 401/403 of a certificate it does not take:
        the operator's to fix)."""
        answer = await self._send("GET", f"{PAYOUTS_PATH}/{instruction}", "a payout's retrieval")
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise swish.answer_refusal(answer, "a payout's retrieval")
        try:
            record = Record.parse(swish.read_json(answer))
        except ValueError as exc:
            raise SwishUnavailable(f"Swish's payout answer cannot be read ({exc})") from exc
        if record.instruction_id != instruction:
            raise SwishUnavailable(f"Swish's answer for payout {instruction} is not it")
        return record


class SwishPayouts:
    """The payout rail for accounts of kind ``swish``."""

    name = RAIL

    def __init__(self, settings: Settings) -> None:
        self.client = SwishPayoutsClient(settings)

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        """Make the payout instruction once. As the pay-in's refund does, Swish is asked first
        whether it has the instruction already (an earlier attempt's whose answer was lost),
        and again after any 4xx to the create: an instruction Swish has is ``SUBMITTED``,
        whatever the create was answered. Refused only when Swish has none by that id; while
        Swish will not say (our certificate refused), tried again later."""
        if account.kind != "swish":
            raise ProviderError(f"Swish cannot pay to an account of kind {account.kind}")
        if payment.currency != "SEK":
            raise ProviderError(f"Swish pays SEK only, not {payment.currency}")
        call_id = uuid.UUID(idempotency_key)
        ident = instruction_id(call_id)
        if await self._has(ident):
            return PayoutOutcome.SUBMITTED
        answer = await self.client.create(self.client.payload(payment, account, call_id))
        if answer.status_code == 201:
            return PayoutOutcome.SUBMITTED
        refused = swish.answer_refusal(answer, "the payout")
        if isinstance(refused, SwishUnavailable):
            raise refused
        if await self._has(ident):
            log.warning("swish payout %s: %s, but Swish has it: submitted", ident, refused)
            return PayoutOutcome.SUBMITTED
        raise refused

    async def _has(self, ident: str) -> bool:
        """Whether Swish has the instruction. Swish refusing to say (a 401/403: our certificate
        not taken) is no answer: the call is tried again later, never refused on it, since a
        refused payout may be made again under a new id while Swish holds the first."""
        try:
            return await self.client.get(ident) is not None
        except SwishRefused as exc:
            log.error("swish payout %s: Swish will not say whether it has it: %s", ident, exc)
            raise SwishUnavailable(f"Swish will not say whether it has payout {ident}") from exc


# --- Swish's answer applied ----------------------------------------------------------------


async def payout_status(session: AsyncSession, call_id: uuid.UUID) -> str | None:
    """The status of payout call ``call_id`` (None: no payout of ours has that id)."""
    call = await repository.call(session, call_id)
    return call.status if call is not None and call.kind == "payout" else None


async def apply(session: AsyncSession, call_id: uuid.UUID, record: Record) -> str:
    """Swish's final word on payout call ``call_id``, applied once (the deal locked, then the
    call, as the provider-call job does): "paid", "failed", "duplicate" (settled already),
    "open" (not final yet), "conflict" (Swish paid another amount: left for the operator) or
    "unknown"."""
    found = await repository.call(session, call_id)
    deal = None if found is None else await deal_side().lock(session, found.deal_id)
    call = None if deal is None else await repository.call_for_update(session, call_id)
    if deal is None or call is None or call.kind != "payout":
        return "unknown"
    if call.status == "failed" and record.status == "PAID":
        return _paid_after_refusal(deal.id, call, record)
    if call.status not in ("pending", "submitted"):
        return "duplicate"
    from dealbroker.payments import service as payments  # service imports the provider

    if record.status == "PAID":
        payment = await repository.payment(session, call.payment_id)
        if (record.amount_minor, record.currency) != (payment.payout_minor, payment.currency):
            log.error(
                "swish paid payout %s another amount than ours; left for the operator",
                call.id,
                extra={"deal_id": str(deal.id)},
            )
            return "conflict"
        call.rail = RAIL
        await payments.call_succeeded(session, deal, call, record.payment_reference)
        return "paid"
    if record.status == "ERROR":
        reason = f"Swish refused the payout ({record.error_code}: {record.error_message})"
        call.rail = RAIL
        await payments.call_refused(session, deal, call, reason[:500])
        return "failed"
    return "open"


def _paid_after_refusal(deal_id: uuid.UUID, call: Any, record: Record) -> str:
    """Swish paid an instruction whose call we recorded as refused (its create answered with a
    refusal while Swish had taken it, say): the money went to the seller, and a later call for
    the same payout may pay them again. Not applied (the payment may have moved on), but never
    taken for a duplicate: logged as an error, written on the refused call where the back
    office's refused calls show it (and ``retry_refused_call`` refuses to try it again), and
    reported by reconciliation ("failed here, PAID at Swish")."""
    log.error(
        "swish PAID payout %s that we recorded as refused (%s): the seller has that money; "
        "check the payment's later payouts before paying again",
        call.id,
        call.error,
        extra={"deal_id": str(deal_id)},
    )
    call.rail = RAIL
    if not (call.error or "").startswith(PAID_AFTER_REFUSAL):
        amount = "?" if record.amount_minor is None else swish.amount_text(record.amount_minor)
        call.error = (
            f"{PAID_AFTER_REFUSAL} ({amount} {record.currency or ''}, reference "
            f"{record.payment_reference or '-'}); was: {call.error or ''}"
        )[:500]
    return "paid_after_refusal"


class SwishPayoutPollJob(ShortJob):
    """Asks Swish about submitted Swish payouts no callback has settled after ``POLL_AFTER``
    (a callback lost, our server down when it came), and applies the answer."""

    name = "swish-payouts"
    every = 60.0

    async def run_once(self) -> int:
        if not self.settings.swish_payouts:
            self.more = False
            return 0
        now = clock.now()
        async with self.sessionmaker() as session, session.begin():
            calls = await repository.swish_payouts_to_poll(session, RAIL, now, POLL_BATCH)
            for call in calls:
                call.next_attempt_at = now + POLL_EVERY
            asked = [c.id for c in calls]
        client = SwishPayoutsClient(self.settings)
        done = 0
        for call_id in asked:
            try:
                record = await client.get(instruction_id(call_id))
            except SwishUnavailable as exc:
                log.warning("asking swish about payout %s failed: %s", call_id, exc)
                continue
            except SwishRefused as exc:  # our certificate refused: the operator's to fix
                log.error("swish refused to say about payout %s: %s", call_id, exc)
                continue
            if record is None:
                log.error("swish has no payout instruction %s that we submitted", call_id)
                continue
            async with self.sessionmaker() as session, session.begin():
                outcome = await apply(session, call_id, record)
            log.info("swish payout %s polled: %s", call_id, outcome)
            done += 1
        self.more = len(asked) == POLL_BATCH
        return done
