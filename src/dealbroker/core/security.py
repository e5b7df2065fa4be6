"""Random secrets and their hashes: client secrets, access tokens, capability links.

Everything hashed here is a high-entropy random value (>= 256 bits), so one SHA-256 is as safe
as a slow password hash and keeps the token check off the hot path's CPU budget.
"""

import base64
import hashlib
import hmac
import secrets

TOKEN_BYTES = 32  # 256 bits


def new_token(prefix: str = "") -> str:
    """A URL-safe random token of 256 bits, with an optional readable prefix."""
    return prefix + secrets.token_urlsafe(TOKEN_BYTES)


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and the base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(TOKEN_BYTES)).decode()


def hash_token(token: str) -> str:
    """The hex SHA-256 under which a token is stored and looked up."""
    return hashlib.sha256(token.encode()).hexdigest()


def verify_secret(given: str, stored_hash: str) -> bool:
    """Whether ``given`` is the secret stored as ``stored_hash`` (by ``hash_token``), compared in
    constant time."""
    return same_secret(hash_token(given), stored_hash)


def same_secret(given: str, expected: str) -> bool:
    """Constant-time comparison of two secrets."""
    return hmac.compare_digest(given.encode(), expected.encode())


def sign(key: str, message: str) -> str:
    """A URL-safe HMAC-SHA256 of ``message`` under ``key`` (unpadded base64)."""
    digest = hmac.new(key.encode(), message.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
