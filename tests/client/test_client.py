"""The synchronous client against a real server process on loopback."""

import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from dealbroker_client import (
    APIConnectionError,
    DealbrokerClient,
    DealStatus,
    DealStatusEvent,
    IdempotencyKeyReusedError,
    IllegalTransitionError,
    InvalidInputError,
    NotFoundError,
    OAuthError,
    PaymentStatusEvent,
    RetryPolicy,
    ServerError,
    SignatureStatusEvent,
    WebhookVerificationError,
    WebhookVerifier,
)

from tests.client.conftest import Credentials
from tests.conftest import SELLER
from tests.processes import free_port, wait_until
from tests.receiver import Receiver

pytestmark = pytest.mark.server
FAST = RetryPolicy(max_retries=2, backoff=0.01, max_backoff=0.05)


@pytest.fixture
def client(creds: Credentials):
    with DealbrokerClient(
        creds.base, creds.client_id, creds.client_secret, webhook_secret=creds.webhook_secret
    ) as client:
        yield client


def test_create_get_and_page_through_deals(client):
    created = [client.create_deal(name=f"Lamp {i}", price=100 + i, seller=SELLER) for i in range(5)]
    assert all(d.status is DealStatus.DRAFT for d in created)
    assert created[0].seller is not None
    assert created[0].seller.email == SELLER["email"]
    assert client.get_deal(created[2].id) == created[2]

    first = client.list_deals(page=1, page_size=2)
    assert first.page.page_size == 2
    assert first.page.total_pages == (first.page.total_count + 1) // 2
    ids = [d.id for d in client.iter_deals(page_size=2)]
    assert len(ids) == len(set(ids)) == first.page.total_count
    assert ids[:5] == [d.id for d in reversed(created)]  # newest first


def test_change_status_and_the_typed_conflict(client):
    deal = client.create_deal(name="Chair", seller=SELLER)
    cancelled = client.cancel_deal(deal.id)
    assert cancelled.status == "Cancelled"
    with pytest.raises(IllegalTransitionError) as refused:
        client.change_status(deal.id, DealStatus.AD)
    assert refused.value.status == 409
    assert refused.value.kind == "illegal-transition"
    # The id to quote to support: the problem's requestId, the response's X-Request-Id, and in
    # the exception's message (what a log line of it shows).
    assert refused.value.request_id == refused.value.body["requestId"]
    assert refused.value.request_id == refused.value.headers["x-request-id"]
    assert refused.value.request_id in str(refused.value)


def test_an_idempotent_replay_returns_the_first_answer(client):
    key = f"create-{uuid.uuid4()}"
    first = client.create_deal(name="Desk", price=900, idempotency_key=key)
    again = client.create_deal(name="Desk", price=900, idempotency_key=key)
    assert again == first
    with pytest.raises(IdempotencyKeyReusedError) as reused:
        client.create_deal(name="Another desk", price=900, idempotency_key=key)
    assert reused.value.status == 422


def test_typed_errors_from_problem_json(client, creds):
    with pytest.raises(InvalidInputError) as invalid:
        client.create_deal(name="x" * 201)
    assert invalid.value.status == 405  # the interface's code for create deal
    assert [e.field for e in invalid.value.errors] == ["name"]
    assert invalid.value.title == "Invalid input"

    with pytest.raises(NotFoundError) as missing:
        client.get_deal(uuid.uuid4())
    assert missing.value.status == 404
    assert missing.value.type.endswith("/not-found")

    # A trigger's dealId that names no deal is the interface's 400 "Invalid input".
    unknown = uuid.uuid4()
    with pytest.raises(InvalidInputError) as no_deal:
        client.trigger_signature_status(deal_id=unknown)
    assert (no_deal.value.status, no_deal.value.kind) == (400, "unknown-reference")
    assert [e.field for e in no_deal.value.errors] == ["dealId"]

    with DealbrokerClient(creds.base, creds.client_id, "dbs_wrong") as wrong:
        with pytest.raises(OAuthError) as refused:
            wrong.list_deals()
    assert refused.value.status == 401
    assert refused.value.type == "invalid_client"


def test_a_page_out_of_range_is_the_nearest_one(client):
    """The deal list never refuses a page parameter: it reads the nearest valid one and says so."""
    listed = client.list_deals(page=0, page_size=500)
    assert (listed.page.page_number, listed.page.page_size) == (1, 100)
    assert listed.page.adjusted == ["page", "pageSize"]
    assert client.list_deals(page=1).page.adjusted == []


def test_the_token_is_reused_renewed_before_expiry_and_after_a_401(client):
    client.list_deals()
    token = client.access_token()
    client.list_deals()
    assert client.access_token() == token  # one token for many calls

    client._token.expires_at = 0  # as if its lifetime had run out
    client.list_deals()
    renewed = client.access_token()
    assert renewed != token

    client._token.token = "revoked"  # the service refuses it: one renewal, then the answer
    assert client.list_deals().page.page_number == 1
    assert client.access_token() not in ("revoked", renewed)


class _Flaky:
    """A real HTTP proxy on loopback in front of the server: answers the first ``failures``
    POSTs to ``path`` itself with ``status`` (and ``Retry-After: 0``), then forwards; records
    the ``Idempotency-Key`` of each POST to ``path``."""

    def __init__(self, upstream: str, path: str, failures: int, status: int) -> None:
        self.keys: list[str | None] = []
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if method == "POST" and self.path == path:
                    flaky.keys.append(self.headers.get("idempotency-key"))
                    if len(flaky.keys) <= failures:
                        self.send_response(status)
                        self.send_header("retry-after", "0")
                        self.send_header("content-length", "0")
                        self.end_headers()
                        return
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")
                }
                answer = httpx.request(method, upstream + self.path, headers=headers, content=body)
                self.send_response(answer.status_code)
                for name in ("content-type", "idempotent-replayed"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                self._forward("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [503, 429])
def test_posts_are_retried_with_the_same_idempotency_key(creds, status):
    flaky = _Flaky(creds.base, "/deals/v1/deals", failures=2, status=status)
    try:
        with DealbrokerClient(flaky.base, creds.client_id, creds.client_secret, retry=FAST) as c:
            deal = c.create_deal(name="Retried", price=10)
        assert len(flaky.keys) == 3
        assert flaky.keys[0] is not None
        assert len(set(flaky.keys)) == 1
        with DealbrokerClient(creds.base, creds.client_id, creds.client_secret) as direct:
            assert direct.get_deal(deal.id).name == "Retried"
    finally:
        flaky.close()


def test_retries_are_bounded(creds):
    closed = f"http://127.0.0.1:{free_port()}"
    with DealbrokerClient(closed, creds.client_id, creds.client_secret, retry=FAST) as client:
        with pytest.raises(APIConnectionError):
            client.list_deals()
    flaky = _Flaky(creds.base, "/oauth2/token", failures=10, status=503)
    try:
        with DealbrokerClient(flaky.base, creds.client_id, creds.client_secret, retry=FAST) as c:
            with pytest.raises(ServerError) as failed:
                c.list_deals()
        assert failed.value.status == 503
        assert len(flaky.keys) == 3  # the token request: one try and two retries
    finally:
        flaky.close()


def _deliveries(receiver: Receiver, verifier: WebhookVerifier, deal_id: uuid.UUID) -> list:
    events = [verifier.verify(r.body, r.headers) for r in list(receiver.requests)]
    return [e for e in events if getattr(e.data, "deal_id", None) == deal_id]


def test_webhooks_verify_into_typed_events(client, creds, receiver):
    verifier = WebhookVerifier(creds.webhook_secret)
    deal = client.create_deal(name="Bike", price=4500, seller=SELLER)
    client.trigger_deal_offer(deal_id=deal.id, shipping_type="Carrier")
    client.trigger_deal_offer_approved(deal_id=deal.id)
    signed = client.trigger_signature_status(deal_id=deal.id)
    assert signed.deal is not None
    assert signed.deal.status is DealStatus.SIGNED
    assert any(isinstance(e, SignatureStatusEvent) for e in signed.events)
    paid = client.trigger_payment_status(deal_id=deal.id, status="Paid")
    payment = next(e for e in paid.events if isinstance(e, PaymentStatusEvent))
    assert payment.data.amount - payment.data.fee > 0

    emitted = [e.id for e in client.iter_events(deal_id=deal.id)]
    wait_until(
        lambda: {e.id for e in _deliveries(receiver, verifier, deal.id)} >= set(emitted),
        20,
        "every event of the deal delivered",
    )
    delivered = {e.id: e for e in _deliveries(receiver, verifier, deal.id)}
    first = delivered[emitted[-1]]  # the oldest: the deal's creation
    assert isinstance(first, DealStatusEvent)
    assert first.data.status is DealStatus.DRAFT
    assert first.created_at.tzinfo is not None

    request = next(r for r in receiver.requests if r.headers["webhook-id"] == str(first.id))
    with pytest.raises(WebhookVerificationError):
        WebhookVerifier("whsec_" + "A" * 43).verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        verifier.verify(request.body.replace(b"Draft", b"Ad"), request.headers)


def test_a_sandbox_deal_goes_all_the_way_to_completed(client):
    deal = client.create_deal(name="Guitar", price=3000, package_type="Medium", seller=SELLER)
    link = client.create_offer_link(deal.id, price=2800, buyer={"name": "Ola", "email": "o@x.no"})
    assert link.url.startswith(client.base_url)
    uuid.UUID(link.offer)
    client.trigger_deal_offer(deal_id=deal.id, shipping_type="Carrier", price=2900)
    approved = client.trigger_deal_offer_approved(deal_id=deal.id)
    assert approved.deal is not None
    assert approved.deal.price == 2900
    client.trigger_signature_status(deal_id=deal.id)
    client.trigger_payment_status(deal_id=deal.id)
    for status in ("Shipping_In_Progress", "Shipping_Arrived", "Completed"):
        result = client.trigger_deal_status(deal_id=deal.id, status=status)
        assert result.deal is not None
        assert result.deal.status == status
    assert client.get_deal(deal.id).status is DealStatus.COMPLETED


def test_events_catch_up_after_a_cursor(client):
    deal = client.create_deal(name="Sofa")
    newest = client.list_events(page_size=1).items[0]
    assert newest.data.deal_id == deal.id  # type: ignore[union-attr]
    for status in ("Ad", "Cancelled"):
        client.trigger_deal_status(deal_id=deal.id, status=status)
    caught_up = list(client.iter_events(after=newest.id, page_size=1))
    # Publishing goes through the seller's signature first: its events come before "Ad".
    statuses = [e.data.status for e in caught_up if e.event == "deal.status"]  # type: ignore[union-attr]
    assert statuses == ["Ad", "Cancelled"]
    assert [e.deal_sequence for e in caught_up] == list(range(2, 2 + len(caught_up)))
    assert client.get_event(caught_up[0].id) == caught_up[0]


def test_unknown_fields_and_kinds_are_kept(client):
    from dealbroker_client import OtherEvent, parse_event
    from dealbroker_client.models import Deal

    deal = client.create_deal(name="Kept")
    raw = deal.model_dump(mode="json", by_alias=True)
    assert deal.allowed_actions is not None
    assert "Cancelled" in deal.allowed_actions.change_status  # typed: the service sends it
    future = Deal.model_validate({**raw, "refundPolicy": "14 days"})
    assert future.model_extra == {"refundPolicy": "14 days"}
    other = parse_event(
        {
            "id": str(uuid.uuid4()),
            "event": "webhook.test",
            "api_version": "v1",
            "created": 1,
            "data": {"message": "hi"},
        }
    )
    assert isinstance(other, OtherEvent)


def test_carrier_events_move_the_deal_and_arrive_typed(client):
    from datetime import UTC, datetime

    from dealbroker_client import DealShipmentEvent

    deal = client.create_deal(name="Lamp", price=300, seller=SELLER)
    client.trigger_deal_status(deal_id=deal.id, status=DealStatus.SHIPPING_PENDING)
    now = datetime.now(UTC)
    picked = client.report_shipment_event(
        deal.id, "picked_up", carrier="Posten", tracking_number="370712345678", occurred_at=now
    )
    assert picked.status is DealStatus.SHIPPING_IN_PROGRESS
    delivered = client.report_shipment_event(
        deal.id, "delivered", carrier="Posten", tracking_number="370712345678", occurred_at=now
    )
    assert delivered.status is DealStatus.SHIPPING_ARRIVED
    with pytest.raises(IllegalTransitionError):
        client.report_shipment_event(
            deal.id, "returned", carrier="Posten", tracking_number="370712345678", occurred_at=now
        )
    events = client.list_events(deal_id=deal.id, event="deal.shipment").items
    assert sorted(e.data.type for e in events) == ["delivered", "picked_up"]
    assert all(isinstance(e, DealShipmentEvent) for e in events)
    assert events[0].data.tracking_number == "370712345678"
