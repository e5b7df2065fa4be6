"""The OAuth2 token response (RFC 6749 section 5.1) and error body (section 5.2)."""

from pydantic import BaseModel

from dealbroker.core.validation import examples


class TokenResponse(BaseModel):
    model_config = examples(
        {
            "access_token": "Vx3…q8",
            "token_type": "Bearer",
            "expires_in": 3600,
            "scope": "deals:read deals:write",
        }
    )

    access_token: str
    token_type: str
    expires_in: int
    scope: str


class OAuthErrorBody(BaseModel):
    error: str
    error_description: str
