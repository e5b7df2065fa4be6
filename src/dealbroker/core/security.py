"""Random secrets and their hashes: client secrets, access tokens, capability links.

Everything hashed here is a high-entropy random value (>= 256 bits), so one SHA-256 is as safe
as a slow password hash and keeps the token check off the hot path's CPU budget.
"""

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable

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
    return signer(key)(message)


def signer(key: str) -> Callable[[str], str]:
    """``sign`` under ``key``, with the key's HMAC state made once: each message then costs a
    copy of it, not the key's own two hashes (``core.links`` signs every deal of a list)."""
    keyed = hmac.new(key.encode(), digestmod=hashlib.sha256)

    def sign_message(message: str) -> str:
        mac = keyed.copy()
        mac.update(message.encode())
        return base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()

    return sign_message
