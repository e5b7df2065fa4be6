"""Webhook signatures per the Standard Webhooks specification, with the integration's secret.

``webhook-id`` is the event id on every attempt (receivers deduplicate on it);
``webhook-timestamp`` is the attempt's time; ``webhook-signature`` is ``v1,<base64 HMAC-SHA256>``
of ``id.timestamp.body`` (one per valid secret: two while a rotated secret's overlap lasts).
Any Standard Webhooks library verifies it.
"""

from datetime import datetime
from functools import lru_cache

from standardwebhooks.webhooks import Webhook


@lru_cache(maxsize=1024)
def _signer(secret: str) -> Webhook:
    return Webhook(secret)


def signed_headers(secrets: list[str], event_id: str, at: datetime, payload: str) -> dict[str, str]:
    """The headers of a delivery signed with each of ``secrets`` (two during a secret rotation's
    overlap): ``webhook-signature`` lists one ``v1,<sig>`` per secret, space-separated, as
    Standard Webhooks allows, so a receiver verifies with either its old or its new secret."""
    return {
        "content-type": "application/json",
        "user-agent": "dealbroker-webhooks/1",
        "webhook-id": event_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": " ".join(_signer(s).sign(event_id, at, payload) for s in secrets),
    }
