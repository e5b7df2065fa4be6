"""The integration: the tenant, a marketplace backend with its credentials."""

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Boolean, ForeignKey, Index, Integer, SmallInteger, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime

ALL_SCOPES = ("deals:read", "deals:write")


class Integration(Base):
    __tablename__ = "integrations"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    client_id: Mapped[str] = mapped_column(String(64), unique=True)
    # SHA-256 of the client secret; the secret itself is shown once and never stored.
    client_secret_hash: Mapped[str] = mapped_column(String(64))
    # Kept in the clear: it keys the HMAC that signs every webhook, so it must be readable.
    webhook_secret: Mapped[str] = mapped_column(String(100))
    # SHA-256 of the webhook secret: the sandbox triggers find the integration by it.
    webhook_secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The secret the last rotation replaced, kept the same two ways until its overlap window
    # ends: deliveries carry a second signature under it, and the triggers still accept it.
    previous_webhook_secret: Mapped[str | None] = mapped_column(String(100))
    previous_webhook_secret_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    previous_webhook_secret_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    scopes: Mapped[str] = mapped_column(String(200))
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    # Sandbox only: how far this integration has moved its clock ahead, for its timers.
    clock_offset_seconds: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    @property
    def scope_list(self) -> list[str]:
        return self.scopes.split()


class InstanceSetting(Base):
    """Values the deployment generates for itself once (the sandbox's link-signing key)."""

    __tablename__ = "instance_settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(500))


class RateLimitRefusal(Base):
    """How many requests of an integration a rate limit refused in one hour (hours since the
    epoch): each server process adds its own (``integrations.refusals``); the retention job
    deletes the hours older than ``refusals.KEEP``."""

    __tablename__ = "rate_limit_refusals"

    integration_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("integrations.id", ondelete="CASCADE"), primary_key=True
    )
    hour: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    # The limit that refused: "api" (requests a minute), "token_failures" (failed token
    # requests of a client id from one address), "token_failures_client" (from every address).
    limit_name: Mapped[str] = mapped_column(String(32), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)

    __table_args__ = (Index("ix_rate_limit_refusals_hour", "hour"),)


class ApiRequest(Base):
    """One API request of an integration, as its request log shows it
    (``integrations.request_log``): never its body, query string, headers or token. Each server
    process writes its own in batches; the retention job deletes the rows older than
    ``api_request_log_days``."""

    __tablename__ = "api_requests"

    seq: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    integration_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("integrations.id", ondelete="CASCADE")
    )
    # When the request came in.
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    method: Mapped[str] = mapped_column(String(10))
    # The route's template (``/deals/v1/deals/{dealId}``), never the path the client sent.
    route: Mapped[str] = mapped_column(String(200))
    # The deal the path named, when its route has one and it is an id (for support).
    deal_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    status: Mapped[int] = mapped_column(SmallInteger)
    # The request id the response's X-Request-Id (and a problem's body) carried.
    request_id: Mapped[str] = mapped_column(String(100))
    duration_us: Mapped[int] = mapped_column(Integer)

    __table_args__ = (
        Index("ix_api_requests_integration_at", "integration_id", "at"),
        Index("ix_api_requests_at", "at"),
    )
