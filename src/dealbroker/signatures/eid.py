"""Signing with eID through an OpenID Connect issuer (``DEALBROKER_EID_*``): what binds a
flow to the deal's terms, what is kept of the verified claims (the ID token's, completed from
userinfo when it lacks the person's), and the issuer's client.

The flow's ``nonce`` is a hash of the deal's terms (item, price, delivery, both parties) and the
flow's random salt, computed again from the deal when the browser comes back: an ID token got
for other terms (the deal changed meanwhile, or a token from another flow) does not verify.
A flow not back within ``eid_flow_minutes`` is Failed when it comes back (checked at the
callback); a flow never back is failed by the worker's ``eid-timeouts`` job once that time has
passed (``parties.fail_abandoned_eid``), or when the same party starts another.
"""

import base64
import hashlib
import hmac
import json
import secrets
from datetime import UTC, date, datetime, timedelta
from typing import Any

from dealbroker.core import oidc
from dealbroker.core.settings import Settings
from dealbroker.deals.models import Deal
from dealbroker.signatures.models import EidSignature

CALLBACK_PATH = "/eid/callback"


def client(settings: Settings) -> oidc.Client:
    return oidc.Client(
        issuer=settings.eid_issuer,
        client_id=settings.eid_client_id,
        client_secret=settings.eid_client_secret.get_secret_value(),
        scope=settings.eid_scopes,
        redirect_uri=settings.base_url + CALLBACK_PATH,
        acr_values=settings.eid_acr_values,
        userinfo=settings.eid_userinfo,
    )


def complete(claims: dict[str, Any], settings: Settings) -> bool:
    """Whether verified claims hold all the evidence keeps of the person (a name, the birth
    date, the national identity number); when not, the userinfo endpoint is read for the rest."""
    named = any(claims.get(k) for k in ("name", "given_name", "family_name"))
    return named and bool(claims.get("birthdate") and claims.get(settings.eid_national_id_claim))


def new_salt() -> str:
    return secrets.token_hex(16)


def terms(deal: Deal) -> dict[str, Any]:
    """What a signature agrees to."""
    return {
        "deal": str(deal.id),
        "item": deal.name,
        "description": deal.description,
        "price": deal.price_minor,
        "currency": deal.currency,
        "delivery": deal.shipping_type,
        "package": deal.package_type,
        "seller": str(deal.seller_user_id) if deal.seller_user_id else None,
        "buyer": str(deal.buyer_user_id) if deal.buyer_user_id else None,
    }


def nonce(deal: Deal, salt: str) -> str:
    canonical = json.dumps([salt, terms(deal)], sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


def timed_out(flow: EidSignature, now: datetime, settings: Settings) -> bool:
    return now - flow.started_at > timedelta(minutes=settings.eid_flow_minutes)


def keep_evidence(flow: EidSignature, claims: dict[str, Any], settings: Settings) -> None:
    """What the signature keeps of the verified claims: the least that proves who signed."""
    flow.issuer = str(claims.get("iss", ""))[:500]
    flow.subject = str(claims.get("sub", ""))[:300]
    flow.acr = str(claims["acr"])[:200] if claims.get("acr") else None
    flow.token_id = str(claims["jti"])[:300] if claims.get("jti") else None
    issued = claims.get("iat")
    flow.token_issued_at = datetime.fromtimestamp(issued, UTC) if isinstance(issued, int) else None
    flow.name = _name(claims)
    flow.birthdate = _birthdate(claims.get("birthdate"))
    number = claims.get(settings.eid_national_id_claim)
    flow.national_id_hash = _keyed_hash(str(number), settings) if number else None


def same_person(signed: EidSignature, now: EidSignature) -> bool:
    """Whether two verified tokens name the same person: the same issuer's same subject, or
    (across subjects, e.g. another eID at the same broker) the same national identity number."""
    if signed.issuer == now.issuer and signed.subject and signed.subject == now.subject:
        return True
    return bool(signed.national_id_hash) and signed.national_id_hash == now.national_id_hash


def _name(claims: dict[str, Any]) -> str | None:
    name = claims.get("name")
    if not name:
        name = " ".join(str(claims[k]) for k in ("given_name", "family_name") if claims.get(k))
    return str(name)[:300] or None


def _birthdate(value: object) -> date | None:
    try:
        return date.fromisoformat(str(value)) if value else None
    except ValueError:
        return None


def _keyed_hash(value: str, settings: Settings) -> str:
    # Keyed by the deployment's secret: equal numbers match within it, and a leaked table does
    # not give the numbers by hashing every possible one.
    key = (settings.secret_key or "dealbroker-sandbox").encode()
    return hmac.new(key, value.encode(), hashlib.sha256).hexdigest()
