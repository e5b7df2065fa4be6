"""Swish as the payment provider of the ``swish`` method: a payment request the buyer accepts
in the Swish app, Swish's callback as the truth (``payments.swish_events``), refunds.

Written from Swish's Commerce API documentation (developer.swish.nu, as read on 2026-12-06):

- Payment request v2, ``PUT /api/v2/paymentrequests/{instructionUUID}`` (201; ``Location``,
  and ``PaymentRequestToken`` for M-commerce, that is without ``payerAlias``), its retrieval
  ``GET /api/v1/paymentrequests/{id}`` and cancel ``PATCH /api/v1/paymentrequests/{id}``
  (JSON Patch, ``replace /status cancelled``): https://developer.swish.nu/api/payment-request/v2
- Refunds v2, ``PUT /api/v2/refunds/{instructionUUID}`` (201, ``Location``), retrieved by
  ``GET /api/v1/refunds/{id}``: https://developer.swish.nu/api/refunds/v2 and
  https://developer.swish.nu/api/refunds/v1
- Errors: 422 with a list of ``{errorCode, errorMessage, additionalInformation}`` (``RP03``
  callback URL, ``RP09`` instruction UUID taken, ``ACMT03`` payer not enrolled, ``RF08`` ...),
  400/401/403/415 for a malformed request or a certificate Swish does not accept, 429/5xx
  passing: https://developer.swish.nu/documentation/error-codes
- Payment request statuses ``CREATED``, ``PAID``, ``DECLINED``, ``ERROR`` (``TM01``: not
  answered within 3 minutes; ``RF07``, ``BANKIDCL`` ...), ``CANCELLED``; refund statuses
  ``CREATED``/``VALIDATED``, ``DEBITED``, ``PAID``, ``ERROR``.

The ``getswish`` package was evaluated and not used (docs/payments-swish.md): it is
synchronous, takes amounts as floats and reads keys without a password.

Ids: a payment request's instruction UUID is our payment's id (32 upper-case hex digits), so a
repeated request for one payment is refused by Swish (``RP09``) rather than made twice; a
refund's is the provider call's id, so a refund made again after a crash is found, not made
again. Money is integer öre here, ``"123.45"`` strings at Swish. SEK only.

A refund completes asynchronously at Swish. ``refund`` (made by the provider-call job) looks
the refund up first and creates it only if Swish has none by that id, then polls it for a few
seconds: ``PAID`` is the refund made, ``ERROR`` a refusal; still under way, it raises
``RefundUnderWay`` (a passing failure), and the job asks again later with the same id. Swish's
refund callback only wakes that call sooner (``swish_events``); never does it move money.
"""

import asyncio
import hashlib
import hmac
import json
import re
import uuid
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote

import httpx

from dealbroker.core.settings import Settings
from dealbroker.payments import swish_tls
from dealbroker.payments.models import Payment, PayoutAccount
from dealbroker.payments.provider import PayoutOutcome, PayoutRail, ProviderError

CALLBACK_PATH = "/payments/v1/swish/callback"
PAID, DECLINED, ERROR, CANCELLED, CREATED = "PAID", "DECLINED", "ERROR", "CANCELLED", "CREATED"
FINAL = frozenset({PAID, DECLINED, ERROR, CANCELLED})
REFUND_UNDER_WAY = frozenset({"CREATED", "VALIDATED", "DEBITED"})
# How long ``refund`` waits for Swish to finish a refund before leaving it to a later attempt.
REFUND_POLL = (0.5, 1.0, 1.0, 2.0, 2.0, 3.0)
# Swish's answers are a payment request or refund object, or a short error list: a few KB.
# Read at most this much of one (more is not Swish's), before anything parses it.
MAX_ANSWER_BYTES = 64 * 1024


class SwishUnavailable(Exception):
    """Swish did not answer, or answered 429 or 5xx: asked again later (not a refusal)."""


class RefundUnderWay(Exception):
    """Swish has taken the refund and not finished it yet: the call is asked about again."""


class SwishRefused(ProviderError):
    """Swish refused the request itself (4xx): asking again the same way will not help."""

    def __init__(self, message: str, codes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.codes = codes


def instruction(value: uuid.UUID) -> str:
    """Our id as a Swish instruction UUID: 32 upper-case hex digits."""
    return value.hex.upper()


def callback_identifier(secret_key: str, payment_id: uuid.UUID) -> str:
    """The ``callbackIdentifier`` of ``payment_id``'s request: 32 upper-case hex digits (within
    the 32 to 36 letters and digits Swish takes), derived from the secret key and the payment,
    so every attempt to make the request (a second press of "Pay", a retry after a timeout in
    which Swish did make it) presents the same one, and the callbacks of whichever request
    Swish made are recognised. Not guessable without the secret key."""
    message = b"swish-callback-identifier:" + payment_id.bytes
    return hmac.new(secret_key.encode(), message, hashlib.sha256).hexdigest()[:32].upper()


def amount_text(minor: int) -> str:
    return f"{minor // 100}.{minor % 100:02d}"


def minor_units(value: object) -> int | None:
    """Swish's amount (a JSON number or a string, two decimals at most) in öre, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, str, Decimal)):
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return None
    minor = amount * 100
    if not amount.is_finite() or minor != minor.to_integral_value() or minor < 0:
        return None
    return int(minor)


def mobile_alias(typed: str) -> str | None:
    """A Swedish mobile number as typed (``070-123 45 67``, ``+46 70 123 45 67``, ``0046...``)
    as Swish's alias of a person (``46701234567``: 46, then the number without its leading 0),
    or None when it is not one. The one rule of both the payer's number (``SwishProvider``) and
    the payee's (``swish_payouts.normalise_number``).

    No phone-number library is a dependency, so the rule is written out: spaces, dashes,
    brackets and dots are ignored; a Swedish mobile number is 7 followed by 8 digits, its
    second digit one of 0, 2, 3, 6, 9 (the 070-079 series the Swedish Post and Telecom
    Authority (PTS) gives to mobile services, less 071/074/075/077/078, which are not personal
    mobile numbers). A business's Swish number (123...) is not a person's."""
    compact = "".join(ch for ch in typed if ch not in " -().\u00a0")
    if compact.startswith("+"):
        compact = compact[1:]
    elif compact.startswith("00"):
        compact = compact[2:]
    if compact.startswith("0"):
        national = compact[1:]
    elif compact.startswith("46"):
        national = compact[2:]
        if national.startswith("0"):  # "+46 (0)70 ..." as some write it
            national = national[1:]
    else:
        return None
    if national.isdigit() and len(national) == 9 and national[0] == "7" and national[1] in "02369":
        return "46" + national
    return None


def payer_alias(typed: str) -> str | None:
    """The payer's Swish number as typed, as Swish's payer alias, or None (``mobile_alias``)."""
    return mobile_alias(typed)


@dataclass(frozen=True)
class Request:
    """A payment request (or a refund) as Swish holds it now."""

    id: str
    status: str
    amount_minor: int | None
    currency: str | None
    payment_reference: str | None = None
    payer_payment_reference: str | None = None  # ours: the payment's id, on a refund
    error_code: str | None = None
    error_message: str | None = None

    @property
    def reason(self) -> str:
        return f"{self.error_code or self.status}: {self.error_message or 'no message'}"


def _text(value: object, limit: int = 255) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= limit and "\x00" not in value:
        return value
    return None


def read_request(body: object) -> Request | None:
    """A payment request or refund object of Swish's (an answer or a callback's body), its
    fields type-checked; None when it is not one."""
    if not isinstance(body, dict):
        return None
    ident, status = _text(body.get("id"), 64), _text(body.get("status"), 20)
    if ident is None or status is None:
        return None
    return Request(
        id=ident,
        status=status,
        amount_minor=minor_units(body.get("amount")),
        currency=_text(body.get("currency"), 3),
        payment_reference=_text(body.get("paymentReference"), 64),
        payer_payment_reference=_text(body.get("payerPaymentReference"), 64),
        error_code=_text(body.get("errorCode"), 50),
        error_message=_text(body.get("errorMessage"), 500),
    )


@dataclass(frozen=True)
class Answer:
    """Swish's answer: its status, headers and body, the body read to ``MAX_ANSWER_BYTES`` at
    most (``send``)."""

    status_code: int
    headers: httpx.Headers
    content: bytes


async def send(
    creds: swish_tls.Credentials, base: str, method: str, path: str, what: str, **kwargs: Any
) -> Answer:
    """One request to Swish over mutual TLS (the payment requests' and the payouts'); its
    answer's body read to ``MAX_ANSWER_BYTES`` at most (a longer one is not Swish's:
    ``SwishUnavailable``, never read whole into memory)."""
    try:
        async with (
            swish_tls.client(creds, base) as http,
            http.stream(method, path, **kwargs) as response,
        ):
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
                raise SwishUnavailable(f"Swish's answer to {what} is {declared} bytes")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise SwishUnavailable(
                        f"Swish's answer to {what} is over {MAX_ANSWER_BYTES} bytes"
                    )
    except httpx.TransportError as exc:  # a timeout, a refused connection, a TLS failure
        raise SwishUnavailable(f"Swish did not answer {what}: {exc!r}") from exc
    return Answer(response.status_code, response.headers, bytes(body))


def read_json(answer: Answer) -> Any:
    """Swish's answer as JSON, bounded (``MAX_ANSWER_BYTES``); ``SwishUnavailable`` otherwise."""
    if len(answer.content) > MAX_ANSWER_BYTES:
        raise SwishUnavailable(f"Swish answered {len(answer.content)} bytes")
    try:
        return json.loads(answer.content, parse_float=Decimal)
    except (ValueError, RecursionError) as exc:
        raise SwishUnavailable("Swish's answer is not JSON") from exc


def answer_refusal(answer: Answer, what: str) -> Exception:
    """The exception for an answer that is not a success: passing (429, 5xx) or a refusal
    (any 4xx, a 401/403 of a certificate Swish does not take included: the operator's to
    fix, and asking again the same way will not help)."""
    if answer.status_code == 429 or answer.status_code >= 500:
        return SwishUnavailable(f"Swish answered {answer.status_code} to {what}")
    codes: list[str] = []
    messages: list[str] = []
    try:
        errors = read_json(answer)
    except SwishUnavailable:
        errors = None
    for error in errors if isinstance(errors, list) else []:
        if isinstance(error, dict) and (code := _text(error.get("errorCode"), 50)):
            codes.append(code)
            messages.append(f"{code} {_text(error.get('errorMessage'), 200) or ''}".strip())
    detail = "; ".join(messages) or f"HTTP {answer.status_code}"
    return SwishRefused(f"Swish refused {what}: {detail}", tuple(codes))


class SwishProvider:
    name = "swish"

    def __init__(self, settings: Settings, payouts: PayoutRail) -> None:
        self._creds = swish_tls.credentials(settings)
        self._secret_key = settings.secret_key
        self._base = settings.swish_api_base.rstrip("/")
        self._merchant = settings.swish_merchant_number
        self.callback_url = callback_base(settings) + CALLBACK_PATH
        self._payouts = payouts

    async def _send(self, method: str, path: str, what: str, **kwargs: Any) -> Answer:
        return await send(self._creds, self._base, method, path, what, **kwargs)

    def checkout_url(self, base_url: str, token: str, return_path: str) -> str:
        return f"{base_url}/pay/swish/{token}?return={quote(return_path, safe='')}"

    # --- payment requests -----------------------------------------------------------------

    def callback_identifier(self, payment: Payment) -> str:
        """The ``callbackIdentifier`` every request for ``payment`` carries (its callbacks
        must carry it back)."""
        return callback_identifier(self._secret_key, payment.id)

    def check(self, payment: Payment) -> None:
        """``ProviderError`` if Swish cannot take ``payment`` at all (asked before anything is
        kept for its request)."""
        if payment.currency != "SEK":
            raise ProviderError(f"Swish takes SEK only, not {payment.currency}")

    async def create_request(self, payment: Payment, *, payer: str | None = None) -> str | None:
        """Ask Swish for ``payment``'s amount: to the payer's number (E-commerce: the request
        appears in their app), or, with no number, for the app on this device or a QR code
        (M-commerce: the request token it returns, which opens it). SEK only. Made already
        (an earlier attempt's, whose answer was lost): ``SwishRefused`` with ``RP09``; read it
        back with ``payment_request``."""
        self.check(payment)
        body: dict[str, Any] = {
            "payeePaymentReference": payment.id.hex.upper(),
            "callbackUrl": self.callback_url,
            "payeeAlias": self._merchant,
            "amount": amount_text(payment.amount_minor),
            "currency": "SEK",
            "message": f"Deal {str(payment.deal_id)[:8]}",
            "callbackIdentifier": self.callback_identifier(payment),
        }
        if payer is not None:
            body["payerAlias"] = payer
        ident = instruction(payment.id)
        answer = await self._send(
            "PUT", f"/api/v2/paymentrequests/{ident}", "the payment request", json=body
        )
        if answer.status_code != 201:
            raise answer_refusal(answer, "the payment request")
        return answer.headers.get("PaymentRequestToken") or None

    async def payment_request(self, payment: Payment) -> Request | None:
        """``payment``'s request as Swish holds it now; None if Swish has none."""
        ident = instruction(payment.id)
        answer = await self._send("GET", f"/api/v1/paymentrequests/{ident}", "a retrieval")
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise answer_refusal(answer, "a retrieval")
        found = read_request(read_json(answer))
        if found is None or found.id.upper() != ident:
            raise SwishUnavailable(f"Swish's answer for payment request {ident} is not it")
        return found

    async def cancel(self, payment: Payment, *, idempotency_key: str) -> bool:
        """Cancel ``payment``'s request, so the buyer can no longer pay it. None made, or
        over unpaid: nothing to do. Paid first: True (the money is refunded)."""
        if payment.swish_callback_hash is None:
            return False  # no request was ever asked for
        ident = instruction(payment.id)
        answer = await self._send(
            "PATCH",
            f"/api/v1/paymentrequests/{ident}",
            "the cancel",
            content=json.dumps([{"op": "replace", "path": "/status", "value": "cancelled"}]),
            headers={"Content-Type": "application/json-patch+json"},
        )
        if answer.status_code == 200:
            return False
        refusal = answer_refusal(answer, "the cancel")
        if isinstance(refusal, SwishUnavailable):
            raise refusal
        # Refused: Swish cancels only a request still waiting for the payer. As it stands:
        found = await self.payment_request(payment)
        if found is None or found.status in (DECLINED, ERROR, CANCELLED):
            return False
        if found.status == PAID:
            return True
        raise refusal

    # --- refunds --------------------------------------------------------------------------

    async def _refund_state(self, ident: str) -> Request | None:
        answer = await self._send("GET", f"/api/v1/refunds/{ident}", "a refund's retrieval")
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise answer_refusal(answer, "a refund's retrieval")
        return read_request(read_json(answer))

    async def _payment_reference(self, payment: Payment) -> str:
        """Swish's reference of ``payment``'s money: kept when its callback (or the checkout
        page, or the polling job) applied it; otherwise (money that came after the deal
        stopped waiting, its callback lost, refused or not come yet) read from the request
        itself, which must be paid, for ``payment``'s amount."""
        if payment.swish_payment_reference is not None:
            return payment.swish_payment_reference
        found = await self.payment_request(payment)
        if found is None or found.status != PAID or found.payment_reference is None:
            state = "no payment request" if found is None else found.status
            raise ProviderError(f"Swish holds no money of this payment to refund ({state})")
        if found.amount_minor != payment.amount_minor or found.currency != payment.currency:
            raise ProviderError(f"Swish payment request {found.id} is not of the payment's amount")
        return found.payment_reference

    async def refund(self, payment: Payment, *, idempotency_key: str) -> str | None:
        ident = instruction(uuid.UUID(idempotency_key))
        state = await self._refund_state(ident)
        if state is None:
            body = {
                "originalPaymentReference": await self._payment_reference(payment),
                "payerPaymentReference": payment.id.hex.upper(),
                "callbackUrl": self.callback_url,
                "payerAlias": self._merchant,
                "amount": amount_text(payment.refund_minor),
                "currency": "SEK",
                "message": f"Refund {str(payment.deal_id)[:8]}",
            }
            answer = await self._send("PUT", f"/api/v2/refunds/{ident}", "the refund", json=body)
            if answer.status_code != 201:
                refusal = answer_refusal(answer, "the refund")
                if not (isinstance(refusal, SwishRefused) and "RP09" in refusal.codes):
                    raise refusal
                # RP09: a refund by this id exists (an earlier attempt's): follow that one.
        for pause in (0.0, *REFUND_POLL):
            await asyncio.sleep(pause)
            state = await self._refund_state(ident)
            if state is None:
                continue
            if state.status == PAID:
                if state.amount_minor not in (None, payment.refund_minor):
                    raise ProviderError(f"Swish refund {ident} is not of the amount asked")
                return ident
            if state.status not in REFUND_UNDER_WAY:
                raise ProviderError(f"Swish refund {ident} failed ({state.reason})")
        raise RefundUnderWay(f"Swish refund {ident} is under way")

    async def refund_record(self, ident: str) -> Request | None:
        """A refund as Swish holds it now, by its instruction id (reconciliation)."""
        return await self._refund_state(ident)

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        return await self._payouts.pay_out(payment, account, idempotency_key=idempotency_key)


def callback_base(settings: Settings) -> str:
    """Where Swish posts its callbacks, for the payment requests and the payouts alike:
    ``DEALBROKER_SWISH_CALLBACK_BASE_URL``, else ``DEALBROKER_BASE_URL``."""
    return (settings.swish_callback_base_url or settings.base_url).rstrip("/")


def callback_problem(settings: Settings) -> str | None:
    """Outside the sandbox, a callback address Swish will not post to (not HTTPS), or None."""
    if settings.is_sandbox or callback_base(settings).startswith("https://"):
        return None
    return (
        "Swish posts its callbacks over HTTPS only: DEALBROKER_SWISH_CALLBACK_BASE_URL (or "
        "DEALBROKER_BASE_URL) must start with https://"
    )


def merchant_problem(settings: Settings) -> str | None:
    """A merchant's Swish number is 123 and 7 digits; why not, or None."""
    if re.fullmatch(r"123\d{7}", settings.swish_merchant_number):
        return None
    return "DEALBROKER_SWISH_MERCHANT_NUMBER must be 123 followed by 7 digits"


def startup_problem(settings: Settings) -> str | None:
    """Why the swish provider cannot run here (one line), or None: its merchant number, and
    (outside the sandbox) its certificate and key (``swish_tls.problem``) and an HTTPS
    callback address, as Swish requires."""
    if (problem := merchant_problem(settings) or callback_problem(settings)) is not None:
        return problem
    if settings.is_sandbox:
        return None
    return swish_tls.problem(swish_tls.credentials(settings))
