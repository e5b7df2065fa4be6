"""Configuration, read from environment variables with the ``DEALBROKER_`` prefix.

Every setting is documented in the README's configuration table; keep the two in step.
"""

from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Environment(StrEnum):
    SANDBOX = "sandbox"
    PRODUCTION = "production"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DEALBROKER_", extra="ignore")

    database_url: str = "sqlite+aiosqlite:///./dealbroker.db"
    base_url: str = "http://127.0.0.1:8000"
    environment: Environment = Environment.SANDBOX
    # Whether the sandbox may send webhooks to loopback and private addresses: on for a local
    # install (receivers on the developer's machine), off for a hosted sandbox, which would
    # otherwise let any integration reach into its network. Production never may.
    sandbox_private_webhooks: bool = True
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    # Signs the sellers' capability links. Empty in the sandbox means "generate one and keep it
    # in the database"; production refuses to start without a real one.
    secret_key: str = ""
    token_lifetime_seconds: int = Field(default=3600, ge=60, le=86400)
    page_size_default: int = Field(default=20, ge=1)
    page_size_max: int = Field(default=100, ge=1, le=1000)
    fee_percent: Decimal = Field(default=Decimal("5"), ge=0, le=100)
    fee_fixed: Decimal = Field(default=Decimal("0"), ge=0)
    currency: str = Field(default="NOK", pattern=r"^[A-Z]{3}$")
    # Who takes the buyer's money. "simulated" moves none, so it runs only in the sandbox: in
    # production ``serve`` and ``worker`` refuse to start with it (see payments.provider).
    payment_provider: Literal["simulated"] = "simulated"
    db_pool_size: int = Field(default=20, ge=1)
    # Run the webhook delivery worker inside ``serve``: "auto" does so on SQLite only.
    embedded_worker: Literal["auto", "on", "off"] = "auto"
    worker_batch_size: int = Field(default=200, ge=1, le=2000)
    worker_poll_seconds: float = Field(default=1.0, gt=0, le=60)
    # How long a claimed delivery is reserved for its worker before another may take it.
    worker_lease_seconds: float = Field(default=30, ge=1, le=3600)
    log_level: str = "info"
    # Deadlines in messages are written in this time zone (an IANA name).
    time_zone: str = "Europe/Oslo"
    # The pages' locale (numbers, amounts, dates) when the browser asks for none we have.
    default_locale: Literal["nb", "sv", "en"] = "nb"
    # E-mail: off while ``smtp_host`` is empty (messages stay in the outbox, which the sandbox
    # mailbox shows); set, the worker sends every new message through this SMTP server.
    smtp_host: str = ""
    # Empty: the usual port of the TLS mode (25 for none, 587 for starttls, 465 for tls).
    smtp_port: int | None = Field(default=None, ge=1, le=65535)
    smtp_tls: Literal["none", "starttls", "tls"] = "starttls"
    smtp_username: str = ""
    smtp_password: SecretStr = SecretStr("")  # SecretStr: never shown by a repr or a log line
    mail_from: str = ""

    @field_validator("base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must be an absolute http(s) URL")
        return value.rstrip("/")

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r} (use an IANA name)") from exc
        return value

    @model_validator(mode="after")
    def _check(self) -> "Settings":
        if self.page_size_default > self.page_size_max:
            raise ValueError("page_size_default must not exceed page_size_max")
        if self.fee_fixed.as_tuple().exponent < -2:  # type: ignore[operator]
            raise ValueError("fee_fixed has more than two decimals")
        if self.environment is Environment.PRODUCTION and len(self.secret_key) < 32:
            raise ValueError("DEALBROKER_SECRET_KEY must be at least 32 characters in production")
        if self.smtp_host and "@" not in self.mail_from:
            raise ValueError("DEALBROKER_MAIL_FROM (the sender's address) is needed with SMTP")
        return self

    @property
    def is_sandbox(self) -> bool:
        return self.environment is Environment.SANDBOX

    @property
    def private_webhooks_allowed(self) -> bool:
        """Whether webhook endpoints may be, and deliveries may reach, non-public addresses."""
        return self.is_sandbox and self.sandbox_private_webhooks

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def sends_mail(self) -> bool:
        return bool(self.smtp_host)

    @property
    def smtp_port_in_use(self) -> int:
        default = {"none": 25, "starttls": 587, "tls": 465}[self.smtp_tls]
        return self.smtp_port or default

    @property
    def runs_embedded_worker(self) -> bool:
        return self.embedded_worker == "on" or (self.embedded_worker == "auto" and self.is_sqlite)


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
