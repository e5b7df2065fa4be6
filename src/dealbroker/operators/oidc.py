"""OpenID Connect login for operators: authorization code with PKCE (S256), ``state`` and
``nonce``, against the issuer in ``DEALBROKER_OIDC_ISSUER`` (discovered through its
``.well-known/openid-configuration``).

authlib builds the requests and validates the ID token (signature against the issuer's JWKS,
``iss``, ``aud``, ``exp``, ``iat``, ``nonce``, ``at_hash``); nothing here parses a JWT by hand.
The discovery document and the JWKS are read at every login: a login is rare, and a rotated
key is then never missed (nor a removed one still trusted).
"""

from dataclasses import dataclass
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.jose import JsonWebKey, JsonWebToken
from authlib.jose.errors import JoseError
from authlib.oauth2.rfc6749.errors import OAuth2Error
from authlib.oidc.core import CodeIDToken
from joserfc.errors import JoseError as ClaimsError  # what authlib's claim checks raise

from dealbroker.core import clock
from dealbroker.core.settings import Settings

CALLBACK_PATH = "/back-office/login/oidc/callback"
MAX_DOCUMENT = 256 * 1024  # a discovery document or JWKS larger than this is refused
TIMEOUT = 10.0
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"]
LEEWAY_SECONDS = 60  # clocks differ a little between us and the issuer


class OidcRefused(Exception):
    """The login did not prove who the operator is; ``reason`` is for the log, not the page."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Pending:
    """What the browser keeps between the redirect to the issuer and its return (a cookie)."""

    state: str
    nonce: str
    verifier: str

    def cookie(self) -> str:
        return f"{self.state}.{self.nonce}.{self.verifier}"

    @classmethod
    def from_cookie(cls, value: str) -> "Pending | None":
        parts = value.split(".") if len(value) <= 400 else []
        return cls(*parts) if len(parts) == 3 and all(parts) else None


def enabled(settings: Settings) -> bool:
    return bool(settings.oidc_issuer and settings.oidc_client_id)


def _client(settings: Settings) -> AsyncOAuth2Client:
    return AsyncOAuth2Client(
        client_id=settings.oidc_client_id,
        client_secret=settings.oidc_client_secret.get_secret_value(),
        scope="openid email",
        redirect_uri=settings.base_url + CALLBACK_PATH,
        code_challenge_method="S256",
        timeout=TIMEOUT,
    )


async def _json(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """A small JSON document from the issuer, bounded before it is parsed."""
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise OidcRefused(f"{url} answered {response.status_code}")
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT:
                    raise OidcRefused(f"{url} is larger than {MAX_DOCUMENT} bytes")
    except httpx.HTTPError as exc:
        raise OidcRefused(f"{url} unreachable: {type(exc).__name__}") from None
    try:
        document = httpx.Response(200, content=body).json()
    except ValueError:
        raise OidcRefused(f"{url} is not JSON") from None
    if not isinstance(document, dict):
        raise OidcRefused(f"{url} is not a JSON object")
    return document


async def _metadata(client: httpx.AsyncClient, settings: Settings) -> dict[str, Any]:
    issuer = settings.oidc_issuer.rstrip("/")
    metadata = await _json(client, issuer + "/.well-known/openid-configuration")
    if str(metadata.get("issuer", "")).rstrip("/") != issuer:
        raise OidcRefused("the discovery document names another issuer")
    for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(metadata.get(key), str):
            raise OidcRefused(f"the discovery document has no {key}")
    return metadata


async def start(settings: Settings) -> tuple[str, Pending]:
    """The issuer's authorization URL to send the browser to, and what to keep for its
    return."""
    pending = Pending(generate_token(43), generate_token(43), generate_token(64))
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        metadata = await _metadata(http, settings)
    async with _client(settings) as client:
        url, _state = client.create_authorization_url(
            metadata["authorization_endpoint"],
            state=pending.state,
            nonce=pending.nonce,
            code_verifier=pending.verifier,
        )
    return url, pending


async def finish(settings: Settings, pending: Pending | None, code: str, state: str) -> str:
    """The e-mail address the issuer vouches for, once the browser is back with ``code``: the
    state matched, the code exchanged (with the PKCE verifier) and the ID token validated."""
    if pending is None or not state or state != pending.state:
        raise OidcRefused("state missing or not this browser's")
    if not code or len(code) > 2000:
        raise OidcRefused("no usable code")
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        metadata = await _metadata(http, settings)
        async with _client(settings) as client:
            try:
                token = await client.fetch_token(
                    metadata["token_endpoint"], code=code, code_verifier=pending.verifier
                )
            except (OAuth2Error, OAuthError, httpx.HTTPError) as exc:
                raise OidcRefused(f"the code was not accepted: {exc}") from None
        jwks = await _json(http, metadata["jwks_uri"])
    id_token = token.get("id_token")
    if not isinstance(id_token, str):
        raise OidcRefused("no ID token")
    return validate_id_token(settings, metadata, jwks, id_token, pending.nonce, token)


def validate_id_token(
    settings: Settings,
    metadata: dict[str, Any],
    jwks: dict[str, Any],
    id_token: str,
    nonce: str,
    token: dict[str, Any],
) -> str:
    """The verified e-mail of ``id_token``, validated by authlib against the issuer's keys, our
    client id, our nonce and our clock."""
    try:
        keys = JsonWebKey.import_key_set(jwks)
        claims = JsonWebToken(ALGORITHMS).decode(
            id_token,
            keys,
            claims_cls=CodeIDToken,
            claims_options={
                "iss": {"essential": True, "value": metadata["issuer"]},
                "aud": {"essential": True, "value": settings.oidc_client_id},
                "nonce": {"essential": True},
            },
            claims_params={
                "nonce": nonce,
                "client_id": settings.oidc_client_id,
                "access_token": token.get("access_token"),
            },
        )
        claims.validate(now=int(clock.now().timestamp()), leeway=LEEWAY_SECONDS)
    except (JoseError, ClaimsError, ValueError) as exc:
        raise OidcRefused(f"ID token refused: {exc}") from None
    email = claims.get("email")
    if not isinstance(email, str) or not email:
        raise OidcRefused("the ID token has no email claim")
    if claims.get("email_verified") is False:
        raise OidcRefused("the issuer has not verified the e-mail address")
    return email
