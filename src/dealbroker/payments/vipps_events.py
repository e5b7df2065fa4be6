"""What Vipps MobilePay says about our payments, applied: its webhooks, the return from its
landing page and the polling fallback all end here (``apply``), so an answer is applied the same
way whoever brings it, and once: the payment's state is the dedupe (an answer that finds the
payment no longer open is acknowledged and changes nothing).

- ``AUTHORIZED`` (the buyer approved; the money is reserved): ``Paid``, with until when the
  reservation holds (``payments.reserved``), through the settlement handler (the deal moves on).
  Only on Vipps's own ``GET`` of the payment: its amount and currency must be ours, and what is
  still reserved (authorized less cancelled and captured) must cover the amount.
- ``ABORTED`` (the buyer said no), ``TERMINATED`` (we cancelled it): ``PaymentCancelled``;
  ``EXPIRED`` (not approved in time): ``PaymentFailed``. The deal stays ``Signed``, the buyer
  may pay again.
- An ``AUTHORIZED`` payment that no longer pays for its deal (closed, or its deal moved on) is
  given back whole (``payments.refund_late``: its reservation is cancelled).
- ``CANCELLED``, ``CAPTURED``, ``REFUNDED``: answers to our own calls, which the provider-call
  job records; acknowledged. A ``CANCELLED`` for a payment we hold as paid and did not cancel is
  logged for the operator: its capture will fail, and that is handled there.

The webhook is verified by Vipps's HMAC-SHA256 scheme (``verify``), as the Webhooks API
describes it: https://developer.vippsmobilepay.com/docs/APIs/webhooks-api/request-authentication/
(the body's SHA-256 in ``x-ms-content-sha256``; ``Authorization: HMAC-SHA256
SignedHeaders=x-ms-date;host;x-ms-content-sha256&Signature=`` the base64 HMAC-SHA256, keyed by
the webhook's secret, of ``POST\\n<path and query>\\n<x-ms-date>;<host>;<content hash>``). A
delivery older or newer than ``MAX_SKEW`` is refused too, so a recorded one cannot be replayed.
The body's fields are those of the ePayment webhook events:
https://developer.vippsmobilepay.com/docs/APIs/epayment-api/api-guide/webhooks/ (``msn``,
``reference``, ``pspReference``, ``name``, ``amount``, ``timestamp``, ``success``).
"""

import base64
import hashlib
import hmac
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.errors import DomainError
from dealbroker.core.jobs import ShortJob
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import PaymentStatus
from dealbroker.payments import repository
from dealbroker.payments import service as payments
from dealbroker.payments.escrow import Outcome as PaymentOutcome
from dealbroker.payments.escrow import deal_side
from dealbroker.payments.models import Payment
from dealbroker.payments.provider import ProviderError
from dealbroker.payments.vipps import (
    VippsClient,
    VippsPayment,
    VippsUnavailable,
    payment_id_of,
    reserved_until,
)

log = logging.getLogger("dealbroker.payments")

MAX_BODY_BYTES = 16 * 1024
MAX_SKEW = timedelta(minutes=5)
SETTLES = {
    "AUTHORIZED": PaymentOutcome.SUCCEEDED,
    "ABORTED": PaymentOutcome.CANCELLED,
    "TERMINATED": PaymentOutcome.CANCELLED,
    "EXPIRED": PaymentOutcome.FAILED,
}
NAMES = frozenset({*SETTLES, "CREATED", "CANCELLED", "CAPTURED", "REFUNDED"})


class Forged(ValueError):
    """A delivery whose signature, content hash or date does not verify: refused, not read."""


class Malformed(ValueError):
    """A verified body that is not a Vipps event we can read."""


@dataclass(frozen=True)
class Event:
    msn: str
    reference: str
    name: str
    amount: int
    currency: str


def signature(secret: str, path_and_query: str, date: str, host: str, body: bytes) -> str:
    """The ``Authorization`` header Vipps sends for this delivery (what the emulator signs)."""
    content = base64.b64encode(hashlib.sha256(body).digest()).decode()
    signed = f"POST\n{path_and_query}\n{date};{host};{content}"
    mac = hmac.new(secret.encode(), signed.encode(), hashlib.sha256).digest()
    return (
        "HMAC-SHA256 SignedHeaders=x-ms-date;host;x-ms-content-sha256&Signature="
        + base64.b64encode(mac).decode()
    )


def verify(
    secret: str,
    path_and_query: str,
    host: str,
    date: str | None,
    content_sha256: str | None,
    authorization: str | None,
    body: bytes,
    now: datetime,
) -> None:
    """Raise ``Forged`` unless the delivery is signed by the holder of ``secret``, its body is
    the one signed, and it is recent."""
    if not secret or not date or not content_sha256 or not authorization:
        raise Forged("unsigned")
    digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
    if not hmac.compare_digest(digest, content_sha256):
        raise Forged("the body is not the one signed")
    try:
        sent = parsedate_to_datetime(date)
    except (TypeError, ValueError) as exc:
        raise Forged("x-ms-date is not a date") from exc
    if sent.tzinfo is None or abs(now - sent) > MAX_SKEW:
        raise Forged("x-ms-date is too far from now")
    expected = signature(secret, path_and_query, date, host, body)
    if not hmac.compare_digest(expected.encode(), authorization.encode()):
        raise Forged("the signature does not verify")


def parse(body: bytes) -> Event:
    """The event in a verified body, each field type-checked."""
    if len(body) > MAX_BODY_BYTES:
        raise Malformed("too large")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise Malformed("not JSON") from exc
    if not isinstance(data, dict):
        raise Malformed("not an object")
    amount = data.get("amount")
    value = amount.get("value") if isinstance(amount, dict) else None
    currency = amount.get("currency") if isinstance(amount, dict) else None
    fields = (data.get("msn"), data.get("reference"), data.get("name"), currency)
    if not all(isinstance(f, str) and 0 < len(f) <= 100 for f in fields):
        raise Malformed("msn, reference, name or amount.currency is not a short text")
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise Malformed("amount.value is not a whole amount")
    msn, ref, name, cur = (str(f) for f in fields)
    if name not in NAMES:
        raise Malformed(f"unknown event name {name[:30]!r}")
    return Event(msn, ref, name, value, cur)


class Outcome(StrEnum):
    APPLIED = "applied"
    DUPLICATE = "duplicate"  # the payment is no longer open: nothing to apply again
    IGNORED = "ignored"  # nothing to change (an answer to our own call, a payment not approved)
    UNMATCHED = "unmatched"  # not one of our payments, or not as we made it: logged


async def apply(
    session: AsyncSession,
    settings: Settings,
    payment_id: uuid.UUID,
    state: str,
    found: VippsPayment | None,
) -> Outcome:
    """Apply Vipps's word ``state`` for our payment (``found``: Vipps's ``GET`` of it, needed to
    settle it paid). In the caller's transaction; the deal is locked first, then the payment."""
    known = await session.get(Payment, payment_id)
    if known is None or known.provider != "vipps":
        log.warning("vipps: %s for a payment that is not ours (%s)", state, payment_id)
        return Outcome.UNMATCHED
    deal = await deal_side().lock(session, known.deal_id)
    if deal is None:
        return Outcome.IGNORED
    payment = await repository.payment(session, payment_id, fresh=True)
    if state == "CANCELLED" and payment.status == PaymentStatus.PAID:
        if payments.needs_capture(payment):
            log.error("vipps: payment %s's reservation was cancelled at Vipps", payment.id)
        return Outcome.IGNORED
    outcome = SETTLES.get(state)
    if outcome is None:
        return Outcome.IGNORED
    if outcome is PaymentOutcome.SUCCEEDED:
        if found is None or found.state != "AUTHORIZED":
            return Outcome.IGNORED  # only Vipps's own record makes a payment paid
        if found.amount != payment.amount_minor or found.currency != payment.currency:
            log.error("vipps: payment %s is not for our amount; not applied", payment.id)
            return Outcome.UNMATCHED
        if found.reserved < payment.amount_minor:  # partly cancelled or captured already
            log.error(
                "vipps: payment %s is authorized but only %s of %s is still reserved; not paid",
                payment.id,
                found.reserved,
                payment.amount_minor,
            )
            return Outcome.UNMATCHED
    current = await payments.current(session, deal)
    is_open = PaymentStatus(payment.status) in payments.OPEN
    if current is None or current.id != payment.id or not is_open:
        closed_unpaid = PaymentStatus(payment.status) in payments.CLOSED_UNPAID
        if outcome is PaymentOutcome.SUCCEEDED and closed_unpaid:
            return await _refund_late(session, deal.id, payment.id)
        return Outcome.DUPLICATE
    if outcome is PaymentOutcome.SUCCEEDED:
        assert found is not None
        await payments.reserved(session, payment, reserved_until(found, clock.now()))
    deal_id = deal.id
    try:
        async with session.begin_nested():
            await deal_side().settle(session, deal, outcome, settings)
    except DomainError as exc:
        log.warning("vipps: payment %s of deal %s not applied: %s", payment_id, deal_id, exc)
        if outcome is not PaymentOutcome.SUCCEEDED:
            return Outcome.UNMATCHED
        return await _refund_late(session, deal_id, payment_id)
    return Outcome.APPLIED


async def _refund_late(session: AsyncSession, deal_id: uuid.UUID, payment_id: uuid.UUID) -> Outcome:
    """The buyer approved a payment that does not pay for its deal: its reservation goes back."""
    deal = await deal_side().lock(session, deal_id)
    payment = await repository.payment(session, payment_id, fresh=True)
    assert deal is not None
    if PaymentStatus(payment.status) in payments.OPEN:
        await payments.move(session, deal, payment, PaymentStatus.PAYMENT_CANCELLED)
    if not await payments.refund_late(session, deal, payment):
        return Outcome.DUPLICATE
    log.warning(
        "vipps: payment %s approved after deal %s stopped waiting; given back", payment_id, deal_id
    )
    return Outcome.APPLIED


def event_payment(event: Event, settings: Settings) -> uuid.UUID | None:
    """Our payment an event is about, if it is for our sales unit and one of ours."""
    if event.msn != settings.vipps_merchant_serial_number:
        return None
    return payment_id_of(event.reference)


# --- the polling fallback -----------------------------------------------------------------

POLL_AFTER = timedelta(minutes=1)  # a webhook usually comes within seconds
POLL_WINDOW = timedelta(days=1)  # Vipps expires an unapproved payment long before this
BATCH = 20


class VippsPollJob(ShortJob):
    """Asks Vipps about our open payments older than ``POLL_AFTER``: a webhook that never came
    (lost, or our endpoint down) does not leave a buyer's approved payment unapplied."""

    name = "vipps-poll"
    every = 60.0

    async def run_once(self) -> int:
        self.more = False
        if not self.settings.vipps_client_id:
            return 0
        now = clock.now()
        async with self.sessionmaker() as session:
            ids = list(
                await session.scalars(
                    select(Payment.id)
                    .where(
                        Payment.provider == "vipps",
                        Payment.status.in_([s.value for s in payments.OPEN]),
                        Payment.created_at < now - POLL_AFTER,
                        Payment.created_at > now - POLL_WINDOW,
                    )
                    .order_by(Payment.created_at)
                    .limit(BATCH)
                )
            )
        client = VippsClient(self.settings)
        done = 0
        for payment_id in ids:
            try:
                found = await client.get(payment_id)
            except (VippsUnavailable, ProviderError) as exc:
                log.warning("vipps: polling payment %s failed: %r", payment_id, exc)
                continue
            if found is None or found.state not in SETTLES:
                continue
            async with self.sessionmaker() as session, session.begin():
                await apply(session, self.settings, payment_id, found.state, found)
            done += 1
        return done
