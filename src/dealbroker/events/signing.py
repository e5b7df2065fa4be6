"""Webhook signatures per the Standard Webhooks specification, with the integration's secret.

``webhook-id`` is the event id on every attempt (receivers deduplicate on it);
``webhook-timestamp`` is the attempt's time; ``webhook-signature`` is ``v1,<base64 HMAC-SHA256>``
of ``id.timestamp.body``. Any Standard Webhooks library verifies it.
"""

from datetime import datetime
from functools import lru_cache

from standardwebhooks.webhooks import Webhook


@lru_cache(maxsize=1024)
def _signer(secret: str) -> Webhook:
    return Webhook(secret)


def signed_headers(secret: str, event_id: str, at: datetime, payload: str) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "user-agent": "dealbroker-webhooks/1",
        "webhook-id": event_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": _signer(secret).sign(event_id, at, payload),
    }
