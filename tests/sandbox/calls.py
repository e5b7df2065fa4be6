"""The sandbox's calls and checks, shared by the tests that drive deals through it: triggers,
the deal and its events, a webhook receiver on loopback, and what a delivered event looks like."""

import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import orjson
from standardwebhooks.webhooks import Webhook

from dealbroker.core.statuses import DealStatus
from dealbroker.deals.lifecycle import TRANSITIONS
from tests.conftest import create_deal
from tests.receiver import LoopbackServer

NO_BODY = object()  # send the trigger with no body at all


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def envelope(self) -> dict[str, Any]:
        return orjson.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server in a thread that records every request and answers 200."""

    server: LoopbackServer
    requests: list[Received] = field(default_factory=list)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hooks/dealbroker"

    def by_id(self) -> dict[str, Received]:
        return {r.envelope["id"]: r for r in self.requests}


def start_receiver() -> Receiver:
    recorded: list[Received] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the http.server API)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            recorded.append(Received(self.command, self.path, headers, body))
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = LoopbackServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return Receiver(server, recorded)


async def register_endpoint(client: httpx.AsyncClient, caller: Any, url: str) -> dict:
    response = await client.post(
        "/integrations/v1/webhook-endpoints", json={"url": url}, headers=caller.headers
    )
    assert response.status_code == 201, response.text
    return response.json()


async def trigger(
    client: httpx.AsyncClient,
    name: str,
    body: Any = NO_BODY,
    *,
    secret: str | None,
    prefix: str = "/webhooks/v1",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """POST a trigger: ``body`` a dict (JSON), bytes (sent as is), or NO_BODY."""
    sent = dict(headers or {})
    if secret is not None:
        sent["webhook-secret"] = secret
    url = f"{prefix}/{name}"
    if body is NO_BODY:
        return await client.post(url, headers=sent)
    if isinstance(body, bytes):
        return await client.post(url, content=body, headers=sent)
    return await client.post(url, json=body, headers=sent)


async def fire(client: httpx.AsyncClient, caller: Any, name: str, body: Any = NO_BODY) -> dict:
    """Fire a trigger that must succeed; returns its JSON answer ({} for dealOffer's 204)."""
    response = await trigger(client, name, body, secret=caller.webhook_secret)
    expected = 204 if name == "dealOffer" else 200
    assert response.status_code == expected, response.text
    return {} if expected == 204 else response.json()


async def get_deal(client: httpx.AsyncClient, caller: Any, deal_id: str) -> dict:
    response = await client.get(f"/deals/v1/deals/{deal_id}", headers=caller.headers)
    assert response.status_code == 200, response.text
    return response.json()


async def list_events(client: httpx.AsyncClient, caller: Any, **params: Any) -> list[dict]:
    """The integration's events matching ``params``, oldest first."""
    response = await client.get(
        "/events/v1/events", params={"pageSize": 100, **params}, headers=caller.headers
    )
    assert response.status_code == 200, response.text
    return list(reversed(response.json()["items"]))


async def deal_events(
    client: httpx.AsyncClient, caller: Any, deal_id: str, kind: str | None = None
) -> list[dict]:
    params: dict[str, str] = {"dealId": deal_id}
    if kind is not None:
        params["event"] = kind
    return await list_events(client, caller, **params)


async def draft_deal(client: httpx.AsyncClient, caller: Any, **fields: Any) -> dict:
    return await create_deal(client, caller, packageType="Medium", **fields)


async def signed_deal(client: httpx.AsyncClient, caller: Any, shipping: str = "Pickup") -> dict:
    deal = await deal_with_approved_offer(client, caller, shipping)
    result = await fire(client, caller, "signatureStatus", {"dealId": deal["id"]})
    assert result["deal"]["status"] == "Signed"
    return deal


def assert_envelope(envelope: dict[str, Any], kind: str) -> None:
    # The interface's five fields; an event about a stored deal adds its deal_sequence.
    assert set(envelope) - {"deal_sequence"} == {"id", "event", "api_version", "created", "data"}
    if "deal_sequence" in envelope:
        assert isinstance(envelope["deal_sequence"], int)
        assert envelope["deal_sequence"] >= 1
    assert is_uuid(envelope["id"])
    assert envelope["event"] == kind
    assert envelope["api_version"] == "v1"
    assert is_recent_millis(envelope["created"])
    assert 10**12 <= envelope["created"] < 10**13  # millisecond magnitude
    assert_data_shape(kind, envelope["data"])


def assert_delivered(received: Received, caller: Any, url: str) -> dict[str, Any]:
    """A delivery as Standard Webhooks prescribes; returns the verified envelope."""
    assert received.method == "POST"
    assert received.path == httpx.URL(url).path
    assert received.headers["content-type"] == "application/json"
    verified = Webhook(caller.webhook_secret).verify(received.body, received.headers)
    assert verified == received.envelope
    assert received.headers["webhook-id"] == received.envelope["id"]
    assert re.fullmatch(r"\d{10}", received.headers["webhook-timestamp"])
    assert received.headers["webhook-signature"].startswith("v1,")
    return verified


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    body = response.json()
    assert body["status"] == status
    assert {"type", "title", "status", "detail"} <= set(body)
    return body


PROBLEM_JSON = "application/problem+json"


async def deal_with_approved_offer(
    client: httpx.AsyncClient, caller: Any, shipping: str = "Pickup", price: float = 4200.5
) -> dict:
    deal = await draft_deal(client, caller)
    await offer(client, caller, deal["id"], price=price, shippingType=shipping, buyer=BUYER)
    await fire(client, caller, "dealOfferApproved", {"dealId": deal["id"]})
    return deal


def is_uuid(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def is_recent_millis(value: Any) -> bool:
    """An int timestamp in milliseconds, within a minute of now."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and abs(value - time.time() * 1000) < 60_000
    )


def assert_data_shape(kind: str, data: dict[str, Any]) -> None:
    """``data`` has the interface's fields for ``kind`` (and ours), each of its type."""
    assert set(data) == DATA_FIELDS[kind]
    assert is_uuid(data["dealId"])
    if kind == "deal.status":
        assert data["status"] in DEAL_STATUSES
        assert is_recent_millis(data["statusDate"])
    elif kind == "signature.status":
        assert is_uuid(data["userId"])
        assert data["status"] in {"Initiated", "Failed", "Completed"}
        assert data["signatureType"] in {"Seller", "Buyer"}
        assert isinstance(data["signatureDate"], int)
    elif kind == "deal.offer":
        assert is_uuid(data["id"])
        assert data["shippingType"] in {"Carrier", "Pickup"}
        assert data["packageType"] in {"Small", "Medium", "Large", "XL"}
        assert isinstance(data["buyerName"], str)
        assert isinstance(data["buyerEmail"], str)
        assert isinstance(data["price"], int | float)
        assert not isinstance(data["price"], bool)
        assert isinstance(data["buyerRedirectUrl"], str | None)
        assert isinstance(data["sellerRedirectUrl"], str | None)
        assert is_recent_millis(data["date"])
        assert data["offerLinkId"] is None  # the sandbox's offers come through no link
    elif kind in {"deal.offerApproved", "deal.offerDenied"}:
        assert is_uuid(data["id"])
        assert isinstance(data["date"], int)
    elif kind == "deal.shipment":
        assert data["type"] in {"picked_up", "in_transit", "delivered", "returned"}
        assert isinstance(data["carrier"], str)
        assert isinstance(data["trackingNumber"], str)
        assert is_recent_millis(data["occurredAt"])
    else:  # payment.status
        assert is_uuid(data["sellerUserId"])
        assert is_uuid(data["buyerUserId"])
        assert data["status"] in PAYMENT_STATUSES
        assert MONEY.match(data["amount"])
        assert MONEY.match(data["fee"])
        assert data["currency"] == "NOK"


# The data fields of each event kind: the interface's, and our additions.
DATA_FIELDS = {
    "deal.status": {"dealId", "status", "statusDate"},
    "signature.status": {"dealId", "userId", "status", "signatureType", "signatureDate"},
    "deal.offer": {
        "id",
        "dealId",
        "shippingType",
        "packageType",
        "buyerName",
        "buyerEmail",
        "price",
        "buyerRedirectUrl",
        "sellerRedirectUrl",
        "date",
        "offerLinkId",  # an addition: the offer link's reference (None without a link)
    },
    "deal.offerApproved": {"id", "dealId", "date"},
    "deal.offerDenied": {"id", "dealId", "date"},
    "payment.status": {
        "dealId",
        "sellerUserId",
        "buyerUserId",
        "status",
        "amount",
        "fee",
        "currency",
    },
    # Ours: what the carrier said about the parcel (the sandbox carrier reports it too).
    "deal.shipment": {"dealId", "type", "carrier", "trackingNumber", "occurredAt"},
}


DEAL_STATUSES = {
    "Draft",
    "Ad",
    "Signed",
    "Cancelled",
    "Pickup_Pending",
    "Pickup_Expired",
    "Pickup_Denied",
    "Shipping_Pending",
    "Shipping_Expired",
    "Shipping_In_Progress",
    "Shipping_Arrived",
    "Shipping_Returned",
    "Shipping_Review_Denied",
    "Refunded",
    "Completed",
}


PAYMENT_STATUSES = {
    "Created",
    "Processing",
    "PaymentFailed",
    "PaymentCancelled",
    "Paid",
    "Refunded",
    "PendingPayOut",
    "PaidOut",
    "PayoutFailed",
    "PayoutCancelled",
}


MONEY = re.compile(r"^\d+\.\d{2}$")
BUYER = {"name": "Ola Nordmann", "email": "ola@example.com"}


async def offer(
    client: httpx.AsyncClient, caller: Any, deal_id: str, **fields: Any
) -> dict[str, Any]:
    """Send a dealOffer; returns the data of the deal.offer event it produced."""
    await fire(client, caller, "dealOffer", {"dealId": deal_id, **fields})
    return (await deal_events(client, caller, deal_id, "deal.offer"))[-1]["data"]


async def deal_in(client: httpx.AsyncClient, caller: Any, status: str) -> dict:
    """A new deal (with a seller, a price and no offer) driven to ``status``."""
    deal = await draft_deal(client, caller)
    if status != "Draft":
        answer = await fire(client, caller, "dealStatus", {"dealId": deal["id"], "status": status})
        assert answer["deal"]["status"] == status
    return deal


def assert_lifecycle_order(start: str, events: list[dict]) -> None:
    """The events are those of a real deal, in its order: each status change is a transition of
    the lifecycle table from the one before; the seller's completed signature is what makes a
    deal ``Ad``, the buyer's what makes it ``Signed`` (after an approved offer), a ``Paid``
    payment what moves it on, and a completed deal queues the payout at once."""
    status = DealStatus(start)
    for i, event in enumerate(events):
        if event["event"] != "deal.status":
            continue
        target = DealStatus(event["data"]["status"])
        assert any(status in t.sources and t.target is target for t in TRANSITIONS), (
            status,
            target,
        )
        before = events[i - 1]["data"] if i else {}
        if target is DealStatus.AD:
            assert (before.get("signatureType"), before.get("status")) == ("Seller", "Completed")
        if target is DealStatus.SIGNED:
            assert (before.get("signatureType"), before.get("status")) == ("Buyer", "Completed")
        if target in (DealStatus.SHIPPING_PENDING, DealStatus.PICKUP_PENDING):
            assert before.get("status") == "Paid"
        if target is DealStatus.COMPLETED and status is not DealStatus.COMPLETED:
            after = events[i + 1]
            assert (after["event"], after["data"]["status"]) == ("payment.status", "PendingPayOut")
        status = target
    if any(e["event"] == "deal.status" and e["data"]["status"] == "Signed" for e in events):
        kinds = [e["event"] for e in events]
        signed = next(
            i
            for i, e in enumerate(events)
            if e["event"] == "deal.status" and e["data"]["status"] == "Signed"
        )
        if start == "Draft":  # the deal had no buyer: the seller approved an offer first
            assert "deal.offerApproved" in kinds[:signed]
