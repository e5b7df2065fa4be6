"""OpenID Connect login for operators against the issuer in ``DEALBROKER_OIDC_ISSUER``; the
protocol itself (discovery, PKCE, state, nonce, the ID token's validation) is
``core.oidc``'s, shared with the parties' eID signing. The operator is the ID token's
verified e-mail address.

The developer portal logs its members in through this same layer, with its own callback
(``callback``: the path the issuer sends the browser back to)."""

from typing import Any

from dealbroker.core import oidc
from dealbroker.core.oidc import OidcRefused, Pending
from dealbroker.core.settings import Settings

__all__ = [
    "CALLBACK_PATH",
    "OidcRefused",
    "Pending",
    "enabled",
    "finish",
    "start",
    "validate_id_token",
]

CALLBACK_PATH = "/back-office/login/oidc/callback"


def enabled(settings: Settings) -> bool:
    return bool(settings.oidc_issuer and settings.oidc_client_id)


def _client(settings: Settings, callback: str = CALLBACK_PATH) -> oidc.Client:
    return oidc.Client(
        issuer=settings.oidc_issuer,
        client_id=settings.oidc_client_id,
        client_secret=settings.oidc_client_secret.get_secret_value(),
        scope="openid email",
        redirect_uri=settings.base_url + callback,
    )


async def start(settings: Settings, callback: str = CALLBACK_PATH) -> tuple[str, Pending]:
    """The issuer's authorization URL to send the browser to, and what to keep for its
    return."""
    pending = Pending.new()
    return await oidc.start(_client(settings, callback), pending), pending


async def finish(
    settings: Settings,
    pending: Pending | None,
    code: str,
    state: str,
    callback: str = CALLBACK_PATH,
) -> str:
    """The e-mail address the issuer vouches for, once the browser is back with ``code``."""
    return _email(await oidc.finish(_client(settings, callback), pending, code, state))


def validate_id_token(
    settings: Settings,
    metadata: dict[str, Any],
    jwks: dict[str, Any],
    id_token: str,
    nonce: str,
    token: dict[str, Any],
) -> str:
    """The verified e-mail of ``id_token`` (see ``core.oidc.validate_id_token``)."""
    claims = oidc.validate_id_token(_client(settings), metadata, jwks, id_token, nonce, token)
    return _email(claims)


def _email(claims: dict[str, Any]) -> str:
    email = claims.get("email")
    if not isinstance(email, str) or not email:
        raise OidcRefused("the ID token has no email claim")
    if claims.get("email_verified") is False:
        raise OidcRefused("the issuer has not verified the e-mail address")
    return email
