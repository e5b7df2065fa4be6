"""Vipps MobilePay ePayment as a payment provider: the buyer approves the payment in the Vipps or
MobilePay app (or on Vipps's landing page), which reserves the money; we capture it when the item
is handed over, cancel the reservation for a refund before that, and refund after.

Written from Vipps MobilePay's published documentation (ePayment API v1, Access token API,
Webhooks API v1), as read on 2026-12-06:

- Create payment ``POST /epayment/v1/payments`` (``amount``, ``paymentMethod.type`` WALLET,
  ``reference``, ``returnUrl``, ``userFlow`` WEB_REDIRECT; answers ``redirectUrl``):
  https://developer.vippsmobilepay.com/docs/APIs/epayment-api/api-guide/operations/create
- Get payment ``GET /epayment/v1/payments/{reference}`` (``state`` CREATED, AUTHORIZED, ABORTED,
  EXPIRED, TERMINATED; ``aggregate`` of authorized, cancelled, captured and refunded amounts;
  ``paymentMethod.type``), capture, cancel and refund (``POST .../capture|cancel|refund`` with
  ``modificationAmount``), each with an ``Idempotency-Key``:
  https://developer.vippsmobilepay.com/docs/APIs/epayment-api/api-guide/operations/ and the
  integration checklist
  https://developer.vippsmobilepay.com/downloads/epayment-api/epayment-checklist.pdf
- The headers every call sends (``Authorization: Bearer``, ``Ocp-Apim-Subscription-Key``,
  ``Merchant-Serial-Number``, ``Vipps-System-Name``/``-Version``/``-Plugin-Name``/``-Plugin-
  Version``): https://developer.vippsmobilepay.com/docs/APIs/epayment-api/quick-start/
- Access token ``POST /accesstoken/get`` (headers ``client_id``, ``client_secret``, the
  subscription key and MSN; answers ``access_token`` and ``expires_in`` seconds, as a string):
  https://developer.vippsmobilepay.com/docs/APIs/access-token-api/
- Reservations: https://developer.vippsmobilepay.com/docs/knowledge-base/reserve-and-capture/
  and https://developer.vippsmobilepay.com/docs/knowledge-base/payment-rules (see
  ``RESERVATION`` and docs/decisions/0028-vipps-capture.md).

And the Report API 2.0, as seen on 2026-12-07, for reconciliation (``VippsClient.funds``): the
merchant's funds ledger, every capture, refund, fee and payout that moved money at Vipps, by
ledger date, whether or not our database knows the payment:

- Find the ledger ``GET /settlement/v1/ledgers?settlesForRecipientHandles=api:{MSN}``
  (``items`` of ``ledgerId``, ``currency``, ``settlesForRecipientHandles``; ``cursor``), then a
  date's entries ``GET /report/v2/ledgers/{ledgerId}/funds/dates/{ledgerDate}`` (``items``;
  ``cursor`` non-empty: more, asked for with ``?cursor=``; ``tryLater`` true: the date is not
  closed yet, the items are those so far; 404: no report for the date yet), same token and
  headers as the ePayment API:
  https://developer.vippsmobilepay.com/api/report and
  https://developer.vippsmobilepay.com/docs/APIs/report-api/api-guide/fetching-report-data/
- Entry types (``capture``, ``refund``, ``fees-retained``, ``payout-scheduled``, ...; others
  may come without notice; ``amount`` signed as it moves the balance, so a refund is negative):
  https://developer.vippsmobilepay.com/docs/APIs/report-api/api-guide/entry-types/
- The report trails the ePayment API, usually by a second, by hours when Vipps has trouble:
  https://developer.vippsmobilepay.com/docs/APIs/report-api/api-guide/

Errors: an answer that refuses the request (4xx, Vipps's problem JSON) is ``ProviderError``
(final for the provider-call job); a 429, a 5xx, a timeout or a network error is
``VippsUnavailable``, which is not a ``ProviderError``, so the job tries the call again later
with the same idempotency key. A 401 or 403 refuses our own credentials (a rotated secret, a
subscription key or sales unit not enabled), not the payment: ``VippsNotAllowed``, an
``VippsUnavailable`` logged as an error for the operator and tried again, never taken as an
answer about the payment. A capture is refused as ``ReservationLapsed`` (the parties are told)
only when a ``GET`` that succeeds shows the reservation gone. Every request is bounded by
``TIMEOUT``.

The access token is cached per process until ``TOKEN_MARGIN`` before it expires, shared by the
providers made per use (``provider_for``), and renewed once when Vipps answers 401.
"""

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import httpx

from dealbroker import __version__
from dealbroker.core.settings import Settings
from dealbroker.payments.models import Payment, PayoutAccount
from dealbroker.payments.provider import (
    PayoutOutcome,
    PayoutRail,
    ProviderError,
    ReservationLapsed,
)

log = logging.getLogger("dealbroker.payments")

TIMEOUT = httpx.Timeout(10.0, connect=5.0)
TOKEN_MARGIN = 300.0  # seconds before its expiry that a token is renewed
MAX_ANSWER_BYTES = 64 * 1024
REFERENCE_PREFIX = "dealbroker-"
# How long a reservation is sure to hold, by how the buyer paid (``paymentMethod.type``): a card
# entered on Vipps's page is a card reservation (Visa guarantees 7 days); the wallet's payment
# Vipps keeps for 180 days in Norway, 14 for MobilePay (Denmark, Finland). See the decision.
RESERVATION = {"CARD": timedelta(days=7), "WALLET": timedelta(days=180)}
MOBILEPAY_RESERVATION = timedelta(days=14)
FINAL_STATES = frozenset({"ABORTED", "EXPIRED", "TERMINATED"})
# The funds ledger as read by reconciliation: bounded in dates, pages, bytes and entries, and
# refused (not cut short) beyond, so a run either compares every entry of its dates or says why
# not. A report's page may hold many entries: it has its own limit, above the API's answers'.
MAX_LEDGER_DATES = 31
MAX_REPORT_PAGES = 200
MAX_REPORT_PAGE_BYTES = 2 * 1024 * 1024
MAX_LEDGER_ENTRIES = 50_000


class VippsUnavailable(Exception):
    """Vipps did not answer, or answered that it cannot now (429, 5xx): the call may be made
    again with the same idempotency key. Not a ``ProviderError``: the provider-call job
    retries it. ``retry_after``: the seconds Vipps asked us to wait, if it said."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class VippsNotAllowed(VippsUnavailable):
    """Vipps refused our credentials (401 after a new token, 403): the operator must fix the
    client id, secret, subscription key or sales unit. Retried like a passing failure, so a
    call waits for the fix rather than being refused for good."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class VippsRefused(ProviderError):
    """Vipps refused the request (4xx): asking again will not help. ``status`` is its HTTP
    status, the message Vipps's own ``title``/``detail``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class VippsPayment:
    """A payment as Vipps holds it (``GET``), each field type-checked."""

    reference: str
    state: str
    currency: str
    amount: int
    authorized: int
    cancelled: int
    captured: int
    refunded: int
    method: str | None  # WALLET or CARD, once the buyer chose

    @property
    def reserved(self) -> int:
        """What is still reserved and may be captured."""
        return self.authorized - self.cancelled - self.captured


@dataclass(frozen=True)
class LedgerEntry:
    """One entry of the merchant's funds ledger at Vipps (the Report API), each field
    type-checked. ``amount`` is in minor units, signed as it moved the balance (a capture
    positive, a refund negative). ``reference`` is the ePayment reference of a capture or refund
    (ours: ``payment_id_of`` names the payment; another sale on the same sales unit: not), None
    for entries of no payment (payouts, fees)."""

    psp_reference: str | None
    time: datetime
    ledger_date: date
    entry_type: str
    reference: str | None
    currency: str
    amount: int
    balance_before: int
    balance_after: int
    recipient_handle: str | None


@dataclass(frozen=True)
class FundsReport:
    """The funds ledger's entries of some ledger dates. ``open_dates``: dates Vipps has not
    closed yet (``tryLater``): their entries are those booked so far. ``missing_dates``: dates
    with no report yet (404): none of their entries are here."""

    entries: tuple[LedgerEntry, ...]
    open_dates: tuple[date, ...]
    missing_dates: tuple[date, ...]


class LedgerPeriodTooLong(ValueError):
    """A period covering more than ``MAX_LEDGER_DATES`` ledger dates: it is refused, not read
    in part."""


def reference(payment_id: uuid.UUID) -> str:
    """Our payment's reference at Vipps: derived from its id (unique per sales unit)."""
    return f"{REFERENCE_PREFIX}{payment_id.hex}"


def payment_id_of(ref: str) -> uuid.UUID | None:
    """The id of our payment a Vipps reference names, or None if it is not one of ours."""
    if not ref.startswith(REFERENCE_PREFIX) or len(ref) != len(REFERENCE_PREFIX) + 32:
        return None
    try:
        return uuid.UUID(hex=ref.removeprefix(REFERENCE_PREFIX))
    except ValueError:
        return None


def reserved_until(found: VippsPayment, authorized_at: datetime) -> datetime:
    """Until when ``found``'s reservation is sure to hold (see ``RESERVATION``)."""
    if found.method == "WALLET" and found.currency != "NOK":
        return authorized_at + MOBILEPAY_RESERVATION
    return authorized_at + RESERVATION.get(found.method or "CARD", RESERVATION["CARD"])


# --- the access token, shared by the process ---------------------------------------------

_tokens: dict[tuple[str, str], tuple[str, float]] = {}
_token_lock = asyncio.Lock()


def forget_tokens() -> None:
    """Drop every cached token (tests; a 401 drops its own)."""
    _tokens.clear()


def _int(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise VippsRefused(f"Vipps answered a {what} that is not a whole amount", 502)
    return value


def _str(value: object, what: str, limit: int = 100) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise VippsRefused(f"Vipps answered a {what} that is not a short text", 502)
    return value


def _signed(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise VippsRefused(f"Vipps answered a {what} that is not a whole amount", 502)
    return value


def _optional_str(value: object, what: str, limit: int = 100) -> str | None:
    return None if value is None else _str(value, what, limit)


def ledger_dates(since: datetime, until: datetime, zone: ZoneInfo, now: datetime) -> list[date]:
    """The ledger dates (days in the merchant's ``zone``) that ``[since, until)`` touches, up to
    ``now`` (no report exists for a later date). ``LedgerPeriodTooLong`` beyond
    ``MAX_LEDGER_DATES``."""
    end = min(until, now)
    if end <= since:
        return []
    first = since.astimezone(zone).date()
    last = (end - timedelta(microseconds=1)).astimezone(zone).date()
    count = (last - first).days + 1
    if count > MAX_LEDGER_DATES:
        raise LedgerPeriodTooLong(
            f"the period covers {count} ledger dates ({first} to {last}); Vipps's report is "
            f"read for at most {MAX_LEDGER_DATES} per run: reconcile shorter periods"
        )
    return [first + timedelta(days=n) for n in range(count)]


def parse_entry(body: object) -> LedgerEntry:
    """One funds entry of the Report API, type-checked field by field: a malformed entry is an
    error (``VippsRefused``), never skipped, so no money goes uncompared unnoticed."""
    if not isinstance(body, dict):
        raise VippsRefused("Vipps answered a ledger entry that is not an object", 502)
    try:
        moment = datetime.fromisoformat(_str(body.get("time"), "entry time", 40))
        day = date.fromisoformat(_str(body.get("ledgerDate"), "ledger date", 10))
    except ValueError as exc:
        raise VippsRefused(
            f"Vipps answered a ledger entry's time or date unread: {exc}", 502
        ) from exc
    if moment.tzinfo is None:
        raise VippsRefused("Vipps answered a ledger entry's time without its offset", 502)
    return LedgerEntry(
        psp_reference=_optional_str(body.get("pspReference"), "pspReference"),
        time=moment,
        ledger_date=day,
        entry_type=_str(body.get("entryType"), "entry type", 50),
        reference=_optional_str(body.get("reference"), "reference"),
        currency=_str(body.get("currency"), "currency", 3),
        amount=_signed(body.get("amount"), "entry amount"),
        balance_before=_signed(body.get("balanceBefore"), "balance"),
        balance_after=_signed(body.get("balanceAfter"), "balance"),
        recipient_handle=_optional_str(body.get("recipientHandle"), "recipient handle"),
    )


def _page(answer: dict[str, Any], what: str) -> tuple[list[Any], str | None]:
    """A listing's ``items`` and the ``cursor`` to the next page (None: the last page)."""
    items = answer.get("items")
    cursor = answer.get("cursor")
    if not isinstance(items, list):
        raise VippsRefused(f"Vipps answered {what} without a list of items", 502)
    if cursor not in (None, "") and not isinstance(cursor, str):
        raise VippsRefused(f"Vipps answered {what} with a cursor that is not a text", 502)
    return items, _optional_str(cursor or None, "cursor", 4096)


def parse_payment(body: object) -> VippsPayment:
    """A ``GET`` answer, type-checked field by field."""
    if not isinstance(body, dict):
        raise VippsRefused("Vipps answered a payment that is not an object", 502)
    amount = body.get("amount")
    aggregate = body.get("aggregate")
    if not isinstance(amount, dict) or not isinstance(aggregate, dict):
        raise VippsRefused("Vipps answered a payment without amount or aggregate", 502)

    def part(name: str) -> int:
        value = aggregate.get(name)
        return _int(value.get("value") if isinstance(value, dict) else None, name)

    method = body.get("paymentMethod")
    kind = method.get("type") if isinstance(method, dict) else None
    return VippsPayment(
        reference=_str(body.get("reference"), "reference"),
        state=_str(body.get("state"), "state", 20),
        currency=_str(amount.get("currency"), "currency", 3),
        amount=_int(amount.get("value"), "amount"),
        authorized=part("authorizedAmount"),
        cancelled=part("cancelledAmount"),
        captured=part("capturedAmount"),
        refunded=part("refundedAmount"),
        method=kind if kind in ("WALLET", "CARD") else None,
    )


class VippsClient:
    """The ePayment API's calls we make, and the Report API's funds ledger that reconciliation
    reads, with the headers and token they need."""

    def __init__(self, settings: Settings) -> None:
        self._base = settings.vipps_api_base.rstrip("/")
        self._client_id = settings.vipps_client_id
        self._secret = settings.vipps_client_secret
        self._key = settings.vipps_subscription_key
        self._msn = settings.vipps_merchant_serial_number
        self._ledger: str | None = None  # found once per client: one reconciliation run

    def _headers(self) -> dict[str, str]:
        return {
            "Ocp-Apim-Subscription-Key": self._key.get_secret_value(),
            "Merchant-Serial-Number": self._msn,
            "Vipps-System-Name": "dealbroker",
            "Vipps-System-Version": __version__,
            "Vipps-System-Plugin-Name": "dealbroker-escrow",
            "Vipps-System-Plugin-Version": __version__,
        }

    async def _token(self, http: httpx.AsyncClient, *, renew: bool = False) -> str:
        key = (self._base, self._client_id)
        async with _token_lock:
            cached = _tokens.get(key)
            if cached is not None and not renew and cached[1] > time.monotonic():
                return cached[0]
            answer = await self._send(  # VippsNotAllowed: the operator's to fix, retried
                http,
                "POST",
                "/accesstoken/get",
                headers={
                    **self._headers(),
                    "client_id": self._client_id,
                    "client_secret": self._secret.get_secret_value(),
                },
            )
            token = _str(answer.get("access_token"), "access token", 4096)
            try:
                lifetime = float(answer.get("expires_in", 0))
            except (TypeError, ValueError):
                lifetime = 0.0
            _tokens[key] = (token, time.monotonic() + max(lifetime - TOKEN_MARGIN, 0.0))
            return token

    async def _send(
        self,
        http: httpx.AsyncClient,
        method: str,
        path: str,
        *,
        headers: dict[str, str],
        body: dict[str, Any] | None = None,
        limit: int = MAX_ANSWER_BYTES,
    ) -> dict[str, Any]:
        try:
            async with http.stream(
                method, f"{self._base}{path}", headers=headers, json=body
            ) as answer:
                if answer.status_code == 429 or answer.status_code >= 500:
                    retry_after = answer.headers.get("Retry-After")
                    raise VippsUnavailable(
                        f"Vipps answered {answer.status_code} to {method} {path}",
                        float(retry_after) if retry_after and retry_after.isdigit() else None,
                    )
                content = bytearray()
                async for chunk in answer.aiter_bytes():  # read no further than ``limit``
                    content += chunk
                    if len(content) > limit:
                        raise VippsUnavailable(f"Vipps's answer to {method} {path} is too large")
        except httpx.HTTPError as exc:  # a timeout, a refused connection: try again later
            raise VippsUnavailable(f"Vipps did not answer {method} {path}: {exc!r}") from exc
        try:
            decoded = json.loads(content) if content else {}
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            decoded = None
        if answer.status_code >= 400:
            detail = ""
            if isinstance(decoded, dict):
                detail = str(decoded.get("detail") or decoded.get("title") or "")[:300]
            message = f"Vipps refused {method} {path} ({answer.status_code}): {detail}"
            if answer.status_code in (401, 403):
                raise VippsNotAllowed(message, answer.status_code)
            raise VippsRefused(message, answer.status_code)
        if not isinstance(decoded, dict):
            raise VippsUnavailable(f"Vipps answered {method} {path} with no JSON object")
        return decoded

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        limit: int = MAX_ANSWER_BYTES,
    ) -> dict[str, Any]:
        """One request, with a token (renewed once if Vipps says it is not valid); an answer
        longer than ``limit`` bytes is not read."""
        async with httpx.AsyncClient(timeout=TIMEOUT) as http:
            for renew in (False, True):
                try:
                    headers = {
                        **self._headers(),
                        "Authorization": f"Bearer {await self._token(http, renew=renew)}",
                    }
                    if idempotency_key is not None:
                        headers["Idempotency-Key"] = idempotency_key
                    return await self._send(
                        http, method, path, headers=headers, body=body, limit=limit
                    )
                except VippsNotAllowed as exc:
                    if exc.status != 401 or renew:
                        log.error("vipps: our credentials were refused; fix them: %s", exc)
                        raise
        raise AssertionError("unreachable")

    async def create(self, payment: Payment, return_url: str, description: str) -> str:
        """Create the payment at Vipps (the idempotency key is our payment's id, so a second
        page load gets the same payment); Vipps's ``redirectUrl`` for the buyer."""
        answer = await self.call(
            "POST",
            "/epayment/v1/payments",
            {
                "amount": {"currency": payment.currency, "value": payment.amount_minor},
                "paymentMethod": {"type": "WALLET"},
                "reference": reference(payment.id),
                "returnUrl": return_url,
                "userFlow": "WEB_REDIRECT",
                "paymentDescription": description[:100],
            },
            idempotency_key=str(payment.id),
        )
        return _str(answer.get("redirectUrl"), "redirectUrl", 2000)

    async def get(self, payment_id: uuid.UUID) -> VippsPayment | None:
        """The payment as Vipps holds it now; None if Vipps has none by its reference."""
        try:
            answer = await self.call("GET", f"/epayment/v1/payments/{reference(payment_id)}")
        except VippsRefused as exc:
            if exc.status == 404:
                return None
            raise
        return parse_payment(answer)

    async def ledger_id(self) -> str:
        """The id of the funds ledger that settles our sales unit (``api:<MSN>``), asked once."""
        if self._ledger is not None:
            return self._ledger
        handle = f"api:{self._msn}"
        cursor: str | None = None
        for _ in range(MAX_REPORT_PAGES):
            query = f"settlesForRecipientHandles={quote(handle, safe='')}"
            if cursor is not None:
                query += f"&cursor={quote(cursor, safe='')}"
            items, cursor = _page(
                await self.call("GET", f"/settlement/v1/ledgers?{query}"), "ledgers"
            )
            for item in items:
                handles = item.get("settlesForRecipientHandles") if isinstance(item, dict) else None
                if isinstance(handles, list) and handle in handles:
                    self._ledger = _str(item.get("ledgerId"), "ledger id")
                    return self._ledger
            if cursor is None:
                raise VippsRefused(f"Vipps has no ledger that settles {handle}", 404)
        raise VippsUnavailable(f"Vipps listed more than {MAX_REPORT_PAGES} pages of ledgers")

    async def funds(self, dates: list[date]) -> FundsReport:
        """Every funds ledger entry of ``dates`` (at most ``MAX_LEDGER_DATES``: more are
        ``LedgerPeriodTooLong``), each page followed by its cursor. A page that cannot be read is
        ``VippsUnavailable`` or ``VippsRefused``, as every other call; so are more pages, bytes
        or entries than the bounds: the run is refused whole rather than compared in part."""
        if len(dates) > MAX_LEDGER_DATES:
            raise LedgerPeriodTooLong(
                f"{len(dates)} ledger dates asked for; at most {MAX_LEDGER_DATES} per run"
            )
        ledger = quote(await self.ledger_id(), safe="")
        entries: list[LedgerEntry] = []
        open_dates: list[date] = []
        missing: list[date] = []
        pages = 0
        for day in dates:
            cursor: str | None = None
            while True:
                pages += 1
                if pages > MAX_REPORT_PAGES:
                    raise VippsUnavailable(
                        f"Vipps's funds report has more than {MAX_REPORT_PAGES} pages for "
                        f"{dates[0]} to {dates[-1]}: reconcile shorter periods"
                    )
                path = f"/report/v2/ledgers/{ledger}/funds/dates/{day.isoformat()}"
                if cursor is not None:
                    path += f"?cursor={quote(cursor, safe='')}"
                try:
                    answer = await self.call("GET", path, limit=MAX_REPORT_PAGE_BYTES)
                except VippsRefused as exc:
                    if exc.status != 404 or cursor is not None:  # a page gone is no date unread
                        raise
                    missing.append(day)
                    break
                items, cursor = _page(answer, f"the funds report of {day}")
                entries.extend(parse_entry(item) for item in items)
                if len(entries) > MAX_LEDGER_ENTRIES:
                    raise VippsUnavailable(
                        f"Vipps's funds report has more than {MAX_LEDGER_ENTRIES} entries for "
                        f"{dates[0]} to {dates[-1]}: reconcile shorter periods"
                    )
                try_later = answer.get("tryLater", False)
                if not isinstance(try_later, bool):
                    raise VippsRefused("Vipps answered a tryLater that is not true or false", 502)
                if try_later and day not in open_dates:
                    open_dates.append(day)
                if cursor is None:
                    break
        return FundsReport(tuple(entries), tuple(open_dates), tuple(missing))

    async def modify(
        self, payment_id: uuid.UUID, action: str, amount: int | None, currency: str, key: str
    ) -> None:
        """``capture``, ``refund`` or ``cancel`` (``amount`` None) of the payment."""
        body = (
            None
            if amount is None
            else {"modificationAmount": {"currency": currency, "value": amount}}
        )
        await self.call(
            "POST",
            f"/epayment/v1/payments/{quote(reference(payment_id))}/{action}",
            body,
            idempotency_key=key,
        )


class VippsProvider:
    """The ``vipps`` provider: Vipps MobilePay ePayment for pay-ins, this deployment's payout
    rail for payouts (Vipps pays no sellers)."""

    name = "vipps"

    def __init__(self, settings: Settings, payouts: PayoutRail) -> None:
        self.client = VippsClient(settings)
        self._payouts = payouts

    def checkout_url(self, base_url: str, token: str, return_path: str) -> str:
        return f"{base_url}/pay/vipps/{token}?return={quote(return_path, safe='')}"

    async def create(self, payment: Payment, return_url: str, description: str) -> str:
        return await self.client.create(payment, return_url, description)

    async def payment(self, payment: Payment) -> VippsPayment | None:
        return await self.client.get(payment.id)

    async def capture(self, payment: Payment, *, idempotency_key: str) -> None:
        """Take the reserved amount. Made already (a repeated call, the same key) is done. A
        refusal is read back (``GET``): ``ReservationLapsed`` only when Vipps's record shows the
        reservation gone (see the decision record); a refusal of a reservation that still holds
        is a plain ``ProviderError``, for the operator, and our credentials refused (on the
        capture or the ``GET``) are ``VippsNotAllowed``, tried again."""
        try:
            await self.client.modify(
                payment.id, "capture", payment.amount_minor, payment.currency, idempotency_key
            )
            return
        except VippsRefused as refusal:
            found = await self.client.get(payment.id)
            if found is not None and found.captured >= payment.amount_minor:
                return  # captured before (by this call, its answer lost)
            state = "unknown to Vipps" if found is None else found.state
            reserved = 0 if found is None else found.reserved
            what = f"(Vipps: {state}, {reserved} reserved): {refusal}"
            if found is None or found.state != "AUTHORIZED" or reserved < payment.amount_minor:
                raise ReservationLapsed(
                    f"the reservation could not be captured {what}"
                ) from refusal
            raise ProviderError(
                f"Vipps refused the capture of a reservation it still holds {what}"
            ) from refusal

    async def refund(self, payment: Payment, *, idempotency_key: str) -> str | None:
        """Give ``refund_minor`` back, so that Vipps ends up holding for us what we keep
        (``amount - refund_minor``: the shipping of a parcel the buyer did not collect, else
        nothing), and nothing stays reserved. Decided on Vipps's own record (``GET``): what is
        still reserved is captured up to what we keep, and the rest is cancelled (the money
        never leaves the buyer); what was captured beyond it is refunded. Vipps allows a
        partial capture and the cancel of the remainder:
        https://developer.vippsmobilepay.com/docs/APIs/epayment-api/api-guide/operations/cancel/

        Each step has its own idempotency key derived from the call's, so the call made again
        moves money once. A capture or cancel Vipps refuses (a capture landed in between: a
        payment captured in full cannot be cancelled) is read back and decided again on what
        Vipps then holds, once; refused again, the refund is ``ProviderError``."""
        for attempt in range(2):
            found = await self.client.get(payment.id)
            if found is None:
                raise ProviderError(f"Vipps has no payment {reference(payment.id)} to refund")
            try:
                await self._give_back(payment, found, idempotency_key)
                return None
            except VippsRefused as refusal:
                if attempt:
                    raise
                log.warning(
                    "vipps: %s of %s refused; reading it again: %s",
                    "the refund",
                    reference(payment.id),
                    refusal,
                )
        raise AssertionError("unreachable")

    async def _give_back(self, payment: Payment, found: VippsPayment, key: str) -> None:
        keep = payment.amount_minor - payment.refund_minor
        taken = found.captured - found.refunded  # what Vipps holds for us now
        reserved = found.reserved
        if found.state == "AUTHORIZED" and reserved > 0:
            if taken < keep:  # the kept part (shipping) is still only reserved: take it
                part = min(keep - taken, reserved)
                await self.client.modify(
                    payment.id, "capture", part, payment.currency, f"{key}-keep"
                )
                taken, reserved = taken + part, reserved - part
            if reserved > 0:  # the rest never leaves the buyer
                await self.client.modify(
                    payment.id, "cancel", None, payment.currency, f"{key}-rest"
                )
        if taken > keep:
            await self.client.modify(payment.id, "refund", taken - keep, payment.currency, key)

    async def cancel(self, payment: Payment, *, idempotency_key: str) -> bool:
        """Cancel a payment closed unpaid, so the buyer can no longer approve it. True when the
        buyer approved it first (the reservation is then given back by ``refund_late``)."""
        found = await self.client.get(payment.id)
        if found is None or found.state in FINAL_STATES:
            return False  # never created at Vipps, or over there already
        if found.state == "AUTHORIZED":
            return found.reserved > 0 or found.captured > 0
        await self.client.modify(payment.id, "cancel", None, payment.currency, idempotency_key)
        return False

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        return await self._payouts.pay_out(payment, account, idempotency_key=idempotency_key)
