"""Webhook signatures per the Standard Webhooks specification, with the integration's secret.

``webhook-id`` is the event id on every attempt (receivers deduplicate on it);
``webhook-timestamp`` is the attempt's time; ``webhook-signature`` is ``v1,<base64 HMAC-SHA256>``
of ``id.timestamp.body`` (one per valid secret: two while a rotated secret's overlap lasts).
Any Standard Webhooks library verifies it (the tests check with ``standardwebhooks``, whose
``Webhook`` these signatures match byte for byte).
"""

import base64
import hmac
from datetime import datetime
from functools import lru_cache

from standardwebhooks.webhooks import Webhook


@lru_cache(maxsize=1024)
def _key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret, decoded as ``standardwebhooks`` decodes it, once per
    secret (bounded: the integrations whose webhooks are being sent)."""
    return Webhook(secret)._whsecret


def signature(key: bytes, to_sign: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>``: OpenSSL's one-shot HMAC (``hmac.digest``), not an ``hmac.HMAC``
    object per call as ``Webhook.sign`` makes, which is most of that signing's cost."""
    return "v1," + base64.b64encode(hmac.digest(key, to_sign, "sha256")).decode("ascii")


def signed_headers(secrets: list[str], event_id: str, at: datetime, payload: str) -> dict[str, str]:
    """The headers of a delivery signed with each of ``secrets`` (two during a secret rotation's
    overlap): ``webhook-signature`` lists one ``v1,<sig>`` per secret, space-separated, as
    Standard Webhooks allows, so a receiver verifies with either its old or its new secret."""
    timestamp = str(int(at.timestamp()))
    to_sign = f"{event_id}.{timestamp}.{payload}".encode()
    if len(secrets) == 1:
        signed = signature(_key(secrets[0]), to_sign)
    else:
        signed = " ".join(signature(_key(s), to_sign) for s in secrets)
    return {
        "content-type": "application/json",
        "user-agent": "dealbroker-webhooks/1",
        "webhook-id": event_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": signed,
    }
