"""What the sync and the async client share: each operation as a ``Call`` (method, path, body,
how to read the answer), the retry rules, and the access token's lifetime. The two clients only
send the calls, each with its own I/O (``aio.py``, and ``client.py`` generated from it)."""

import email.utils
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote_plus

import httpx
from pydantic import BaseModel

from dealbroker_client import models as m

T = TypeVar("T")
Auth = Literal["bearer", "webhook-secret", "client", "none"]
USER_AGENT = "dealbroker-client-python/0.1.0"
# Answers worth trying again: the request either did not reach the service or it said so.
RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API operation, ready to send."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    auth: Auth = "bearer"
    json: Any = None
    params: dict[str, Any] | None = None
    form: dict[str, str] | None = None
    idempotency_key: str | None = None
    # RFC 7240's Prefer, e.g. ``return=representation`` for a trigger that answers 204.
    prefer: str | None = None

    def headers(self) -> dict[str, str]:
        """Headers of every attempt. A POST carries an ``Idempotency-Key`` (one per call, the
        same on each retry), so a retry after a lost answer cannot act twice."""
        headers = {"Accept": "application/json"}
        if self.method == "POST" and self.auth not in ("client", "none"):
            headers["Idempotency-Key"] = self.idempotency_key or str(uuid.uuid4())
        if self.prefer:
            headers["Prefer"] = self.prefer
        return headers


@dataclass(frozen=True)
class RetryPolicy:
    """When to send a call again: after a connection failure or timeout, or a 429, 502, 503 or
    504 answer; at most ``max_retries`` times, waiting ``Retry-After`` when the service gives
    one (up to ``max_retry_after``, beyond which the call fails at once) or an exponential
    backoff with jitter otherwise."""

    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before retry number ``attempt + 1``, or None not to retry."""
        if attempt >= self.max_retries:
            return None
        if response is not None:
            if response.status_code not in RETRY_STATUSES:
                return None
            wait = retry_after(response)
            if wait is not None:
                return wait if wait <= self.max_retry_after else None
        ceiling = min(self.max_backoff, self.backoff * 2**attempt)
        return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not a secret


NO_RETRY = RetryPolicy(max_retries=0)


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (RFC 9110: delay-seconds or an HTTP date), if given."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass
class TokenState:
    """The current access token, renewed a little before it expires (a tenth of its lifetime,
    at most a minute early) so a request never leaves with a token about to lapse."""

    token: str | None = None
    expires_at: float = 0.0  # time.monotonic()
    clock: Callable[[], float] = field(default=time.monotonic)

    def current(self) -> str | None:
        if self.token is not None and self.clock() < self.expires_at:
            return self.token
        return None

    def store(self, token: m.Token) -> str:
        early = min(60.0, token.expires_in / 10)
        self.token = token.access_token
        self.expires_at = self.clock() + token.expires_in - early
        return token.access_token

    def clear(self) -> None:
        self.token = None


def basic_auth(client_id: str, client_secret: str) -> httpx.BasicAuth:
    # RFC 6749 section 2.3.1: both parts are form-encoded before the Basic encoding.
    return httpx.BasicAuth(quote_plus(client_id), quote_plus(client_secret))


def _model(model: type[BaseModel]) -> Callable[[httpx.Response], Any]:
    return lambda response: model.model_validate_json(response.content)


def _event(response: httpx.Response) -> m.Event:
    return m.parse_event(response.content)


def _nothing(response: httpx.Response) -> None:
    return None


def raw_json(response: httpx.Response) -> Any:
    """The answer's JSON as the service sent it, parsed but not typed (None for no body): for
    callers that pass the API's own documents on, such as the command line."""
    return response.json() if response.content else None


def _body(model: type[m.Request], values: Mapping[str, Any]) -> dict[str, Any]:
    return model.model_validate({k: v for k, v in values.items() if v is not None}).body()


def _millis(value: datetime | int) -> int:
    """A time as the API takes it: milliseconds since the epoch."""
    return value if isinstance(value, int) else int(value.timestamp() * 1000)


def _page_params(page: int | None, page_size: int | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if page is not None:
        params["page"] = page
    if page_size is not None:
        params["pageSize"] = page_size
    return params


# --- the operations ----------------------------------------------------------------------------


def token(scope: str | None) -> Call[m.Token]:
    form = {"grant_type": "client_credentials"}
    if scope:
        form["scope"] = scope
    return Call("POST", "/oauth2/token", _model(m.Token), auth="client", form=form)


def list_deals(page: int | None, page_size: int | None) -> Call[m.DealPage]:
    return Call("GET", "/deals/v1/deals", _model(m.DealPage), params=_page_params(page, page_size))


def get_deal(deal_id: uuid.UUID | str) -> Call[m.Deal]:
    return Call("GET", f"/deals/v1/deals/{_id(deal_id)}", _model(m.Deal))


def create_deal(values: Mapping[str, Any], idempotency_key: str | None) -> Call[m.Deal]:
    body = _body(m.DealCreate, values)
    return Call(
        "POST", "/deals/v1/deals", _model(m.Deal), json=body, idempotency_key=idempotency_key
    )


def change_status(
    deal_id: uuid.UUID | str, status: m.DealStatus | str, idempotency_key: str | None
) -> Call[m.Deal]:
    return Call(
        "POST",
        f"/deals/v1/deals/{_id(deal_id)}/status",
        _model(m.Deal),
        json=m.StatusChange(status=m.DealStatus(status)).body(),
        idempotency_key=idempotency_key,
    )


def shipment_event(
    kind: m.ShipmentEventType, carrier: str, tracking_number: str, occurred_at: datetime | int
) -> m.ShipmentEventIn:
    """A carrier event's body; a datetime is sent as milliseconds since the epoch."""
    return m.ShipmentEventIn(
        type=kind,
        carrier=carrier,
        tracking_number=tracking_number,
        occurred_at=_millis(occurred_at),
    )


def report_shipment_event(
    deal_id: uuid.UUID | str, event: m.ShipmentEventIn, idempotency_key: str | None
) -> Call[m.Deal]:
    return Call(
        "POST",
        f"/deals/v1/deals/{_id(deal_id)}/shipment-events",
        _model(m.Deal),
        json=event.body(),
        idempotency_key=idempotency_key,
    )


def create_offer_link(
    deal_id: uuid.UUID | str, values: Mapping[str, Any], idempotency_key: str | None
) -> Call[m.OfferLink]:
    return Call(
        "POST",
        f"/deals/v1/deals/{_id(deal_id)}/offer",
        _model(m.OfferLink),
        json=_body(m.OfferLinkCreate, values),
        idempotency_key=idempotency_key,
    )


def list_offers(
    deal_id: uuid.UUID | str, page: int | None, page_size: int | None
) -> Call[m.OfferPage]:
    return Call(
        "GET",
        f"/deals/v1/deals/{_id(deal_id)}/offers",
        _model(m.OfferPage),
        params=_page_params(page, page_size),
    )


def list_conversations(
    deal_id: uuid.UUID | str, page: int | None, page_size: int | None
) -> Call[m.ConversationPage]:
    return Call(
        "GET",
        f"/deals/v1/deals/{_id(deal_id)}/conversations",
        _model(m.ConversationPage),
        params=_page_params(page, page_size),
    )


def get_lifecycle() -> Call[m.Lifecycle]:
    return Call("GET", "/deals/v1/lifecycle", _model(m.Lifecycle))


def ping() -> Call[m.Pong]:
    return Call("GET", "/ping", _model(m.Pong), auth="none")


def list_events(
    page: int | None,
    page_size: int | None,
    event: str | None,
    deal_id: uuid.UUID | str | None,
    after: uuid.UUID | str | None,
) -> Call[m.EventPage]:
    params = _page_params(page, page_size)
    if event is not None:
        params["event"] = str(event)
    if deal_id is not None:
        params["dealId"] = _id(deal_id)
    if after is not None:
        params["after"] = _id(after)
    return Call("GET", "/events/v1/events", _model(m.EventPage), params=params)


def get_event(event_id: uuid.UUID | str) -> Call[m.Event]:
    return Call("GET", f"/events/v1/events/{_id(event_id)}", _event)


def list_requests(
    page: int | None, page_size: int | None, status: str | None, route: str | None
) -> Call[m.ApiRequestPage]:
    params = _page_params(page, page_size)
    if status is not None:
        params["status"] = status
    if route is not None:
        params["route"] = route
    return Call("GET", "/integrations/v1/requests", _model(m.ApiRequestPage), params=params)


def rotate_webhook_secret(
    overlap_seconds: int | None, idempotency_key: str | None
) -> Call[m.WebhookSecretRotated]:
    body = {} if overlap_seconds is None else {"overlapSeconds": overlap_seconds}
    return Call(
        "POST",
        "/integrations/v1/webhook-secret/rotate",
        _model(m.WebhookSecretRotated),
        json=body,
        idempotency_key=idempotency_key,
    )


# --- webhook endpoints -------------------------------------------------------------------------

ENDPOINTS = "/integrations/v1/webhook-endpoints"


def list_webhook_endpoints() -> Call[m.WebhookEndpointList]:
    return Call("GET", ENDPOINTS, _model(m.WebhookEndpointList))


def get_webhook_endpoint(endpoint_id: uuid.UUID | str) -> Call[m.WebhookEndpoint]:
    return Call("GET", f"{ENDPOINTS}/{_id(endpoint_id)}", _model(m.WebhookEndpoint))


def create_webhook_endpoint(
    values: Mapping[str, Any], idempotency_key: str | None
) -> Call[m.WebhookEndpoint]:
    return Call(
        "POST",
        ENDPOINTS,
        _model(m.WebhookEndpoint),
        json=_body(m.WebhookEndpointCreate, values),
        idempotency_key=idempotency_key,
    )


def update_webhook_endpoint(
    endpoint_id: uuid.UUID | str, values: Mapping[str, Any]
) -> Call[m.WebhookEndpoint]:
    """``events="all"`` sends ``events: null``: every kind again."""
    values = dict(values)
    every_kind = values.get("events") == "all"
    if every_kind:
        del values["events"]
    body = _body(m.WebhookEndpointUpdate, values)
    if every_kind:
        body["events"] = None
    return Call("PATCH", f"{ENDPOINTS}/{_id(endpoint_id)}", _model(m.WebhookEndpoint), json=body)


def delete_webhook_endpoint(endpoint_id: uuid.UUID | str) -> Call[None]:
    return Call("DELETE", f"{ENDPOINTS}/{_id(endpoint_id)}", _nothing)


def switch_webhook_endpoint(
    endpoint_id: uuid.UUID | str, enable: bool, idempotency_key: str | None
) -> Call[m.WebhookEndpoint]:
    action = "enable" if enable else "disable"
    return Call(
        "POST",
        f"{ENDPOINTS}/{_id(endpoint_id)}/{action}",
        _model(m.WebhookEndpoint),
        idempotency_key=idempotency_key,
    )


def test_webhook_endpoint(
    endpoint_id: uuid.UUID | str, idempotency_key: str | None
) -> Call[m.WebhookTestSent]:
    return Call(
        "POST",
        f"{ENDPOINTS}/{_id(endpoint_id)}/test",
        _model(m.WebhookTestSent),
        idempotency_key=idempotency_key,
    )


def list_delivery_attempts(
    endpoint_id: uuid.UUID | str, page: int | None, page_size: int | None
) -> Call[m.DeliveryAttemptPage]:
    return Call(
        "GET",
        f"{ENDPOINTS}/{_id(endpoint_id)}/attempts",
        _model(m.DeliveryAttemptPage),
        params=_page_params(page, page_size),
    )


def recover_webhook_endpoint(
    endpoint_id: uuid.UUID | str, since: datetime | int, idempotency_key: str | None
) -> Call[m.Queued]:
    return Call(
        "POST",
        f"{ENDPOINTS}/{_id(endpoint_id)}/recover",
        _model(m.Queued),
        json=m.RecoverRequest(since=_millis(since)).body(),
        idempotency_key=idempotency_key,
    )


def resend_event(
    event_id: uuid.UUID | str, endpoint_id: uuid.UUID | str | None, idempotency_key: str | None
) -> Call[m.Queued]:
    return Call(
        "POST",
        f"/integrations/v1/events/{_id(event_id)}/resend",
        _model(m.Queued),
        json=_body(m.ResendRequest, {"endpoint_id": endpoint_id}),
        idempotency_key=idempotency_key,
    )


# --- sandbox -----------------------------------------------------------------------------------

TRIGGERS: dict[str, type[m.Request]] = {
    "signatureStatus": m.SignatureStatusTrigger,
    "dealOffer": m.DealOfferTrigger,
    "dealOfferApproved": m.OfferDecisionTrigger,
    "dealOfferDenied": m.OfferDecisionTrigger,
    "paymentStatus": m.PaymentStatusTrigger,
    "dealStatus": m.DealStatusTrigger,
    "parcelEvent": m.ParcelEventTrigger,
}


def trigger(
    name: str, values: Mapping[str, Any], idempotency_key: str | None
) -> Call[m.TriggerResult]:
    return Call(
        "POST",
        f"/webhooks/v1/{name}",
        _model(m.TriggerResult),
        auth="webhook-secret",
        json=_body(TRIGGERS[name], values),
        idempotency_key=idempotency_key,
    )


def trigger_deal_offer(values: Mapping[str, Any], idempotency_key: str | None) -> Call[None]:
    return Call(
        "POST",
        "/webhooks/v1/dealOffer",
        _nothing,
        auth="webhook-secret",
        json=_body(m.DealOfferTrigger, values),
        idempotency_key=idempotency_key,
    )


def advance_clock(seconds: int, idempotency_key: str | None) -> Call[m.ClockAdvanced]:
    return Call(
        "POST",
        "/sandbox/v1/clock/advance",
        _model(m.ClockAdvanced),
        auth="webhook-secret",
        json={"seconds": seconds},
        idempotency_key=idempotency_key,
    )


def advance_deal_clock(
    deal_id: uuid.UUID | str, seconds: int, idempotency_key: str | None
) -> Call[m.DealClockAdvanced]:
    return Call(
        "POST",
        f"/sandbox/v1/deals/{_id(deal_id)}/clock/advance",
        _model(m.DealClockAdvanced),
        auth="webhook-secret",
        json={"seconds": seconds},
        idempotency_key=idempotency_key,
    )


def get_deal_clock(deal_id: uuid.UUID | str) -> Call[m.DealClock]:
    return Call(
        "GET",
        f"/sandbox/v1/deals/{_id(deal_id)}/clock",
        _model(m.DealClock),
        auth="webhook-secret",
    )


def list_scenarios() -> Call[m.ScenarioList]:
    return Call("GET", "/sandbox/v1/scenarios", _model(m.ScenarioList), auth="webhook-secret")


def run_scenario(
    scenario: m.ScenarioName, deal_id: uuid.UUID | str | None, idempotency_key: str | None
) -> Call[m.ScenarioResult]:
    return Call(
        "POST",
        "/sandbox/v1/scenarios",
        _model(m.ScenarioResult),
        auth="webhook-secret",
        json=_body(m.ScenarioRun, {"scenario": scenario, "deal_id": deal_id}),
        idempotency_key=idempotency_key,
    )


def _id(value: uuid.UUID | str) -> str:
    # A uuid, checked here so a typo fails before a request rather than as a 400.
    return str(uuid.UUID(str(value)))
