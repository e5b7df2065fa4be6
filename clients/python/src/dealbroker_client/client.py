"""The synchronous client: the same methods as ``AsyncDealbrokerClient``, not awaited.

Generated from ``aio.py`` by ``clients/python/generate_sync.py``: change that file and run
the script, never this one."""

import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from decimal import Decimal
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import httpx

from dealbroker_client import _core as core
from dealbroker_client import models as m
from dealbroker_client.errors import APIConnectionError, error_from_response

T = TypeVar("T")
Id = uuid.UUID | str


class DealbrokerClient:
    """A client of one integration: ``client_id`` and ``client_secret`` for the API (the token
    is fetched on first use and renewed before it expires), ``webhook_secret`` for the sandbox
    triggers. Every POST carries an ``Idempotency-Key`` (yours, or a fresh one) that is reused
    on each retry. Use it as a context manager, or call ``close()``."""

    def __init__(
        self,
        base_url: str,
        client_id: str | None = None,
        client_secret: str | None = None,
        *,
        webhook_secret: str | None = None,
        scope: str | None = None,
        timeout: float | httpx.Timeout = 30.0,
        retry: core.RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._client_id, self._client_secret = client_id, client_secret
        self._webhook_secret = webhook_secret
        self._scope = scope
        self.retry = retry or core.RetryPolicy()
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)
        self._http.headers["User-Agent"] = core.USER_AGENT
        self._token = core.TokenState()
        self._token_lock = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    # --- sending ---------------------------------------------------------------------------

    def access_token(self, *, renew: bool = False) -> str:
        """The current access token, fetched (or renewed) when needed."""
        with self._token_lock:
            current = None if renew else self._token.current()
            if current is not None:
                return current
            return self._token.store(self.send(core.token(self._scope)))

    def _auth(self, call: core.Call[Any]) -> tuple[dict[str, str], httpx.BasicAuth | None]:
        if call.auth == "none":
            return {}, None
        if call.auth == "client":
            if not (self._client_id and self._client_secret):
                raise ValueError("client_id and client_secret are needed for the API")
            return {}, core.basic_auth(self._client_id, self._client_secret)
        if call.auth == "webhook-secret":
            if not self._webhook_secret:
                raise ValueError("webhook_secret is needed for the sandbox triggers")
            return {"webhook-secret": self._webhook_secret}, None
        token = self.access_token()
        return {"Authorization": f"Bearer {token}"}, None

    def send(self, call: core.Call[T]) -> T:
        """Send one call, retrying as ``retry`` allows; its typed answer or a typed error."""
        headers = call.headers()
        attempt, renewed = 0, False
        while True:
            auth_headers, basic = self._auth(call)
            try:
                response = self._http.request(
                    call.method,
                    self.base_url + call.path,
                    params=call.params,
                    json=call.json,
                    data=call.form,
                    headers={**headers, **auth_headers},
                    auth=basic or httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                wait = self.retry.delay(attempt, None)
                if wait is None:
                    raise APIConnectionError(f"{call.method} {call.path}: {exc!r}") from exc
                time.sleep(wait)
                attempt += 1
                continue
            if response.status_code == 401 and call.auth == "bearer" and not renewed:
                # Revoked or expired early (a rotated secret): one fresh token, then the answer.
                renewed = True
                self.access_token(renew=True)
                continue
            if response.is_error:
                wait = self.retry.delay(attempt, response)
                if wait is None:
                    raise error_from_response(response)
                time.sleep(wait)
                attempt += 1
                continue
            return call.parse(response)

    # --- deals -----------------------------------------------------------------------------

    def list_deals(self, *, page: int | None = None, page_size: int | None = None) -> m.DealPage:
        """One page of your deals, newest first."""
        return self.send(core.list_deals(page, page_size))

    def iter_deals(self, *, page_size: int = 100) -> Iterator[m.Deal]:
        """Every deal, newest first, page after page (each once, even if deals are created
        meanwhile)."""
        seen: set[uuid.UUID] = set()
        page = 1
        while True:
            result = self.list_deals(page=page, page_size=page_size)
            for deal in result.items:
                if deal.id not in seen:
                    seen.add(deal.id)
                    yield deal
            if page >= result.page.total_pages:
                return
            page += 1

    def get_deal(self, deal_id: Id) -> m.Deal:
        return self.send(core.get_deal(deal_id))

    def create_deal(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        price: float | None = None,
        images: list[str] | None = None,
        package_type: m.PackageType | None = None,
        seller: m.SellerIn | Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> m.Deal:
        """Create a deal (status ``Draft``); its ``url`` is the seller's page."""
        values = dict(
            name=name,
            description=description,
            price=price,
            images=images,
            package_type=package_type,
            seller=seller,
        )
        return self.send(core.create_deal(values, idempotency_key))

    def change_status(
        self, deal_id: Id, status: m.DealStatus | str, *, idempotency_key: str | None = None
    ) -> m.Deal:
        """Move a deal along the lifecycle (an integration may cancel before payment; the
        sandbox may fire any legal transition). ``IllegalTransitionError`` if not allowed."""
        return self.send(core.change_status(deal_id, status, idempotency_key))

    def cancel_deal(self, deal_id: Id, *, idempotency_key: str | None = None) -> m.Deal:
        return self.change_status(deal_id, m.DealStatus.CANCELLED, idempotency_key=idempotency_key)

    def report_shipment_event(
        self,
        deal_id: Id,
        type: m.ShipmentEventType,
        *,
        carrier: str,
        tracking_number: str,
        occurred_at: datetime | int,
        idempotency_key: str | None = None,
    ) -> m.Deal:
        """What the carrier says about the deal's parcel (``picked_up``, ``in_transit``,
        ``delivered``, ``returned``); the deal moves where the event means it (delivered:
        ``Shipping_Arrived``, returned: ``Shipping_Returned``). ``IllegalTransitionError`` if
        the event makes no sense for the deal's status."""
        event = core.shipment_event(type, carrier, tracking_number, occurred_at)
        return self.send(core.report_shipment_event(deal_id, event, idempotency_key))

    def create_offer_link(
        self,
        deal_id: Id,
        *,
        price: float | None = None,
        buyer: m.OfferBuyer | Mapping[str, str] | None = None,
        buyer_redirect_url: str | None = None,
        seller_redirect_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.OfferLink:
        """A link a buyer opens to send an offer (the deal needs a seller with an email)."""
        values = dict(
            price=price,
            buyer=buyer,
            buyer_redirect_url=buyer_redirect_url,
            seller_redirect_url=seller_redirect_url,
        )
        return self.send(core.create_offer_link(deal_id, values, idempotency_key))

    def list_offers(
        self, deal_id: Id, *, page: int | None = None, page_size: int | None = None
    ) -> m.OfferPage:
        """One page of the deal's offers, newest first, whatever their status; each with the
        ``offer_link_id`` of the link it came through."""
        return self.send(core.list_offers(deal_id, page, page_size))

    def list_conversations(
        self, deal_id: Id, *, page: int | None = None, page_size: int | None = None
    ) -> m.ConversationPage:
        """One page of the deal's conversations (one per offer link), the latest first, each
        with its messages oldest first; a message support hid has ``hidden`` and no text."""
        return self.send(core.list_conversations(deal_id, page, page_size))

    def get_lifecycle(self) -> m.Lifecycle:
        """The deal lifecycle the service runs: statuses, transitions, actors and effects."""
        return self.send(core.get_lifecycle())

    def ping(self) -> m.Pong:
        """Whether the service and its database answer (no credentials needed)."""
        return self.send(core.ping())

    # --- events ----------------------------------------------------------------------------

    def list_events(
        self,
        *,
        page: int | None = None,
        page_size: int | None = None,
        event: m.EventKind | str | None = None,
        deal_id: Id | None = None,
        after: Id | None = None,
    ) -> m.EventPage:
        """One page of events: newest first, or with ``after`` (an event id) the events after
        it, oldest first."""
        return self.send(core.list_events(page, page_size, event, deal_id, after))

    def iter_events(
        self,
        *,
        after: Id | None = None,
        event: m.EventKind | str | None = None,
        deal_id: Id | None = None,
        page_size: int = 100,
    ) -> Iterator[m.Event]:
        """With ``after``: every event after that one, oldest first (catching up; the cursor
        moves with each page). Without: every event, newest first."""
        if after is not None:
            cursor: Id = after
            while True:
                result = self.list_events(
                    after=cursor, event=event, deal_id=deal_id, page_size=page_size
                )
                for item in result.items:
                    yield item
                if len(result.items) < page_size:
                    return
                cursor = result.items[-1].id
        seen: set[uuid.UUID] = set()
        page = 1
        while True:
            result = self.list_events(page=page, page_size=page_size, event=event, deal_id=deal_id)
            for item in result.items:
                if item.id not in seen:
                    seen.add(item.id)
                    yield item
            if page >= result.page.total_pages:
                return
            page += 1

    def get_event(self, event_id: Id) -> m.Event:
        return self.send(core.get_event(event_id))

    def list_requests(
        self,
        *,
        page: int | None = None,
        page_size: int | None = None,
        status: m.StatusClass | None = None,
        route: str | None = None,
    ) -> m.ApiRequestPage:
        """One page of the integration's API requests of the last days, newest first; only
        answers of a ``status`` class (``"4xx"``), only a ``route`` template."""
        return self.send(core.list_requests(page, page_size, status, route))

    def rotate_webhook_secret(
        self, *, overlap_seconds: int | None = None, idempotency_key: str | None = None
    ) -> m.WebhookSecretRotated:
        """A new webhook secret (the old one stays valid for ``overlap_seconds``). The client
        uses the new one for the sandbox triggers from now on."""
        rotated = self.send(core.rotate_webhook_secret(overlap_seconds, idempotency_key))
        self._webhook_secret = rotated.webhook_secret
        return rotated

    def resend_event(
        self, event_id: Id, *, endpoint_id: Id | None = None, idempotency_key: str | None = None
    ) -> m.Queued:
        """Send an event again, with its original ``webhook-id``: to every endpoint that takes
        its kind, or to ``endpoint_id`` only."""
        return self.send(core.resend_event(event_id, endpoint_id, idempotency_key))

    # --- webhook endpoints -----------------------------------------------------------------

    def list_webhook_endpoints(self) -> list[m.WebhookEndpoint]:
        """Your webhook endpoints."""
        endpoints = self.send(core.list_webhook_endpoints())
        return endpoints.items

    def get_webhook_endpoint(self, endpoint_id: Id) -> m.WebhookEndpoint:
        return self.send(core.get_webhook_endpoint(endpoint_id))

    def create_webhook_endpoint(
        self,
        url: str,
        *,
        events: list[m.EventKind | str] | None = None,
        description: str | None = None,
        enabled: bool = True,
        idempotency_key: str | None = None,
    ) -> m.WebhookEndpoint:
        """Register a URL to deliver events to: the kinds in ``events``, or every kind (a
        disabled endpoint keeps its deliveries until it is enabled)."""
        values = dict(url=url, events=events, description=description, enabled=enabled)
        return self.send(core.create_webhook_endpoint(values, idempotency_key))

    def update_webhook_endpoint(
        self,
        endpoint_id: Id,
        *,
        url: str | None = None,
        events: list[m.EventKind | str] | Literal["all"] | None = None,
        description: str | None = None,
        enabled: bool | None = None,
    ) -> m.WebhookEndpoint:
        """Change the fields given (the others stay); ``events="all"`` subscribes the endpoint
        to every kind again."""
        values = dict(url=url, events=events, description=description, enabled=enabled)
        return self.send(core.update_webhook_endpoint(endpoint_id, values))

    def delete_webhook_endpoint(self, endpoint_id: Id) -> None:
        """Delete the endpoint; deliveries still waiting for it are dropped."""
        self.send(core.delete_webhook_endpoint(endpoint_id))

    def enable_webhook_endpoint(
        self, endpoint_id: Id, *, idempotency_key: str | None = None
    ) -> m.WebhookEndpoint:
        """Enable the endpoint; its waiting deliveries resume."""
        return self.send(core.switch_webhook_endpoint(endpoint_id, True, idempotency_key))

    def disable_webhook_endpoint(
        self, endpoint_id: Id, *, idempotency_key: str | None = None
    ) -> m.WebhookEndpoint:
        """Disable the endpoint; deliveries wait until it is enabled again."""
        return self.send(core.switch_webhook_endpoint(endpoint_id, False, idempotency_key))

    def test_webhook_endpoint(
        self, endpoint_id: Id, *, idempotency_key: str | None = None
    ) -> m.WebhookTestSent:
        """Send the endpoint a ``webhook.test`` event (delivered as any other)."""
        return self.send(core.test_webhook_endpoint(endpoint_id, idempotency_key))

    def list_delivery_attempts(
        self, endpoint_id: Id, *, page: int | None = None, page_size: int | None = None
    ) -> m.DeliveryAttemptPage:
        """One page of the attempts to deliver to the endpoint, newest first."""
        return self.send(core.list_delivery_attempts(endpoint_id, page, page_size))

    def recover_webhook_endpoint(
        self, endpoint_id: Id, *, since: datetime | int, idempotency_key: str | None = None
    ) -> m.Queued:
        """Queue again every event since ``since`` (a datetime, or milliseconds since the
        epoch) that did not reach the endpoint."""
        return self.send(core.recover_webhook_endpoint(endpoint_id, since, idempotency_key))

    # --- sandbox triggers ------------------------------------------------------------------

    def trigger_signature_status(
        self,
        *,
        deal_id: Id | None = None,
        user_id: Id | None = None,
        status: m.SignatureStatus | None = None,
        signature_type: m.SignatureType | None = None,
        signature_date: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.TriggerResult:
        """Simulate ``signature.status``; with a ``deal_id`` the deal moves towards Signed."""
        values = dict(
            deal_id=deal_id,
            user_id=user_id,
            status=status,
            signature_type=signature_type,
            signature_date=signature_date,
        )
        return self.send(core.trigger("signatureStatus", values, idempotency_key))

    def trigger_deal_offer(
        self,
        *,
        deal_id: Id | None = None,
        price: float | None = None,
        shipping_type: m.ShippingType | None = None,
        buyer: m.OfferBuyer | Mapping[str, str] | None = None,
        buyer_redirect_url: str | None = None,
        seller_redirect_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        """Simulate ``deal.offer``: a pending offer on the deal (the service answers 204)."""
        values = dict(
            deal_id=deal_id,
            price=price,
            shipping_type=shipping_type,
            buyer=buyer,
            buyer_redirect_url=buyer_redirect_url,
            seller_redirect_url=seller_redirect_url,
        )
        self.send(core.trigger_deal_offer(values, idempotency_key))

    def trigger_deal_offer_approved(
        self,
        *,
        deal_id: Id | None = None,
        offer_id: Id | None = None,
        date: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.TriggerResult:
        """Simulate ``deal.offerApproved`` (the given pending offer, or the oldest)."""
        values = dict(deal_id=deal_id, id=offer_id, date=date)
        return self.send(core.trigger("dealOfferApproved", values, idempotency_key))

    def trigger_deal_offer_denied(
        self,
        *,
        deal_id: Id | None = None,
        offer_id: Id | None = None,
        date: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.TriggerResult:
        """Simulate ``deal.offerDenied`` (the given pending offer, or the oldest)."""
        values = dict(deal_id=deal_id, id=offer_id, date=date)
        return self.send(core.trigger("dealOfferDenied", values, idempotency_key))

    def trigger_payment_status(
        self,
        *,
        deal_id: Id | None = None,
        status: m.PaymentStatus | str | None = None,
        seller_user_id: Id | None = None,
        buyer_user_id: Id | None = None,
        amount: Decimal | None = None,
        fee: Decimal | None = None,
        currency: str | None = None,
        idempotency_key: str | None = None,
    ) -> m.TriggerResult:
        """Simulate ``payment.status`` (default ``Paid``, which moves a Signed deal on)."""
        values = dict(
            deal_id=deal_id,
            status=status,
            seller_user_id=seller_user_id,
            buyer_user_id=buyer_user_id,
            amount=amount,
            fee=fee,
            currency=currency,
        )
        return self.send(core.trigger("paymentStatus", values, idempotency_key))

    def trigger_deal_status(
        self,
        *,
        deal_id: Id | None = None,
        status: m.DealStatus | str | None = None,
        status_date: int | None = None,
        idempotency_key: str | None = None,
    ) -> m.TriggerResult:
        """Simulate ``deal.status``: a legal lifecycle transition to ``status``."""
        values = dict(deal_id=deal_id, status=status, status_date=status_date)
        return self.send(core.trigger("dealStatus", values, idempotency_key))

    def trigger_parcel_event(
        self,
        *,
        deal_id: Id,
        type: str,
        idempotency_key: str | None = None,
    ) -> m.TriggerResult:
        """With the sandbox's carrier: the carrier tells ``type`` (``picked_up``, ``in_transit``,
        ``ready_for_pickup``, ``delivered``, ``returned``, ``lost``, ``damaged``) about the deal's
        parcel, booked first where needed."""
        values = dict(deal_id=deal_id, type=type)
        return self.send(core.trigger("parcelEvent", values, idempotency_key))

    def advance_clock(self, seconds: int, *, idempotency_key: str | None = None) -> m.ClockAdvanced:
        """Move your sandbox clock ahead; deadlines now due fire at once."""
        return self.send(core.advance_clock(seconds, idempotency_key))

    def advance_deal_clock(
        self, deal_id: Id, seconds: int, *, idempotency_key: str | None = None
    ) -> m.DealClockAdvanced:
        """Move one deal's own sandbox clock ahead (adding to yours); its deadlines now due
        fire at once, your other deals' stay where they are."""
        return self.send(core.advance_deal_clock(deal_id, seconds, idempotency_key))

    def get_deal_clock(self, deal_id: Id) -> m.DealClock:
        """A deal's sandbox clock: its offsets, its time and its pending deadlines."""
        return self.send(core.get_deal_clock(deal_id))

    def list_scenarios(self) -> list[m.Scenario]:
        """The named paths ``run_scenario`` can drive a deal down."""
        scenarios = self.send(core.list_scenarios())
        return scenarios.items

    def run_scenario(
        self,
        scenario: m.ScenarioName,
        *,
        deal_id: Id | None = None,
        idempotency_key: str | None = None,
    ) -> m.ScenarioResult:
        """Drive a deal (yours, or a new sandbox deal) down a whole named path, with its real
        webhooks in order. ``ConflictError`` when no path leads from the deal's status to the
        scenario's."""
        return self.send(core.run_scenario(scenario, deal_id, idempotency_key))
