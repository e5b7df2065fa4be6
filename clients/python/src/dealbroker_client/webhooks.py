"""Verifying webhook deliveries (Standard Webhooks) into typed events.

A delivery carries ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` headers;
the signature is ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` under the integration's
``whsec_`` secret, one per valid secret (two while a rotated secret's overlap lasts). The
HMAC comes from the ``standardwebhooks`` library; the timestamp tolerance is configurable here
(the library fixes it at five minutes). ``signed_headers`` makes those headers, as the service
does for a delivery (the command line's ``listen`` forwards events with them).
"""

import base64
import binascii
import hmac
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError
from standardwebhooks.webhooks import Webhook

from dealbroker_client.errors import WebhookVerificationError
from dealbroker_client.models import Event, parse_event

DEFAULT_TOLERANCE = timedelta(minutes=5)


class WebhookVerifier:
    """Checks deliveries against one or more webhook secrets (pass the old and the new one
    while you deploy a rotated secret)."""

    def __init__(
        self, secrets: str | Iterable[str], *, tolerance: timedelta = DEFAULT_TOLERANCE
    ) -> None:
        values = [secrets] if isinstance(secrets, str) else list(secrets)
        if not values:
            raise ValueError("at least one webhook secret is needed")
        try:
            self._signers = [Webhook(s) for s in values]
        except Exception as exc:  # binascii.Error, EmptyWebhookSecretError, RuntimeError
            raise ValueError("a webhook secret is not valid (expected whsec_<base64>)") from exc
        self.tolerance = tolerance

    def verify(self, body: bytes | str, headers: Mapping[str, str]) -> Event:
        """The delivery's event, typed by its kind, once its signature and timestamp check out.

        Raises ``WebhookVerificationError`` for a missing header, a timestamp outside the
        tolerance, a signature that matches no secret, or a body that is not an event.
        """
        lowered = {k.lower(): v for k, v in headers.items()}
        msg_id = lowered.get("webhook-id")
        stamp = lowered.get("webhook-timestamp")
        signatures = lowered.get("webhook-signature")
        if not (msg_id and stamp and signatures):
            raise WebhookVerificationError("missing webhook-id, -timestamp or -signature header")
        try:
            seconds = int(stamp)
        except ValueError as exc:
            raise WebhookVerificationError("webhook-timestamp is not an integer") from exc
        if abs(time.time() - seconds) > self.tolerance.total_seconds():
            raise WebhookVerificationError("webhook-timestamp is outside the tolerance")
        text = body.decode() if isinstance(body, bytes) else body
        at = datetime.fromtimestamp(seconds, tz=UTC)
        expected = [
            base64.b64decode(s.sign(msg_id, at, text).split(",", 1)[1]) for s in self._signers
        ]
        if not any(_matches(given, expected) for given in signatures.split()):
            raise WebhookVerificationError("no signature matches")
        try:
            event = parse_event(text)
        except ValidationError as exc:
            raise WebhookVerificationError(f"the body is not a valid event: {exc}") from exc
        if str(event.id) != msg_id:
            raise WebhookVerificationError("webhook-id differs from the event's id")
        return event


def _matches(given: str, expected: list[bytes]) -> bool:
    version, _, encoded = given.partition(",")
    if version != "v1":
        return False
    try:
        signature = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        return False
    return any(hmac.compare_digest(signature, e) for e in expected)


def verify_webhook(
    body: bytes | str,
    headers: Mapping[str, str],
    secret: str | Iterable[str],
    *,
    tolerance: timedelta = DEFAULT_TOLERANCE,
) -> Event:
    """One-shot ``WebhookVerifier(secret, tolerance=...).verify(body, headers)``."""
    return WebhookVerifier(secret, tolerance=tolerance).verify(body, headers)


def signed_headers(
    secrets: str | Iterable[str], event_id: str, payload: str, *, at: datetime | None = None
) -> dict[str, str]:
    """The headers of a delivery of ``payload`` (the event's JSON) signed as the service signs
    one: ``webhook-signature`` lists one ``v1,<sig>`` per secret (the old and the new one during
    a rotation), so ``WebhookVerifier`` (or any Standard Webhooks library) verifies it."""
    values = [secrets] if isinstance(secrets, str) else list(secrets)
    if not values:
        raise ValueError("at least one webhook secret is needed")
    moment = at or datetime.now(UTC)
    try:
        signatures = [Webhook(s).sign(event_id, moment, payload) for s in values]
    except Exception as exc:  # binascii.Error, EmptyWebhookSecretError, RuntimeError
        raise ValueError("a webhook secret is not valid (expected whsec_<base64>)") from exc
    return {
        "content-type": "application/json",
        "webhook-id": event_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": " ".join(signatures),
    }
