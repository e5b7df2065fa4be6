"""Offers, the lifecycle, webhook endpoints, event resends and recovery, sandbox scenarios and the
events cursor through the client, against a real server process: each test runs once with the
sync client and once with the async one (driven to its end on a loop of its own), so one test
body checks both."""

import asyncio
import inspect
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from dealbroker_client import (
    AsyncDealbrokerClient,
    ConflictError,
    DealbrokerClient,
    DealOfferEvent,
    DealStatus,
    DealStatusEvent,
    NotFoundError,
    OfferStatus,
    OtherEvent,
    WebhookVerifier,
)

from tests.client.conftest import Credentials
from tests.conftest import SELLER
from tests.processes import wait_until
from tests.receiver import Receiver, start_receiver
from tests.web.pages import forms, path

pytestmark = pytest.mark.server


class Awaited:
    """The async client with each coroutine method run to its end on ``runner``'s loop: it
    reads like the sync client, so a test drives either."""

    def __init__(self, client: AsyncDealbrokerClient, runner: asyncio.Runner) -> None:
        self._client, self._runner = client, runner

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._client, name)
        if not inspect.iscoroutinefunction(member):
            return member

        def run(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(member(*args, **kwargs))

        return run


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, creds: Credentials) -> Iterator[DealbrokerClient]:
    args = (creds.base, creds.client_id, creds.client_secret)
    if request.param == "sync":
        with DealbrokerClient(*args, webhook_secret=creds.webhook_secret) as client:
            yield client
        return
    with asyncio.Runner() as runner:
        async_client = AsyncDealbrokerClient(*args, webhook_secret=creds.webhook_secret)
        yield Awaited(async_client, runner)  # type: ignore[misc]
        runner.run(async_client.aclose())


@pytest.fixture
def hook() -> Iterator[Receiver]:
    receiver = start_receiver()
    yield receiver
    receiver.close()


def _offer_through(base: str, link_url: str, email: str) -> None:
    """A buyer sends an offer on the link's page, as a browser would."""
    with httpx.Client(base_url=base) as browser:
        page = browser.get(path(link_url))
        assert page.status_code == 200, page.text
        form = forms(page.text)["offer"]
        action = urljoin(path(link_url), form.pop("action"))
        data = {**form, "price": "450", "shippingType": "Pickup", "email": email}
        sent = browser.post(action, data=data)
        if sent.status_code == 200 and "data-confirm" in sent.text:
            (confirm,) = forms(sent.text).values()
            sent = browser.post(urljoin(action, confirm.pop("action")), data={**confirm, **data})
        assert sent.status_code == 303, sent.text


def test_offers_name_the_link_they_came_through(api, creds):
    deal = api.create_deal(name="Bookcase", price=500, seller=SELLER)
    link = api.create_offer_link(deal.id, buyer={"email": "ola@example.com"})
    _offer_through(creds.base, link.url, "ola@example.com")
    api.trigger_deal_offer(deal_id=deal.id, price=400)  # the sandbox's: made without a link

    offers = api.list_offers(deal.id)
    assert offers.page.total_count == 2
    sandbox, linked = offers.items  # newest first
    assert linked.offer_link_id == uuid.UUID(link.offer)
    assert (linked.buyer_email, linked.price, linked.status) == (
        "ola@example.com",
        450,
        OfferStatus.PENDING,
    )
    assert (sandbox.offer_link_id, sandbox.price) == (None, 400)
    assert api.list_offers(deal.id, page=2, page_size=1).items == [linked]

    events = api.list_events(event="deal.offer", deal_id=deal.id).items
    assert all(isinstance(e, DealOfferEvent) for e in events)
    by_offer = {e.data.id: e.data.offer_link_id for e in events}  # type: ignore[union-attr]
    assert by_offer == {linked.id: linked.offer_link_id, sandbox.id: None}


def test_a_deals_conversations(api):
    """A new deal has none yet; another deal id is not found. (Messages are written on the
    parties' pages; their shape is the OpenAPI document's, tests/client/test_openapi_in_step.)"""
    deal = api.create_deal(name="Lamp", price=300, seller=SELLER)
    empty = api.list_conversations(deal.id, page_size=5)
    assert (empty.items, empty.page.total_count, empty.page.page_size) == ([], 0, 5)
    with pytest.raises(NotFoundError):
        api.list_conversations(uuid.uuid4())


def test_the_lifecycle_document(api):
    lifecycle = api.get_lifecycle()
    assert lifecycle.initial_status is DealStatus.DRAFT
    assert {s.status for s in lifecycle.statuses} == set(DealStatus)
    assert lifecycle.status(DealStatus.COMPLETED).final
    assert not lifecycle.status("Draft").final
    leaving = lifecycle.transitions_from(DealStatus.DRAFT)
    assert any(t.to is DealStatus.CANCELLED and "integration" in t.actors for t in leaving)
    assert any(t.deadline is not None for t in lifecycle.transitions)
    assert {a.actor for a in lifecycle.actors} >= {"integration", "seller", "buyer"}
    assert api.ping().status


def test_a_webhook_endpoints_life(api, creds, hook: Receiver):
    # An event from before the endpoint existed, for the recovery below.
    deal = api.create_deal(name="Before the endpoint")
    earlier = api.trigger_deal_status(deal_id=deal.id, status="Ad").events[-1]
    assert isinstance(earlier, DealStatusEvent)

    endpoint = api.create_webhook_endpoint(
        hook.url, events=["deal.status"], description="Client test"
    )
    assert (endpoint.events, endpoint.description, endpoint.enabled) == (
        ["deal.status"],
        "Client test",
        True,
    )
    assert api.get_webhook_endpoint(endpoint.id) == endpoint
    assert endpoint.id in {e.id for e in api.list_webhook_endpoints()}

    changed = api.update_webhook_endpoint(endpoint.id, description="Renamed", events="all")
    assert (changed.events, changed.description, changed.url) == (None, "Renamed", hook.url)
    assert api.disable_webhook_endpoint(endpoint.id).enabled is False
    assert api.enable_webhook_endpoint(endpoint.id).enabled is True

    verifier = WebhookVerifier([creds.webhook_secret])

    def received(event_id: uuid.UUID) -> list[Any]:
        return [
            verifier.verify(r.body, r.headers)
            for r in list(hook.requests)
            if r.headers["webhook-id"] == str(event_id)
        ]

    sent = api.test_webhook_endpoint(endpoint.id)
    wait_until(lambda: received(sent.event_id), 20, "the test event delivered")
    (test_event,) = received(sent.event_id)
    assert isinstance(test_event, OtherEvent)
    assert test_event.event == "webhook.test"

    def attempted() -> bool:
        attempts = api.list_delivery_attempts(endpoint.id, page_size=100).items
        return any(a.event_id == sent.event_id and a.success for a in attempts)

    wait_until(attempted, 20, "the test event's attempt listed")

    since = earlier.created_at - timedelta(seconds=1)
    assert api.recover_webhook_endpoint(endpoint.id, since=since).queued >= 1
    wait_until(lambda: received(earlier.id), 20, "the earlier event recovered")
    assert api.resend_event(earlier.id, endpoint_id=endpoint.id).queued == 1
    wait_until(lambda: len(received(earlier.id)) == 2, 20, "the earlier event resent")
    assert received(earlier.id) == [earlier, earlier]  # the same event, the same webhook-id

    api.delete_webhook_endpoint(endpoint.id)
    with pytest.raises(NotFoundError):
        api.get_webhook_endpoint(endpoint.id)


def test_sandbox_scenarios(api):
    scenarios = {s.name: s for s in api.list_scenarios()}
    assert scenarios["pickup-completed"].shipping_type == "Pickup"

    result = api.run_scenario("carrier-completed")
    assert (result.scenario, result.status) == ("carrier-completed", DealStatus.COMPLETED)
    assert result.deal.id == result.deal_id
    assert result.deal.status is DealStatus.COMPLETED
    statuses = [e.data.status for e in result.events if isinstance(e, DealStatusEvent)]
    assert statuses[-1] is DealStatus.COMPLETED  # the events come typed, in order
    assert {e.data.deal_id for e in result.events} == {result.deal_id}  # type: ignore[union-attr]

    deal = api.create_deal(name="Scenario", price=300, seller=SELLER)
    cancelled = api.run_scenario("cancelled-with-pending-offer", deal_id=deal.id)
    assert cancelled.deal_id == deal.id
    assert cancelled.status is DealStatus.CANCELLED
    offers = [e for e in cancelled.events if isinstance(e, DealOfferEvent)]
    assert offers
    assert offers[0].data.offer_link_id is None
    with pytest.raises(ConflictError):
        api.run_scenario("carrier-completed", deal_id=deal.id)


def test_events_after_a_cursor(api):
    deal = api.create_deal(name="Cursor")
    first = api.list_events(deal_id=deal.id).items[-1]
    for status in ("Ad", "Cancelled"):
        api.trigger_deal_status(deal_id=deal.id, status=status)
    after = api.list_events(deal_id=deal.id, after=first.id, page_size=100).items
    assert [e.deal_sequence for e in after] == list(range(2, 2 + len(after)))  # oldest first
    assert after[-1].data.status is DealStatus.CANCELLED  # type: ignore[union-attr]
    assert api.get_event(after[0].id) == after[0]
    assert api.list_events(deal_id=deal.id, after=after[-1].id).items == []


def test_a_deals_own_clock(api):
    deal = api.create_deal(name="Own clock", price=300, seller=SELLER)
    other = api.create_deal(name="Other clock", price=300, seller=SELLER)
    before = api.get_deal_clock(deal.id)
    moved = api.advance_deal_clock(deal.id, 7200)
    assert (moved.deal_id, moved.clock_offset_seconds) == (
        deal.id,
        before.clock_offset_seconds + 7200,
    )
    assert moved.total_offset_seconds == (
        moved.clock_offset_seconds + moved.integration_clock_offset_seconds
    )
    clock = api.get_deal_clock(deal.id)
    assert clock.clock_offset_seconds == moved.clock_offset_seconds
    assert clock.clock_time > clock.now
    assert isinstance(clock.timers, list)
    assert api.get_deal_clock(other.id).clock_offset_seconds == 0  # the other deal's stays
