"""What every browser login of ours shares (the back office's operators, the developer
portal's members): one-time links and sessions as random 256-bit tokens stored only as their
SHA-256, a session's idle and absolute timeouts, and the "fresh login" a sensitive action asks
for. The consoles keep their own tables (who is logged in differs), built from these columns.

The timeouts are the deployment's ``DEALBROKER_OPERATOR_*`` settings, the same for both.
"""

from datetime import datetime, timedelta
from typing import Any, Protocol

from email_validator import EmailNotValidError, validate_email
from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core import clock
from dealbroker.core.errors import BadRequest
from dealbroker.core.security import hash_token, new_token
from dealbroker.core.settings import Settings
from dealbroker.core.types import UTCDateTime

# A token longer than this is no token of ours: refused before it is hashed or looked up.
MAX_TOKEN = 100
# The longest e-mail address a console takes for a person (RFC 5321's limit on a path).
MAX_EMAIL = 254


def checked_email(email: str) -> str:
    """``email``, an address a console is given for a person, normalised; BadRequest saying
    why when it is none."""
    if len(email) > MAX_EMAIL:
        raise BadRequest(f"the e-mail address is longer than {MAX_EMAIL} characters")
    try:
        return validate_email(email, check_deliverability=False).normalized
    except EmailNotValidError as exc:
        raise BadRequest(f"not an e-mail address: {exc}") from None


class LinkColumns:
    """A one-time login link: valid until ``expires_at``, used once (``used_at``)."""

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class SessionColumns:
    """A logged-in browser. ``authenticated_at`` is when the person last proved who they are
    (a sensitive action asks for a recent one); ``last_seen_at`` drives the idle timeout and
    ``expires_at`` is the absolute end, whatever the activity."""

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    authenticated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # How the person logged in: "link" or "oidc".
    method: Mapped[str] = mapped_column(String(10))


class _Link(Protocol):
    expires_at: datetime
    used_at: datetime | None


class _Session(Protocol):
    last_seen_at: datetime
    expires_at: datetime


def new_link(settings: Settings) -> tuple[str, dict[str, Any]]:
    """A link's token (for the URL only) and the columns of its row (its hash, its times)."""
    token = new_token()
    now = clock.now()
    expires = now + timedelta(minutes=settings.operator_link_minutes)
    return token, {"token_hash": hash_token(token), "created_at": now, "expires_at": expires}


def link_hash(token: str) -> str | None:
    """The hash to look a link or session up by; None for a token too long to be ours."""
    if not token or len(token) > MAX_TOKEN:
        return None
    return hash_token(token)


def redeem(link: _Link | None) -> bool:
    """Use ``link`` up if it can still be used (not used before, not expired); whether it
    could. The row must have been read ``FOR UPDATE``: two browsers cannot both use it."""
    now = clock.now()
    if link is None or link.used_at is not None or link.expires_at <= now:
        return False
    link.used_at = now
    return True


def new_session(method: str, settings: Settings) -> tuple[str, dict[str, Any]]:
    """A session's token (for the cookie only) and the columns of its row."""
    token = new_token()
    now = clock.now()
    return token, {
        "token_hash": hash_token(token),
        "created_at": now,
        "last_seen_at": now,
        "authenticated_at": now,
        "expires_at": now + timedelta(hours=settings.operator_session_hours),
        "method": method,
    }


def resume(row: _Session, settings: Settings) -> bool:
    """Whether the session is still valid (neither idle too long nor past its end); a valid
    one's idle clock restarts."""
    now = clock.now()
    idle = timedelta(minutes=settings.operator_idle_minutes)
    if row.expires_at <= now or row.last_seen_at + idle <= now:
        return False
    row.last_seen_at = now
    return True


def is_fresh(authenticated_at: datetime, settings: Settings) -> bool:
    """Whether a login at ``authenticated_at`` is recent enough for a sensitive action."""
    age = clock.now() - authenticated_at
    return age <= timedelta(minutes=settings.operator_fresh_login_minutes)
