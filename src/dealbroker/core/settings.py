"""Configuration, read from environment variables with the ``DEALBROKER_`` prefix.

Every setting is documented in docs/configuration.md's table; keep the two in step.
"""

import ipaddress
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from typing import Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from dealbroker.events.schedule import RETRY_WINDOW_DAYS


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 without brackets) is this machine's
    loopback: ``localhost``, 127.0.0.0/8 or ``::1``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_bind(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9100`` for IPv6) as (host, port); ``ValueError`` if it is not."""
    host, _, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not host:port (e.g. 127.0.0.1:9100)")
    return host, int(port)


# The sandbox's support contact when none is set: clearly not a real one.
SANDBOX_SUPPORT_EMAIL = "support@sandbox.example.com"


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
    # "stripe" takes it with Stripe (docs/payments.md) and needs the three keys below.
    payment_provider: Literal["simulated", "stripe"] = "simulated"
    # SecretStr: never shown by a repr or a log line. The publishable key is public (the
    # checkout page hands it to Stripe.js) but belongs to the same account, so it is set here.
    stripe_secret_key: SecretStr = SecretStr("")
    stripe_publishable_key: str = ""
    stripe_webhook_secret: SecretStr = SecretStr("")
    # Where the API and Stripe.js are; changed only to test against an emulator.
    stripe_api_base: str = "https://api.stripe.com"
    stripe_js_url: str = "https://js.stripe.com/v3/"
    # How the seller's money leaves escrow. "simulated" pays at once and moves nothing (sandbox
    # only); "bank_file" puts each payout in an ISO 20022 credit transfer file (pain.001) that
    # the operator sends to the bank of the client-funds account below, and the bank's status
    # report (pain.002) says when it is paid (see docs/payouts.md).
    payout_rail: Literal["simulated", "bank_file"] = "simulated"
    # The client-funds account payouts are paid from (bank_file): holder's name, IBAN or
    # Norwegian account number, the bank's BIC, and the holder's organisation number, which
    # identifies the initiating party to the bank.
    payout_debtor_name: str = Field(default="", max_length=70)
    payout_debtor_account: str = ""
    payout_debtor_bic: str = ""
    payout_debtor_org_number: str = ""
    db_pool_size: int = Field(default=20, ge=1)
    # Seconds a request waits for a free pooled connection (PostgreSQL) before it is answered
    # 503 with Retry-After: a full pool sheds load fast instead of queueing requests for long.
    db_pool_timeout_seconds: float = Field(default=3.0, gt=0, le=60)
    # Seconds a statement of ``serve`` or ``worker`` may take on PostgreSQL (``core.db``): past
    # it PostgreSQL cancels it, and one second later, if the server has not answered at all (a
    # hung server or network), the client gives up and closes the connection; the request is
    # answered 503 with Retry-After, the job tries again at its next poll.
    db_statement_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    # Requests one server process handles at once; above it, 503 with Retry-After at once
    # (the health checks are never refused). Empty: four times ``db_pool_size``; 0: no cap.
    max_requests_in_flight: int | None = Field(default=None, ge=0)
    # Whether ``serve`` brings the schema up to date before it starts. "auto": yes on SQLite
    # and in the sandbox; no in production on PostgreSQL, where several instances start at once
    # and a deployment runs ``dealbroker migrate`` as a step of its own (docs/operations.md).
    migrate_on_start: Literal["auto", "on", "off"] = "auto"
    # How long ``serve``, ``worker`` and ``migrate`` wait at start for the database to answer
    # (and for its schema to be this code's) before they exit non-zero with one line.
    startup_wait_seconds: float = Field(default=60, ge=0, le=3600)
    # Run the webhook delivery worker inside ``serve``: "auto" does so on SQLite only.
    embedded_worker: Literal["auto", "on", "off"] = "auto"
    worker_batch_size: int = Field(default=200, ge=1, le=2000)
    worker_poll_seconds: float = Field(default=1.0, gt=0, le=60)
    # How long a claimed delivery is reserved for its worker before another may take it.
    worker_lease_seconds: float = Field(default=30, ge=1, le=3600)
    # Requests per minute an integration may make to the API and the sandbox triggers; failed
    # token requests per minute per client id from one source address, and per client id from
    # all addresses together (a source that got a token for it lately is exempt from the
    # latter, so guessing cannot lock the owner out); 0 turns a limit off. Over it: 429.
    rate_limit_requests_per_minute: int = Field(default=6000, ge=0)
    rate_limit_token_failures_per_minute: int = Field(default=20, ge=0)
    rate_limit_token_failures_per_client_per_minute: int = Field(default=200, ge=0)
    # Retention (``dealbroker.retention``): how long rows with an end are kept, and how the
    # worker's purge paces itself. Deals, offers, payments and history are kept forever.
    event_retention_days: int = Field(default=30, le=3650)
    outbox_retention_days: int = Field(default=30, ge=0, le=3650)
    retention_interval_seconds: float = Field(default=600, gt=0, le=86400)
    retention_batch_size: int = Field(default=1000, ge=1, le=10000)
    retention_max_batches: int = Field(default=10, ge=1, le=10000)
    retention_pause_seconds: float = Field(default=0.2, ge=0, le=10)
    # The API's request log (``integrations.request_log``): each integration's requests, kept
    # this many days; off, no request is recorded (and ``GET /integrations/v1/requests`` lists
    # only what was recorded before).
    api_request_log: bool = True
    api_request_log_days: int = Field(default=7, ge=1, le=90)
    # How often each server process writes the requests it holds (and at shutdown); longer
    # writes bigger batches, and the newest requests take longer to be listed.
    api_request_log_flush_seconds: float = Field(default=1.0, gt=0, le=3600)
    # The custom fast paths of the hot routes and statements (``core.fastpath``: routes solved
    # directly, statements on asyncpg connections of their own); off, everything goes through
    # plain FastAPI and SQLAlchemy, with the same answers.
    fast_paths: bool = True
    log_level: str = "info"
    # "text" for a terminal; "json": one JSON object a line, for a log pipeline.
    log_format: Literal["text", "json"] = "text"
    # Reminders: the party who must act before a deadline is reminded this many hours before
    # it falls due, once (``notifications.reminders``); 0 sends none. A deadline set shorter
    # than this gets no reminder: the message that set it names it already.
    reminder_lead_hours: float = Field(default=24, ge=0, le=24 * 30)
    # Every deal ends: hours the approved buyer has, from the approval, to sign and pay; then the
    # approval lapses and the deal takes offers again (docs/lifecycle.md).
    approval_deadline_hours: int = Field(default=72, ge=1, le=24 * 90)
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
    # The person to ask: the operator's support contact, on every page and in every message.
    # Production refuses to start without its e-mail address; the sandbox shows its own.
    support_email: str = Field(default="", max_length=254)
    support_phone: str = Field(default="", max_length=40)
    # Prometheus metrics: empty is off; ``host:port`` serves /metrics there, on a listener of
    # its own, never on the API's port (see ``dealbroker.metrics_server``).
    metrics_bind: str = ""
    # The directory every process of this host writes its metrics into; empty: one under the
    # system's temporary directory, named after the database (see ``core.metrics_directory``).
    metrics_dir: str = ""
    # --- a parcel in transit always resolves ---
    # Days after the hand-over to the carrier by which the parcel must have arrived: then a
    # deal still in transit goes to dispute ("not received"), never stays held for ever.
    transit_deadline_days: int = Field(default=14, ge=1, le=90)
    # Days after the hand-over (the usual delivery time) from which the buyer may report that
    # the parcel did not arrive.
    not_received_after_days: int = Field(default=5, ge=0, le=90)
    # --- dispute evidence (``dealbroker.evidence``) ---
    # Where the parties' photos are kept: "database" (a table of their bytes, bounded by the
    # per-photo and per-party limits) or "s3", an S3-compatible object store given below.
    evidence_storage: Literal["database", "s3"] = "database"
    s3_endpoint_url: str = ""
    s3_bucket: str = ""
    s3_region: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: SecretStr = SecretStr("")  # never shown by a repr or a log line
    # Bounds on decoding the parties' photos (``evidence.intake``, ``evidence.budget``): the
    # pixels one photo may hold, read from its header before it is decoded (at most Pillow's
    # own guard, 50 megapixels); the pixels one party may have decoded per deal in any hour,
    # refused uploads included (429 with Retry-After past it); and how many photos a process
    # decodes at once (the others wait), which bounds the memory decoding takes.
    evidence_photo_max_pixels: int = Field(default=50_000_000, ge=1_000_000, le=50_000_000)
    evidence_pixels_per_party_per_hour: int = Field(default=400_000_000, ge=1_000_000)
    evidence_concurrent_decodes: int = Field(default=1, ge=1, le=64)
    # --- disputes decided on evidence ---
    # Business days (Monday to Friday, in ``time_zone``; public holidays are not known) from
    # the opening of a dispute by which the operator decides it: shown to both parties and in
    # ``disputes list``, which marks it overdue once passed. Nothing decides money by itself.
    dispute_decision_business_days: int = Field(default=5, ge=1, le=30)
    # Return then refund: days the buyer has, from the decision, to send the item back with a
    # tracking number (else the seller is paid), and days the seller has, from the buyer's
    # sending, to confirm its receipt (else the buyer is refunded all the same).
    return_send_days: int = Field(default=7, ge=1, le=60)
    return_confirm_days: int = Field(default=14, ge=1, le=90)
    # Four eyes: a dispute decision on a deal priced above this (minor units of the deal's
    # currency; 500000 = 5,000.00) is a proposal until a second operator approves it.
    dispute_four_eyes_minor: int = Field(default=500_000, ge=0)
    # --- the back office (docs/back-office.md) ---
    # Minutes a one-time login link printed by ``operators login-link`` stays valid.
    operator_link_minutes: int = Field(default=10, ge=1, le=60)
    # A back office session ends after this many minutes without a request, and in any case
    # this many hours after its login; a money action wants a login at most
    # ``operator_fresh_login_minutes`` old.
    operator_idle_minutes: int = Field(default=30, ge=1, le=24 * 60)
    operator_session_hours: int = Field(default=12, ge=1, le=7 * 24)
    operator_fresh_login_minutes: int = Field(default=15, ge=1, le=24 * 60)
    # The developer portal (docs/portal.md) logs its members in with the same links, session
    # timeouts and OpenID provider as the back office. An address is sent at most this many
    # login links an hour (more asks get the same answer, and no e-mail).
    portal_links_per_hour: int = Field(default=5, ge=1, le=100)
    # OpenID Connect login to the back office and the developer portal (any issuer with
    # discovery); off while the issuer is empty. The operator (member) is matched by the ID
    # token's e-mail claim.
    oidc_issuer: str = Field(default="", max_length=500)
    oidc_client_id: str = Field(default="", max_length=300)
    oidc_client_secret: SecretStr = SecretStr("")  # never shown by a repr or a log line
    # Signing deals with the party's eID through an OpenID Connect issuer (an eID broker such
    # as Criipto Verify, Signicat or Vipps Login; docs/identity.md); off while the issuer is
    # empty, and the parties then sign with their typed name. Production starts only with an
    # issuer, or with ``simple_signature`` saying the operator accepts typed-name signatures.
    # "simulated" (sandbox only) is a page of ours that plays the eID and checks nobody.
    eid_issuer: str = Field(default="", max_length=500)
    eid_client_id: str = Field(default="", max_length=300)
    eid_client_secret: SecretStr = SecretStr("")  # never shown by a repr or a log line
    eid_scopes: str = Field(default="openid profile", max_length=500)
    # Asked for at the issuer and required as the ID token's ``acr`` (any one of them).
    eid_acr_values: str = Field(default="", max_length=500)
    # The claim (ID token or userinfo) holding the national identity number, kept only as a
    # keyed hash.
    eid_national_id_claim: str = Field(default="nin", max_length=100)
    # When the userinfo endpoint's claims are read (with the access token, its ``sub`` checked
    # against the ID token's): "auto" when the ID token lacks the name, birth date or number
    # (Vipps Login puts them in userinfo only), "always", or "never" (the ID token only).
    eid_userinfo: Literal["auto", "always", "never"] = "auto"
    # A signing flow not back from the issuer within this many minutes is Failed.
    eid_flow_minutes: int = Field(default=10, ge=1, le=60)
    simple_signature: bool = False
    # Retention of the eID flows (docs/identity.md): a flow that did not complete goes after
    # this many days; a completed signature's person (name, birth date, the number's hash, the
    # subject) is cleared this many days after it was signed.
    eid_unfinished_retention_days: int = Field(default=30, ge=1, le=3650)
    eid_evidence_retention_days: int = Field(default=1830, ge=1, le=36500)

    @field_validator("base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must be an absolute http(s) URL")
        return value.rstrip("/")

    @field_validator("stripe_api_base", "stripe_js_url")
    @classmethod
    def _absolute_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an absolute http(s) URL")
        return value

    @field_validator("metrics_bind")
    @classmethod
    def _host_port(cls, value: str) -> str:
        if value:
            parse_bind(value)
        return value

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
        if self.event_retention_days < RETRY_WINDOW_DAYS:
            raise ValueError(
                f"DEALBROKER_EVENT_RETENTION_DAYS must be at least {RETRY_WINDOW_DAYS}, the "
                "days a webhook delivery may still be retried"
            )
        if not self.is_sandbox and "@" not in self.support_email:
            raise ValueError(
                "DEALBROKER_SUPPORT_EMAIL (the support address every page and message shows) "
                "is needed in production"
            )
        if self.smtp_host and "@" not in self.mail_from:
            raise ValueError("DEALBROKER_MAIL_FROM (the sender's address) is needed with SMTP")
        if self.not_received_after_days > self.transit_deadline_days:
            raise ValueError(
                "DEALBROKER_NOT_RECEIVED_AFTER_DAYS must not exceed DEALBROKER_TRANSIT_DEADLINE_DAYS"
            )
        if self.eid_simulated and not self.is_sandbox:
            raise ValueError(
                "DEALBROKER_EID_ISSUER=simulated checks nobody's identity and runs only in the "
                "sandbox"
            )
        if self.eid_issuer and not self.eid_simulated and not self.eid_client_id:
            raise ValueError("DEALBROKER_EID_CLIENT_ID is needed with DEALBROKER_EID_ISSUER")
        if self.payment_provider == "stripe":
            self._check_stripe()
        if self.evidence_pixels_per_party_per_hour < self.evidence_photo_max_pixels:
            raise ValueError(
                "DEALBROKER_EVIDENCE_PIXELS_PER_PARTY_PER_HOUR must be at least "
                "DEALBROKER_EVIDENCE_PHOTO_MAX_PIXELS (else the largest photo never fits)"
            )
        if self.evidence_storage == "s3":
            self._check_s3()
        return self

    def _check_s3(self) -> None:
        """The object store's address, bucket, region and keys: all needed in production (the
        sandbox may leave the keys to boto3's own lookup). Values are never echoed."""
        if self.s3_endpoint_url and not self.s3_endpoint_url.startswith(("http://", "https://")):
            raise ValueError("DEALBROKER_S3_ENDPOINT_URL must be an absolute http(s) URL")
        if not self.s3_bucket:
            raise ValueError("DEALBROKER_S3_BUCKET is needed with DEALBROKER_EVIDENCE_STORAGE=s3")
        if self.is_sandbox:
            return
        needed = (
            ("DEALBROKER_S3_ENDPOINT_URL", self.s3_endpoint_url),
            ("DEALBROKER_S3_REGION", self.s3_region),
            ("DEALBROKER_S3_ACCESS_KEY_ID", self.s3_access_key_id),
            ("DEALBROKER_S3_SECRET_ACCESS_KEY", self.s3_secret_access_key.get_secret_value()),
        )
        missing = [name for name, value in needed if not value]
        if missing:
            raise ValueError(
                f"{', '.join(missing)} needed in production with DEALBROKER_EVIDENCE_STORAGE=s3"
            )

    def _check_stripe(self) -> None:
        """The keys Stripe needs, by their prefixes: a key pasted into the wrong setting is
        refused at start-up, never at the first payment. The values are never echoed."""
        expected = (
            (
                "DEALBROKER_STRIPE_SECRET_KEY",
                self.stripe_secret_key.get_secret_value(),
                ("sk_", "rk_"),  # a secret key, or a restricted one
            ),
            ("DEALBROKER_STRIPE_PUBLISHABLE_KEY", self.stripe_publishable_key, ("pk_",)),
            (
                "DEALBROKER_STRIPE_WEBHOOK_SECRET",
                self.stripe_webhook_secret.get_secret_value(),
                ("whsec_",),
            ),
        )
        for name, value, prefixes in expected:
            if not value.startswith(prefixes) or len(value) <= len(prefixes[0]):
                starting = " or ".join(prefixes)
                raise ValueError(f"{name} (starting {starting}) is needed with the stripe provider")

    @property
    def eid_enabled(self) -> bool:
        return self.eid_simulated or bool(self.eid_issuer and self.eid_client_id)

    @property
    def eid_simulated(self) -> bool:
        """The sandbox's simulated eID: the person types who they are, nothing is checked."""
        return self.eid_issuer == "simulated"

    @property
    def is_sandbox(self) -> bool:
        return self.environment is Environment.SANDBOX

    @property
    def support(self) -> tuple[str, str]:
        """The support contact the parties see: its e-mail address and its phone (or "")."""
        return self.support_email or SANDBOX_SUPPORT_EMAIL, self.support_phone

    @property
    def local_outbox(self) -> bool:
        """Whether the sandbox shows every message its outbox holds (``/sandbox/outbox``, to a
        browser on this machine): only a sandbox that sends no mail and whose base URL is this
        machine's own (loopback), a developer's laptop, where the outbox is the only way to read
        a portal login mail. A sandbox others reach, or one that sends mail, shows no one
        another person's mail (docs/decisions.md)."""
        host = urlsplit(self.base_url).hostname or ""
        return self.is_sandbox and not self.sends_mail and is_loopback_host(host)

    @property
    def private_webhooks_allowed(self) -> bool:
        """Whether webhook endpoints may be, and deliveries may reach, non-public addresses."""
        return self.is_sandbox and self.sandbox_private_webhooks

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def migrates_on_start(self) -> bool:
        if self.migrate_on_start == "auto":
            return self.is_sqlite or self.is_sandbox
        return self.migrate_on_start == "on"

    @property
    def sends_mail(self) -> bool:
        return bool(self.smtp_host)

    @property
    def smtp_port_in_use(self) -> int:
        default = {"none": 25, "starttls": 587, "tls": 465}[self.smtp_tls]
        return self.smtp_port or default

    @property
    def metrics_enabled(self) -> bool:
        return bool(self.metrics_bind)

    @property
    def metrics_address(self) -> tuple[str, int]:
        """Where /metrics listens, as (host, port)."""
        return parse_bind(self.metrics_bind)

    @property
    def requests_in_flight_cap(self) -> int:
        """The concurrency cap in force: 0 is none."""
        if self.max_requests_in_flight is None:
            return 4 * self.db_pool_size
        return self.max_requests_in_flight

    @property
    def runs_embedded_worker(self) -> bool:
        return self.embedded_worker == "on" or (self.embedded_worker == "auto" and self.is_sqlite)


class InvalidSettings(ValueError):
    """The environment's configuration is refused. Its message names each setting and why,
    never a value: pydantic's own message repeats the input, keys and passwords included."""

    def __init__(self, error: ValidationError) -> None:
        reasons = []
        for item in error.errors():
            where = ".".join(str(part) for part in item["loc"])
            reasons.append(f"{where}: {item['msg']}" if where else item["msg"])
        super().__init__("; ".join(reasons))


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment; ``InvalidSettings`` if the
    environment's are refused."""
    try:
        return Settings()
    except ValidationError as exc:
        raise InvalidSettings(exc) from None
