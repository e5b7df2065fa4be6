"""Configuration, read from environment variables with the ``DEALBROKER_`` prefix.

Each setting's docstring is its entry in docs/configuration.md's table, which
``python -m dealbroker.docs`` writes.
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

from dealbroker.core.webhook_schedule import RETRY_WINDOW_DAYS


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
    model_config = SettingsConfigDict(
        env_prefix="DEALBROKER_", extra="ignore", use_attribute_docstrings=True
    )

    database_url: str = "sqlite+aiosqlite:///./dealbroker.db"
    """Database; PostgreSQL as `postgresql+asyncpg://user@host:5432/db`."""
    base_url: str = "http://127.0.0.1:8000"
    """Absolute base of every link handed out (seller page, offer links). Unset:
    `http://HOST:PORT`, where `serve` listens."""
    environment: Environment = Environment.SANDBOX
    """The sandbox lets an integration fire any legal status change."""
    sandbox_private_webhooks: bool = True
    """Whether the sandbox may send webhooks to loopback and private addresses (receivers on
    your own machine). A sandbox others can reach must set `false`: it then refuses them at
    registration and at send time, as production always does (production ignores this setting)."""
    host: str = "127.0.0.1"
    """Interface `serve` listens on."""
    port: int = Field(default=8000, ge=1, le=65535)
    """Port `serve` listens on."""
    secret_key: str = ""
    """Signs seller links; required, at least 32 characters, in production. Empty (sandbox
    only): one is generated and kept in the database."""
    token_lifetime_seconds: int = Field(default=3600, ge=60, le=86400)
    """Access token lifetime."""
    page_size_default: int = Field(default=20, ge=1)
    """Deals per page when `pageSize` is not given."""
    page_size_max: int = Field(default=100, ge=1, le=1000)
    """Largest `pageSize`; a larger one is read as this (never refused)."""
    fee_percent: Decimal = Field(default=Decimal("5"), ge=0, le=100)
    """Service fee, percent of the amount."""
    fee_fixed: Decimal = Field(default=Decimal("0"), ge=0)
    """Service fee, fixed part in major units (e.g. `2.50`)."""
    currency: str = Field(default="NOK", pattern=r"^[A-Z]{3}$")
    """The deployment's one currency (ISO 4217, two decimals)."""
    payment_provider: Literal["simulated", "stripe"] = "simulated"
    """Who takes the buyer's money: `stripe` (see [docs/payments.md](payments.md)) or
    `simulated` (a test checkout page, moves no money), which runs only in the sandbox: in
    production `serve` and `worker` refuse to start with it."""
    stripe_secret_key: SecretStr = SecretStr("")
    """Stripe's secret API key (`sk_...` or a restricted `rk_...`); required with `stripe`;
    never logged. `SecretStr`, as every secret here: never shown by a repr or a log line."""
    stripe_publishable_key: str = ""
    """Stripe's publishable key (`pk_...`), handed to Stripe.js on the checkout page; required
    with `stripe`. Public, but it belongs to the same account, so it is set here."""
    stripe_webhook_secret: SecretStr = SecretStr("")
    """The signing secret (`whsec_...`) of the webhook endpoint registered at Stripe; required
    with `stripe`; never logged."""
    stripe_api_base: str = "https://api.stripe.com"
    """Stripe's API; changed only to test against an emulator."""
    stripe_js_url: str = "https://js.stripe.com/v3/"
    """Where the checkout page loads Stripe.js from; its origin is the only one the page's
    Content-Security-Policy lets run scripts and frames. Changed only to test against an
    emulator."""
    payment_methods: str = Field(default="", max_length=100)
    """The ways a buyer can pay, comma-separated, in the order the buyer's page offers them:
    `card`, `vipps` (Vipps MobilePay), `swish`. Empty: the currency's own, each one whose provider
    is configured (NOK `vipps,card`, SEK `swish,card`, DKK `vipps,card`, others `card`; the
    sandbox simulates a method with no provider). A method that cannot take `DEALBROKER_CURRENCY`,
    or (outside the sandbox) has no provider configured, is refused at start
    ([docs/payments.md](payments.md))."""
    vipps_client_id: str = ""
    """Vipps MobilePay's client id (the merchant sales unit's API keys); set, Vipps takes the
    `vipps` method's payments; empty, the sandbox simulates them and production refuses `vipps`."""
    vipps_client_secret: SecretStr = SecretStr("")
    """Vipps MobilePay's client secret (the sales unit's API keys); required with
    `DEALBROKER_VIPPS_CLIENT_ID`; never logged."""
    vipps_subscription_key: SecretStr = SecretStr("")
    """Vipps MobilePay's `Ocp-Apim-Subscription-Key` (the sales unit's API keys); required with
    `DEALBROKER_VIPPS_CLIENT_ID`; never logged."""
    vipps_merchant_serial_number: str = Field(default="", max_length=10)
    """The sales unit's merchant serial number (MSN, digits); required with
    `DEALBROKER_VIPPS_CLIENT_ID`."""
    vipps_webhook_secret: SecretStr = SecretStr("")
    """The secret Vipps MobilePay's Webhooks API returned when our webhook
    (`/payments/v1/vipps/webhook`) was registered: it verifies each delivery's HMAC signature;
    required with `DEALBROKER_VIPPS_CLIENT_ID`; never logged."""
    vipps_api_base: str = "https://api.vipps.no"
    """Vipps MobilePay's API (`https://apitest.vipps.no` is its test environment); changed only
    to test against an emulator or Vipps's test environment."""
    swish_merchant_number: str = ""
    """The merchant's Swish number (payee alias, 123 followed by 7 digits); set, Swish takes the
    `swish` method's payments; empty, the sandbox simulates them and production refuses `swish`."""
    swish_cert_file: str = ""
    """`swish`: the merchant's Swish client certificate (PEM, from the Swish Certificate
    Management portal), presented to Swish's Commerce API over mutual TLS. Production refuses to
    start when it is unreadable, expired or not yet valid."""
    swish_key_file: str = ""
    """`swish`: the private key of that certificate (PEM). Production refuses to start when it
    is unreadable or readable by the file's group or others (`chmod 600` it)."""
    swish_key_password: SecretStr = SecretStr("")
    """`swish`: the password of the key file, if it is encrypted; never logged."""
    swish_ca_file: str = ""
    """`swish`: the CA certificates (PEM) Swish's server certificate is verified against;
    empty, the system's trusted ones."""
    swish_api_base: str = "https://cpc.getswish.net/swish-cpcapi"
    """Swish's Commerce API (production); Swish's merchant test environment (MSS) is
    `https://mss.cpc.getswish.net/swish-cpcapi`; an emulator in tests."""
    swish_callback_base_url: str = ""
    """`swish`: where Swish posts its callbacks (`<this>/payments/v1/swish/callback`), HTTPS as
    Swish requires; empty, `DEALBROKER_BASE_URL`."""
    swish_payouts: bool = False
    """Pay sellers who give a Swish number through Swish's Payouts API (SEK only; see
    [docs/payouts.md](payouts.md)); needs `DEALBROKER_SWISH_MERCHANT_NUMBER` (the payer alias),
    the transport certificate (`DEALBROKER_SWISH_CERT_FILE`, `..._KEY_FILE`, `..._CA_FILE`, as for `swish`)
    and the payout signing certificate. Other sellers are paid by `DEALBROKER_PAYOUT_RAIL`."""
    swish_payout_signing_cert_file: str = ""
    """Swish payouts: the payout signing certificate (PEM) from Swish's Certificate Management;
    each payout instruction is signed with its key."""
    swish_payout_signing_key_file: str = ""
    """Swish payouts: that certificate's private key (PEM, unencrypted, owner-readable only)."""
    swish_payout_signing_serial: str = ""
    """Swish payouts: the signing certificate's serial number in hex, as Swish's Certificate
    Management shows it (sent as `signingCertificateSerialNumber`); checked against the
    certificate at start."""
    payout_rail: Literal["simulated", "bank_file"] = "simulated"
    """How sellers are paid out. `simulated` pays at once and moves nothing (sandbox only;
    production refuses to start with it); `bank_file` pays by ISO 20022 credit transfer files
    for the operator's bank ([docs/payouts.md](payouts.md))."""
    payout_debtor_name: str = Field(default="", max_length=70)
    """`bank_file`: holder of the client-funds account payouts are paid from (at most 70
    characters)."""
    payout_debtor_account: str = ""
    """`bank_file`: that account, an IBAN or a Norwegian account number (11 digits)."""
    payout_debtor_bic: str = ""
    """`bank_file`: the BIC of the account's bank (e.g. `DNBANOKK`)."""
    payout_debtor_org_number: str = ""
    """`bank_file`: the holder's organisation number, identifying the initiating party to the
    bank."""
    db_pool_size: int = Field(default=20, ge=1)
    """Connections per process (PostgreSQL); a fixed pool, no overflow (a request waits for a
    free connection). Each server process also holds two connections beside it: one listening
    for token revocations, one for the health checks (`/ping`, `/readyz`); and the API's deal
    reads (`GET /deals/v1/deals`, `GET /deals/v1/deals/{dealId}`) run on the driver directly, on
    a second pool of up to this many, opened as needed and closed after 5 idle minutes, so plan
    for twice this per server process against PostgreSQL's `max_connections`."""
    db_pool_timeout_seconds: float = Field(default=3.0, gt=0, le=60)
    """How long a request waits for a free pooled connection (PostgreSQL) before it is answered
    `503` problem+json with `Retry-After: 1`, never a 500
    ([docs/operations/outages.md](operations/outages.md#load-shedding))."""
    db_statement_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    """How long a statement of `serve` or `worker` may take on PostgreSQL: PostgreSQL cancels it
    past this, and one second later, if the server has not answered at all (hung), the process
    closes the connection; the request is answered `503` problem+json with `Retry-After`, the
    job runs again at its next poll. Not for the command line's commands nor SQLite
    ([docs/operations/outages.md](operations/outages.md#a-database-that-hangs))."""
    max_requests_in_flight: int | None = Field(default=None, ge=0)
    """Requests one server process answers at once; past it, `503` problem+json with
    `Retry-After: 1` at once. `/ping`, `/healthz` and `/readyz` are never refused. `0`: no cap.
    Empty: four times `DEALBROKER_DB_POOL_SIZE`."""
    migrate_on_start: Literal["auto", "on", "off"] = "auto"
    """Whether `serve` brings the schema up to date before it starts: `auto` (on SQLite and in
    the sandbox; not in production on PostgreSQL, where `dealbroker migrate` is a deployment
    step and `serve` waits for the schema), `on`, `off` ([docs/operations/upgrade.md](operations/upgrade.md))."""
    startup_wait_seconds: float = Field(default=60, ge=0, le=3600)
    """How long `serve`, `worker` and `migrate` wait at start for the database to answer (and
    `serve` without migrating, and `worker`, for its schema to be the code's) before exiting 1
    with one log line."""
    embedded_worker: Literal["auto", "on", "off"] = "auto"
    """Run the webhook worker inside `serve`: `auto` (on SQLite only), `on`, `off`."""
    worker_batch_size: int = Field(default=200, ge=1, le=2000)
    """Deliveries a worker claims and sends concurrently per batch."""
    worker_poll_seconds: float = Field(default=1.0, gt=0, le=60)
    """How often a worker's jobs look for work no commit announced (retries and deadlines coming
    due, leases ending); a commit that queues work wakes the one job it is for at once."""
    worker_lease_seconds: float = Field(default=30, ge=1, le=3600)
    """How long a claimed delivery is reserved before another worker may take it; each send is
    cut off at half of it (15 s at most)."""
    rate_limit_requests_per_minute: int = Field(default=6000, ge=0)
    """Requests an integration may make per minute (API and sandbox triggers, counted together);
    over it: 429 with `Retry-After`. `0` turns it off. One budget for every server process on
    PostgreSQL, claimed in blocks of 5 % ([docs/operations/deploy.md](operations/deploy.md#rate-limits))."""
    rate_limit_token_failures_per_minute: int = Field(default=20, ge=0)
    """Failed token requests per minute for one client id from one source address; then that
    address's token requests for that client id are answered 429 with `Retry-After` (before the
    secret is checked) until the minute ends. Requests in flight count until they succeed. `0`
    turns it off."""
    rate_limit_token_failures_per_client_per_minute: int = Field(default=200, ge=0)
    """Failed token requests per minute for one client id from all addresses together; then 429
    for every address except those that got a token for that client id in the last 24 hours. `0`
    turns it off."""
    event_retention_days: int = Field(default=30, le=3650)
    """Days an event, its deliveries and their attempts are kept (events API, resend, recover)
    before the worker deletes them; an event with a delivery still pending is kept whatever its
    age. At least the webhook retry window (4 days); less is refused at start. See
    [docs/operations/backup-restore.md](operations/backup-restore.md#retention). Deals, offers,
    payments and their history are kept forever."""
    outbox_retention_days: int = Field(default=30, ge=0, le=3650)
    """Days a message is kept after it was sent by e-mail (`0`: deleted at the next purge);
    messages never sent stay."""
    retention_interval_seconds: float = Field(default=600, gt=0, le=86400)
    """How often the worker's retention job looks for rows past their keep time (idempotency
    keys after 24 h, access tokens 1 h after they expire, and the two above)."""
    retention_batch_size: int = Field(default=1000, ge=1, le=10000)
    """Rows one retention batch deletes at most, in a transaction of its own."""
    retention_max_batches: int = Field(default=10, ge=1, le=10000)
    """Batches one run of the retention job deletes at most before the worker's other jobs
    (deliveries, deadlines, e-mail) get their turn; the job goes on at the worker's next round
    while rows remain."""
    retention_pause_seconds: float = Field(default=0.2, ge=0, le=10)
    """Pause between two retention batches, which leaves the database to the API's queries."""
    api_request_log: bool = True
    """Record each integration's API requests (method, route template, status, request id, time,
    duration; never bodies, query strings, headers or tokens) for `GET
    /integrations/v1/requests` and `dealbroker integrations requests`; written in batches off
    the request's path. `false` records none (for a benchmark's baseline)."""
    api_request_log_days: int = Field(default=7, ge=1, le=90)
    """Days the request log keeps a request; the retention job deletes older ones."""
    api_request_log_flush_seconds: float = Field(default=1.0, gt=0, le=3600)
    """How often each server process writes the requests it holds, in one batch (and once more
    when it stops); a process holds at most 20000, and drops more (counted in
    `dealbroker_buffer_dropped_total`, with a warning) rather than make a request wait."""
    fast_paths: bool = True
    """The hot routes and statements take their fast paths (`dealbroker.core.fastpath`:
    `/healthz` and the deal API solved directly, the deal reads, the create's statement and the
    webhook delivery job's claims and records on asyncpg connections of their own). `false`
    sends everything through plain FastAPI and SQLAlchemy, with the same answers; what each
    piece buys is in [bench/README.md](../bench/README.md)."""
    log_level: str = "info"
    """`debug`, `info`, `warning`, `error`. At `info`, one access line per request (method, path
    with capability links masked, status, time, request id); no query strings, no request
    bodies, no database error texts."""
    log_format: Literal["text", "json"] = "text"
    """`text` for a terminal, `json` for one JSON object a line (`time`, `level`, `logger`,
    `message`, `request_id`, `integration_id`, `deal_id`, `trace_id`, `span_id`); every line and
    traceback is scrubbed of e-mail addresses, phone and account numbers, tokens and capability
    links ([docs/operations/monitor.md](operations/monitor.md#logs))."""
    reminder_lead_hours: float = Field(default=24, ge=0, le=24 * 30)
    """How many hours before a deadline the party who must act is reminded of it, once, in their
    language (docs/lifecycle.md, "Reminders before a deadline"); `0` sends no reminders. A
    deadline set no longer than this (the 24-hour review, by default) gets none: the message
    that set it names it already. A change applies to deadlines set after it."""
    approval_deadline_hours: int = Field(default=72, ge=1, le=24 * 90)
    """Hours the approved buyer has, from the approval, to sign and pay; then the approval
    lapses and the deal takes offers again (`Ad`, or `Draft` if the seller had not signed;
    docs/lifecycle.md)."""
    time_zone: str = "Europe/Oslo"
    """Time zone (IANA name) of the deadlines written in messages and on the pages, e.g. "by 30
    November 2026 14:05 (Europe/Oslo)"."""
    default_locale: Literal["nb", "sv", "en"] = "nb"
    """The language of the pages (words, numbers, amounts, dates: "4 500,00 kr" in `nb`) when
    the browser's `Accept-Language` names none of `nb`, `sv`, `en`, and of the messages to a
    party whose language we have not learnt yet. A person may choose another with the language
    links on every page (remembered in a `lang` cookie); each party's messages follow the
    language of the page they last acted on."""
    smtp_host: str = ""
    """SMTP server that sends the messages to sellers and buyers; empty: messages stay in the
    outbox (the sandbox mailbox shows them; a sandbox on loopback shows them all, portal login
    mails too, at `/sandbox/outbox`: docs/portal.md)."""
    smtp_port: int | None = Field(default=None, ge=1, le=65535)
    """Port of the SMTP server. Empty: the TLS mode's usual port (`25` for `none`, `587` for
    `starttls`, `465` for `tls`)."""
    smtp_tls: Literal["none", "starttls", "tls"] = "starttls"
    """`none` (plain, e.g. a relay on localhost), `starttls` (upgrade required), `tls` (TLS from
    the start)."""
    smtp_username: str = ""
    """Login at the SMTP server; empty: no login."""
    smtp_password: SecretStr = SecretStr("")
    """Password for that login; never logged."""
    mail_from: str = ""
    """Sender address of the messages (`From`); required with `DEALBROKER_SMTP_HOST`."""
    support_email: str = Field(default="", max_length=254)
    """The operator's support address, the person a seller or buyer can ask: at the foot of
    every page and the end of every message. Required in production; the sandbox shows
    `support@sandbox.example.com`."""
    support_phone: str = Field(default="", max_length=40)
    """The support's phone number, shown beside the address when set."""
    metrics_bind: str = ""
    """`host:port` (e.g. `127.0.0.1:9100`, `[::1]:9100`) where `/metrics` is served in
    Prometheus' text format, on a listener of its own: the API's port never serves it. `serve`
    and every `worker` of a host try to listen there; one gets the port and answers for all of
    them, and another takes over within 5 s when it stops. Keep it off public interfaces.
    [docs/operations/monitor.md](operations/monitor.md#metrics) lists the metrics. Empty: metrics off."""
    metrics_dir: str = ""
    """Where the processes of one host keep their metrics (Prometheus' multiprocess files).
    Every `serve` and `worker` of one deployment on one host must share it (they do by default,
    unless each has a temporary directory of its own: systemd's `PrivateTmp`, containers); the
    first to start empties it, each marks itself dead when it stops. Empty: a directory per user
    and database under the system's temporary directory."""
    # --- a parcel in transit always resolves ---
    transit_deadline_days: int = Field(default=14, ge=1, le=90)
    """Days after the hand-over to the carrier by which the parcel must have arrived; then a
    deal still in transit goes to dispute (`Shipping_Review_Denied`, "not received") with the
    money held."""
    not_received_after_days: int = Field(default=5, ge=0, le=90)
    """Days after the hand-over (the usual delivery time) from which the buyer may report the
    parcel as not received on their page; at most the transit deadline."""
    # --- carriers (``dealbroker.carriers``, ``dealbroker.parcels``; docs/shipping.md) ---
    carrier: Literal["none", "simulated", "bring"] = "none"
    """Who carries Carrier deals' parcels. `none`: the marketplace books them and reports the
    carrier's events (`POST /deals/v1/deals/{dealId}/shipment-events`); `bring`: dealbroker
    books them at Bring and follows them itself; `simulated`: the sandbox's carrier (books at
    once, moves no parcel), which production refuses to start with."""
    shipping_paid_by: Literal["buyer", "seller"] = "buyer"
    """Who pays a booked parcel: `buyer` (on top of the price) or `seller` (from the payout)."""
    carrier_drop_off_reminder_days: int = Field(default=3, ge=1, le=7)
    """Days after booking with no drop-off scan after which the seller is reminded once."""
    carrier_lost_after_days: int = Field(default=30, ge=1, le=90)
    """Days after the carrier took the parcel (its first scan) by which a parcel dealbroker
    booked must be delivered; then it counts as lost and the deal goes to dispute, its dossier
    giving what the loss is claimed from the carrier with."""
    bring_api_uid: str = ""
    """`bring`: the Mybring login (an e-mail address) the API key belongs to, sent as
    `X-Mybring-API-Uid`; required in production."""
    bring_api_key: SecretStr = SecretStr("")
    """`bring`: that login's API key (Mybring, "Settings", "API"), sent as `X-Mybring-API-Key`;
    required in production; never logged."""
    bring_customer_number: str = ""
    """`bring`: the Bring customer number the parcels are booked and invoiced on (the login
    must have booking rights on it); required in production."""
    bring_api_base: str = "https://api.bring.com"
    """Where Bring's Booking, Shipping Guide and Tracking APIs live (all under one host);
    changed only to test against an emulator."""
    bring_event_cast_secret: SecretStr = SecretStr("")
    """`bring`: the value of the `X-Dealbroker-Event-Cast-Secret` header registered with the
    Event Cast subscription (docs/shipping.md); a push without it is refused. Required in
    production; never logged. At least 32 random characters."""
    bring_test_indicator: bool = False
    """`bring`: send `X-Bring-Test-Indicator: true`, so that Bring books nothing for real (with
    Bring's test customer numbers, or to try a real one). Production refuses to start with it."""
    bring_timeout_seconds: float = Field(default=20, ge=1, le=120)
    """`bring`: how long one request to Bring may take; a booking past it is repeated later
    with the same reference, which finds the first one rather than booking twice."""
    # --- dispute evidence (``dealbroker.evidence``) ---
    evidence_storage: Literal["database", "s3"] = "database"
    """Where the photos the parties add to a dispute are kept (docs/lifecycle.md, "Evidence in a
    dispute"): `database` (a table of their bytes; at most 6 photos of 10 MB per party and deal)
    or `s3`, an S3-compatible object store given by the settings below."""
    s3_endpoint_url: str = ""
    """`s3`: the object store's address (e.g. `https://s3.eu-north-1.amazonaws.com`, or a MinIO
    or Ceph gateway); empty: AWS's own for the region. Required in production."""
    s3_bucket: str = ""
    """`s3`: the bucket the photos go to, under `evidence/<deal id>/`; required. Keep it
    private: photos are served only through the parties' links."""
    s3_region: str = ""
    """`s3`: the bucket's region; required in production."""
    s3_access_key_id: str = ""
    """`s3`: the access key (it needs `s3:PutObject` and `s3:GetObject` on the bucket); required
    in production, where the other three are too (`serve` and `worker` refuse to start
    otherwise). The sandbox may leave both keys to boto3's own lookup."""
    s3_secret_access_key: SecretStr = SecretStr("")
    """`s3`: its secret; never logged."""
    evidence_photo_max_pixels: int = Field(default=50_000_000, ge=1_000_000, le=50_000_000)
    """The most pixels an evidence photo may hold, read from its header before it is decoded; a
    larger one is refused. At most Pillow's own guard, 50 megapixels."""
    evidence_pixels_per_party_per_hour: int = Field(default=400_000_000, ge=1_000_000)
    """The pixels one party may have decoded per deal in any hour, photos refused once decoded
    included; past it an upload is refused `429` with `Retry-After` before it is read. At least
    `DEALBROKER_EVIDENCE_PHOTO_MAX_PIXELS` (docs/lifecycle.md, "Evidence in a dispute")."""
    evidence_concurrent_decodes: int = Field(default=1, ge=1, le=64)
    """Photos one server process decodes at a time; the others wait their turn. Each takes up to
    about 370 MB at the 50-megapixel bound, so this bounds the memory decoding takes."""
    # --- conversations between the parties ---
    message_max_chars: int = Field(default=2000, ge=100, le=10000)
    """The longest message a seller or buyer may write in a deal's conversation, in characters;
    a longer one is refused next to the field, with what was typed kept."""
    messages_per_hour: int = Field(default=20, ge=1, le=1000)
    """Messages one party may write in one conversation in any hour; past it a message is
    refused (`429`, and the page says when to try again)."""
    message_mail_batch_seconds: int = Field(default=900, ge=1, le=86400)
    """At most one e-mail per conversation and reader in this many seconds (a quarter hour): it
    carries every message that arrived since the last one, with a link to the reader's page."""
    conversation_retention_days: int = Field(default=180, ge=1, le=3650)
    """Days a deal's conversations are kept after the deal ended (completed, cancelled or
    refunded), then deleted by the worker's retention job (docs/conversations.md)."""
    # --- disputes decided on evidence ---
    dispute_decision_business_days: int = Field(default=5, ge=1, le=30)
    """Business days (Monday to Friday in `DEALBROKER_TIME_ZONE`; public holidays are not known)
    after a dispute opens by which the operator decides it: shown on both pages and in the
    dispute's messages, listed by `disputes list` (overdue once passed); nothing is decided
    automatically."""
    return_send_days: int = Field(default=7, ge=1, le=60)
    """Return then refund: days the buyer has, from the decision, to send the item back with a
    tracking number; then the seller is paid."""
    return_confirm_days: int = Field(default=14, ge=1, le=90)
    """Return then refund: days the seller has, from the buyer's sending, to confirm the
    receipt; then the buyer is refunded all the same."""
    dispute_four_eyes_minor: int = Field(default=500_000, ge=0)
    """Four eyes: a dispute decision on a deal priced above this amount (minor units of the
    deal's currency: 500000 is 5,000.00 NOK) is a proposal until a second operator approves it
    in the back office or with `disputes approve`; the proposer never approves their own
    ([docs/back-office.md](back-office.md))."""
    # --- the back office (docs/back-office.md) ---
    operator_link_minutes: int = Field(default=10, ge=1, le=60)
    """Back office: minutes a one-time login link from `operators login-link` stays valid; it
    works once."""
    operator_idle_minutes: int = Field(default=30, ge=1, le=24 * 60)
    """Back office: a session ends after this many minutes without a request."""
    operator_session_hours: int = Field(default=12, ge=1, le=7 * 24)
    """Back office: a session ends this many hours after its login, however active."""
    operator_fresh_login_minutes: int = Field(default=15, ge=1, le=24 * 60)
    """Back office: a money action or a secret's rotation wants a login at most this old, else
    it asks to log in again."""
    portal_links_per_hour: int = Field(default=5, ge=1, le=100)
    """Developer portal: login links e-mailed to one address an hour at most; more asks get the
    same answer and no e-mail. The portal's links and sessions use the `DEALBROKER_OPERATOR_*`
    times above ([docs/portal.md](portal.md))."""
    oidc_issuer: str = Field(default="", max_length=500)
    """Back office and developer portal: the operators' and members' OpenID Connect issuer
    (Entra ID, Google, Keycloak, ...), discovered through its
    `.well-known/openid-configuration`; redirect URIs `BASE_URL/back-office/login/oidc/callback`
    and `BASE_URL/portal/login/oidc/callback` ([docs/back-office.md](back-office.md)). Empty:
    OpenID Connect login off. The operator (or member) is matched by the ID token's e-mail claim."""
    oidc_client_id: str = Field(default="", max_length=300)
    """Back office: our client id at that issuer (the ID token's audience)."""
    oidc_client_secret: SecretStr = SecretStr("")
    """Back office: our client secret there; never logged."""
    eid_issuer: str = Field(default="", max_length=500)
    """Parties sign deals with their eID through this OpenID Connect issuer (an eID broker),
    discovered through its `.well-known/openid-configuration`; redirect URI
    `BASE_URL/eid/callback` ([docs/identity.md](identity.md)). `simulated`: the sandbox's
    simulated eID, a page of ours that checks nobody (refused outside the sandbox). Empty: eID
    signing off (parties sign with their typed name)."""
    eid_client_id: str = Field(default="", max_length=300)
    """eID: our client id at that issuer (needed with the issuer)."""
    eid_client_secret: SecretStr = SecretStr("")
    """eID: our client secret there; never logged."""
    eid_scopes: str = Field(default="openid profile", max_length=500)
    """eID: the scopes asked for."""
    eid_acr_values: str = Field(default="", max_length=500)
    """eID: the levels of assurance asked for (space separated); when set, the ID token's `acr`
    must be one of them."""
    eid_national_id_claim: str = Field(default="nin", max_length=100)
    """eID: the claim (ID token or userinfo) with the national identity number, kept only as a
    keyed hash."""
    eid_userinfo: Literal["auto", "always", "never"] = "auto"
    """eID: when the issuer's userinfo endpoint is read for the person's claims: `auto` when the
    ID token lacks the name, birth date or identity number (Vipps Login, Signicat by default),
    `always`, or `never`; its `sub` must be the ID token's, or the signature fails."""
    eid_flow_minutes: int = Field(default=10, ge=1, le=60)
    """eID: a signing not back from the issuer within this many minutes is `Failed`."""
    simple_signature: bool = False
    """Production starts without an eID issuer only when this is `true`: the operator accepts
    signatures by typed name (said in the log at start)."""
    eid_unfinished_retention_days: int = Field(default=30, ge=1, le=3650)
    """eID: days a signing flow that did not complete is kept ([docs/identity.md](identity.md))."""
    eid_evidence_retention_days: int = Field(default=1830, ge=1, le=36500)
    """eID: days after signing that a signature's person (name, birth date, the identity
    number's hash, `sub`) is cleared."""

    @field_validator("base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must be an absolute http(s) URL")
        return value.rstrip("/")

    @field_validator("payment_methods")
    @classmethod
    def _payment_methods(cls, value: str) -> str:
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in ("card", "vipps", "swish")]
        if unknown:
            raise ValueError(f"unknown payment method {unknown[0]!r}: card, vipps or swish")
        if len(set(names)) != len(names):
            raise ValueError("a payment method is listed twice")
        if value.strip() and not names:
            raise ValueError("name at least one payment method, or leave it empty")
        return ",".join(names)

    @field_validator(
        "stripe_api_base", "stripe_js_url", "bring_api_base", "vipps_api_base", "swish_api_base"
    )
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
        if self.vipps_client_id:
            self._check_vipps()
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

    def _check_vipps(self) -> None:
        """The Vipps MobilePay keys that go with its client id: all of them, or none (a
        half-configured Vipps would take payments it cannot verify). Values are never echoed."""
        needed = (
            ("DEALBROKER_VIPPS_CLIENT_SECRET", self.vipps_client_secret.get_secret_value()),
            ("DEALBROKER_VIPPS_SUBSCRIPTION_KEY", self.vipps_subscription_key.get_secret_value()),
            ("DEALBROKER_VIPPS_WEBHOOK_SECRET", self.vipps_webhook_secret.get_secret_value()),
        )
        missing = [name for name, value in needed if not value]
        if missing:
            raise ValueError(f"{', '.join(missing)} needed with DEALBROKER_VIPPS_CLIENT_ID")
        if not self.vipps_merchant_serial_number.isdigit():
            raise ValueError(
                "DEALBROKER_VIPPS_MERCHANT_SERIAL_NUMBER (digits) is needed with "
                "DEALBROKER_VIPPS_CLIENT_ID"
            )
        if not self.is_sandbox and not self.vipps_api_base.startswith("https://"):
            raise ValueError("DEALBROKER_VIPPS_API_BASE must be https:// in production")

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
        another person's mail (docs/decisions/0025-login-links.md)."""
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
