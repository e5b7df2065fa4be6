"""``POST /oauth2/token``: the client credentials grant."""

import base64
import binascii
from urllib.parse import unquote_plus

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from dealbroker.auth.dependencies import SCOPES
from dealbroker.auth.lockout import Refused
from dealbroker.auth.schemas import OAuthErrorBody, TokenResponse
from dealbroker.auth.service import OAuthError, issue_token
from dealbroker.core import callers
from dealbroker.core.db import Session
from dealbroker.core.validation import examples, holds_nul

router = APIRouter(tags=["Authentication"])
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def oauth_error_response(exc: OAuthError) -> Response:
    headers = dict(NO_STORE)
    if exc.status == 401:
        headers["WWW-Authenticate"] = 'Basic realm="dealbroker", charset="UTF-8"'
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    body = {"error": exc.error, "error_description": exc.description}
    return Response(
        orjson.dumps(body), status_code=exc.status, media_type="application/json", headers=headers
    )


def _basic_credentials(header: str) -> tuple[str, str]:
    scheme, _sep, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise OAuthError(401, "invalid_client", "Client authentication must use HTTP Basic.")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise OAuthError(401, "invalid_client", "Malformed Basic credentials.") from exc
    client_id, sep, secret = decoded.partition(":")
    # RFC 6749 section 2.3.1: both parts are form-encoded before Basic encoding.
    client_id, secret = unquote_plus(client_id), unquote_plus(secret)
    if not sep or holds_nul(client_id, secret):
        raise OAuthError(401, "invalid_client", "Malformed Basic credentials.")
    return client_id, secret


_FORM_BODY = {
    "required": True,
    "content": {
        "application/x-www-form-urlencoded": {
            "schema": {
                "type": "object",
                "required": ["grant_type"],
                "properties": {
                    "grant_type": {"type": "string", "enum": ["client_credentials"]},
                    "scope": {
                        "type": "string",
                        "description": "Space-separated subset of the client's scopes.",
                    },
                    "client_id": {
                        "type": "string",
                        "description": "Only when not using HTTP Basic.",
                    },
                    "client_secret": {
                        "type": "string",
                        "description": "Only when not using HTTP Basic.",
                    },
                },
            },
            "example": {"grant_type": "client_credentials"},
        }
    },
}


def _oauth_error(status: int, error: str, description: str) -> dict:  # type: ignore[type-arg]
    return {
        "description": description,
        "model": OAuthErrorBody,
        "content": {
            "application/json": {"example": {"error": error, "error_description": description}}
        },
    }


@router.post(
    "/oauth2/token",
    operation_id="issue_token",
    summary="Issue an access token (OAuth 2.0 client credentials)",
    description=(
        "Authenticate with HTTP Basic `client_id:client_secret` (or `client_id` and "
        "`client_secret` form fields) and send `grant_type=client_credentials`. The token is "
        "opaque; send it as `Authorization: Bearer <token>`. Errors follow RFC 6749 section 5.2."
    ),
    response_model=TokenResponse,
    # HTTP Basic, or (the empty alternative) client_id and client_secret in the form.
    openapi_extra={"requestBody": _FORM_BODY, "security": [{"ClientSecretBasic": []}, {}]},
    responses={
        400: _oauth_error(
            400, "unsupported_grant_type", "Only grant_type=client_credentials is supported."
        ),
        401: _oauth_error(401, "invalid_client", "Client authentication failed."),
        429: {
            **_oauth_error(
                429,
                "temporarily_unavailable",
                "Too many failed attempts for this client; try again in 42 seconds.",
            ),
            "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
        },
    },
)
async def token(request: Request, session: Session) -> Response:
    try:
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise OAuthError(
                400, "invalid_request", "The body must be application/x-www-form-urlencoded."
            )
        form = await request.form()
        # RFC 6749 section 3.1: a parameter sent without a value is treated as omitted.
        items = [(k, str(v)) for k, v in form.multi_items() if str(v) != ""]
        if any(holds_nul(k, v) for k, v in items):
            raise OAuthError(400, "invalid_request", "A parameter holds a NUL character.")
        fields = dict(items)
        if len(fields) != len(items):
            raise OAuthError(400, "invalid_request", "A parameter was sent more than once.")
        header = request.headers.get("authorization")
        if header and "client_secret" in fields:
            raise OAuthError(
                400, "invalid_request", "Use one client authentication method, not two."
            )
        if header:
            client_id, secret = _basic_credentials(header)
            # RFC 6749 2.3.1 lets a client repeat its id in the form beside Basic (some
            # libraries do, e.g. requests-oauthlib with include_client_id); it must match.
            if fields.get("client_id", client_id) != client_id:
                raise OAuthError(
                    400, "invalid_request", "client_id in the form differs from the Basic one."
                )
        elif "client_id" in fields and "client_secret" in fields:
            client_id, secret = fields["client_id"], fields["client_secret"]
        else:
            raise OAuthError(401, "invalid_client", "Client credentials are missing.")
        # The request log's: the integration with this client id, if any, sees the request.
        callers.identify_client(request.scope, client_id)
        grant_type = fields.get("grant_type")
        if grant_type is None:
            raise OAuthError(400, "invalid_request", "grant_type is required.")
        if grant_type != "client_credentials":
            raise OAuthError(
                400, "unsupported_grant_type", "Only grant_type=client_credentials is supported."
            )
        settings = request.app.state.settings
        source = request.client.host if request.client else "unknown"
        try:
            attempt = await request.app.state.token_guard.admit(
                client_id,
                source,
                settings.rate_limit_token_failures_per_minute,
                settings.rate_limit_token_failures_per_client_per_minute,
            )
        except Refused as refused:
            request.app.state.refusals.note(refused.limit, client_id)
            raise
        try:
            issued = await issue_token(
                session, client_id, secret, fields.get("scope"), settings.token_lifetime_seconds
            )
        except OAuthError as exc:
            if exc.error != "invalid_client":
                attempt.not_a_guess()
            raise
        except BaseException:
            attempt.not_a_guess()
            raise
        attempt.succeeded()
    except OAuthError as exc:
        return oauth_error_response(exc)
    body = {
        "access_token": issued.access_token,
        "token_type": "Bearer",
        "expires_in": issued.expires_in,
        "scope": issued.scope,
    }
    return Response(orjson.dumps(body), media_type="application/json", headers=NO_STORE)


class ServerMetadata(BaseModel):
    """OAuth 2.0 Authorization Server Metadata (RFC 8414), for clients that discover."""

    model_config = examples(
        {
            "issuer": "https://deals.example.com",
            "token_endpoint": "https://deals.example.com/oauth2/token",
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": [
                "client_secret_basic",
                "client_secret_post",
            ],
            "scopes_supported": ["deals:read", "deals:write"],
            "response_types_supported": [],
        }
    )
    issuer: str
    token_endpoint: str
    grant_types_supported: list[str]
    token_endpoint_auth_methods_supported: list[str]
    scopes_supported: list[str]
    response_types_supported: list[str]


@router.get(
    "/.well-known/oauth-authorization-server",
    operation_id="oauth_authorization_server_metadata",
    summary="OAuth 2.0 Authorization Server Metadata (RFC 8414)",
    description="Where to get a token and how: client credentials only, with HTTP Basic or "
    "form credentials. No authorization endpoint (there is no user to ask), so no response "
    "types.",
    response_model=ServerMetadata,
)
async def server_metadata(request: Request) -> Response:
    base = request.app.state.settings.base_url
    body = {
        "issuer": base,
        "token_endpoint": f"{base}/oauth2/token",
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": sorted(SCOPES),
        "response_types_supported": [],
    }
    return Response(orjson.dumps(body), media_type="application/json")
