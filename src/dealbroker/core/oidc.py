"""OpenID Connect as a relying party, shared by the operators' login and the parties' eID
signing: discovery, the authorization URL (code flow with PKCE S256, ``state`` and ``nonce``),
the code exchange, the ID token's validation and, when asked for, the userinfo endpoint's claims.

authlib builds the requests and validates the ID token (signature against the issuer's JWKS,
``iss``, ``aud``, ``exp``, ``iat``, ``nonce``, ``at_hash``, and ``acr`` when asked for);
nothing here parses a JWT by hand. The discovery document and the JWKS are read at every flow:
a flow is rare, and a rotated key is then never missed (nor a removed one still trusted).

authlib (and joserfc under it) is imported where a flow needs it, not with this module: every
process imports the deal flows, few ever run a flow, and its import is not small.
"""

import hmac
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

import httpx

from dealbroker.core import clock

if TYPE_CHECKING:
    from authlib.integrations.httpx_client import AsyncOAuth2Client


MAX_DOCUMENT = 256 * 1024  # a discovery document or JWKS larger than this is refused
TIMEOUT = 10.0
# Asymmetric algorithms only: "none" and the HMAC ones (keyed with our own client secret) are
# never accepted.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"]
LEEWAY_SECONDS = 60  # clocks differ a little between us and the issuer


class OidcRefused(Exception):
    """The flow did not prove who the person is; ``reason`` is for the log, not the page."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Client:
    """Our registration at one issuer. ``acr_values`` (space separated), when given, is asked
    for and one of them must be the ID token's ``acr``. ``userinfo`` says when the userinfo
    endpoint is read: "never", "always", or "auto" (when the ID token's claims are not
    complete enough for the caller)."""

    issuer: str
    client_id: str
    client_secret: str
    scope: str
    redirect_uri: str
    acr_values: str = ""
    userinfo: Literal["auto", "always", "never"] = "never"


@dataclass(frozen=True)
class Pending:
    """What is kept between the redirect to the issuer and the browser's return."""

    state: str
    nonce: str
    verifier: str

    def cookie(self) -> str:
        return f"{self.state}.{self.nonce}.{self.verifier}"

    @classmethod
    def from_cookie(cls, value: str) -> "Pending | None":
        parts = value.split(".") if len(value) <= 400 else []
        return cls(*parts) if len(parts) == 3 and all(parts) else None

    @classmethod
    def new(cls, nonce: str | None = None) -> "Pending":
        """A fresh state and PKCE verifier; a random nonce unless the caller binds one."""
        from authlib.common.security import generate_token

        return cls(generate_token(43), nonce or generate_token(43), generate_token(64))


@cache
def _quietly_import_authlib_jose() -> None:
    """Import authlib's httpx client and jose module (once), which announce themselves as
    deprecated (for 2.0) on import: a process would print that on its standard error, which is
    the command line's one-line answer."""
    from authlib.deprecate import AuthlibDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AuthlibDeprecationWarning)
        import authlib.integrations.httpx_client  # noqa: F401
        import authlib.jose  # noqa: F401
        import authlib.jose.errors  # noqa: F401


def _oauth(client: Client) -> "AsyncOAuth2Client":
    _quietly_import_authlib_jose()
    from authlib.integrations.httpx_client import AsyncOAuth2Client

    return AsyncOAuth2Client(
        client_id=client.client_id,
        client_secret=client.client_secret,
        scope=client.scope,
        redirect_uri=client.redirect_uri,
        code_challenge_method="S256",
        timeout=TIMEOUT,
    )


async def _json(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """A small JSON document from the issuer, bounded before it is parsed (``http`` may be the
    authlib client holding the access token, which then goes with the request)."""
    try:
        async with http.stream("GET", url) as response:
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


async def _metadata(http: httpx.AsyncClient, client: Client) -> dict[str, Any]:
    issuer = client.issuer.rstrip("/")
    metadata = await _json(http, issuer + "/.well-known/openid-configuration")
    if str(metadata.get("issuer", "")).rstrip("/") != issuer:
        raise OidcRefused("the discovery document names another issuer")
    for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(metadata.get(key), str):
            raise OidcRefused(f"the discovery document has no {key}")
    return metadata


async def start(client: Client, pending: Pending) -> str:
    """The issuer's authorization URL to send the browser to for ``pending``."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        metadata = await _metadata(http, client)
    extra = {"acr_values": client.acr_values} if client.acr_values else {}
    async with _oauth(client) as oauth:
        url, _state = oauth.create_authorization_url(
            metadata["authorization_endpoint"],
            state=pending.state,
            nonce=pending.nonce,
            code_verifier=pending.verifier,
            **extra,
        )
    return str(url)


async def finish(
    client: Client,
    pending: Pending | None,
    code: str,
    state: str,
    complete: Callable[[dict[str, Any]], bool] = lambda claims: True,
) -> dict[str, Any]:
    """The verified claims, once the browser is back with ``code``: the state matched, the code
    exchanged (with the PKCE verifier) and the ID token validated. With ``client.userinfo``
    "always", or "auto" and ID token claims that ``complete`` finds wanting, the userinfo
    endpoint's claims are added (the ID token's own win), once its ``sub`` is the ID token's."""
    if pending is None or not state or state != pending.state:
        raise OidcRefused("state missing or not this browser's")
    if not code or len(code) > 2000:
        raise OidcRefused("no usable code")
    from authlib.integrations.base_client.errors import OAuthError
    from authlib.oauth2.rfc6749.errors import OAuth2Error

    async with httpx.AsyncClient(timeout=TIMEOUT) as http:
        metadata = await _metadata(http, client)
        async with _oauth(client) as oauth:
            try:
                token = await oauth.fetch_token(
                    metadata["token_endpoint"], code=code, code_verifier=pending.verifier
                )
            except (OAuth2Error, OAuthError, httpx.HTTPError) as exc:
                raise OidcRefused(f"the code was not accepted: {exc}") from None
            jwks = await _json(http, metadata["jwks_uri"])
            id_token = token.get("id_token")
            if not isinstance(id_token, str):
                raise OidcRefused("no ID token")
            claims = validate_id_token(client, metadata, jwks, id_token, pending.nonce, dict(token))
            if client.userinfo == "always" or (client.userinfo == "auto" and not complete(claims)):
                claims = {**await _userinfo(oauth, metadata, claims["sub"]), **claims}
    return claims


async def _userinfo(
    oauth: "AsyncOAuth2Client", metadata: dict[str, Any], sub: str
) -> dict[str, Any]:
    """The userinfo endpoint's claims, read with the access token just got; refused unless
    its ``sub`` is the verified ID token's (OpenID Connect Core 5.3.2: the response may be
    another person's, substituted, and only the ID token is signed)."""
    from authlib.integrations.base_client.errors import OAuthError

    endpoint = metadata.get("userinfo_endpoint")
    if not isinstance(endpoint, str):
        raise OidcRefused("the ID token's claims are not enough and there is no userinfo endpoint")
    if not (oauth.token or {}).get("access_token"):
        raise OidcRefused("no access token for the userinfo endpoint")
    try:
        claims = await _json(oauth, endpoint)
    except OAuthError as exc:  # the access token already expired, say
        raise OidcRefused(f"userinfo not read: {exc}") from None
    if claims.get("sub") != sub:
        raise OidcRefused("the userinfo response is another subject's")
    return claims


def validate_id_token(
    client: Client,
    metadata: dict[str, Any],
    jwks: dict[str, Any],
    id_token: str,
    nonce: str,
    token: dict[str, Any],
) -> dict[str, Any]:
    """The claims of ``id_token``, validated by authlib against the issuer's keys, our client
    id, our nonce, the ``acr`` asked for and our clock."""
    _quietly_import_authlib_jose()
    from authlib.jose import JsonWebKey, JsonWebToken
    from authlib.jose.errors import JoseError
    from authlib.oidc.core import CodeIDToken
    from joserfc.errors import JoseError as ClaimsError  # what authlib's claim checks raise

    options: dict[str, Any] = {
        "iss": {"essential": True, "value": metadata["issuer"]},
        "aud": {"essential": True, "value": client.client_id},
        "nonce": {"essential": True},
    }
    if client.acr_values:
        options["acr"] = {"essential": True, "values": client.acr_values.split()}
    try:
        keys = JsonWebKey.import_key_set(jwks)
        claims = JsonWebToken(ALGORITHMS).decode(
            id_token,
            keys,
            claims_cls=CodeIDToken,
            claims_options=options,
            claims_params={
                "nonce": nonce,
                "client_id": client.client_id,
                "access_token": token.get("access_token"),
            },
        )
        claims.validate(now=int(clock.now().timestamp()), leeway=LEEWAY_SECONDS)
    except (JoseError, ClaimsError, ValueError) as exc:
        raise OidcRefused(f"ID token refused: {exc}") from None
    return bound(dict(claims), nonce)


def bound(claims: dict[str, Any], nonce: str) -> dict[str, Any]:
    """``claims``, once their ``nonce`` is the one this login or signing was started with;
    refused otherwise. (authlib checks it too; this is the check every issuer's answer goes
    through, the sandbox's simulated eID's included.)"""
    if not isinstance(claims.get("nonce"), str) or not hmac.compare_digest(claims["nonce"], nonce):
        raise OidcRefused("ID token refused: invalid_claim: Invalid claim 'nonce'")
    return claims
