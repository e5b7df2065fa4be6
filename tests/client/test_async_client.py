"""The asynchronous client against a real server process on loopback, and its likeness to the
synchronous one."""

import importlib.util
import inspect
import uuid
from pathlib import Path

import pytest
from dealbroker_client import (
    AsyncDealbrokerClient,
    DealbrokerClient,
    DealStatus,
    DealStatusEvent,
    IllegalTransitionError,
    InvalidInputError,
    WebhookVerifier,
)

from tests.client.conftest import Credentials
from tests.conftest import SELLER
from tests.processes import wait_until
from tests.receiver import Receiver

pytestmark = pytest.mark.server


def _client(creds: Credentials) -> AsyncDealbrokerClient:
    return AsyncDealbrokerClient(
        creds.base, creds.client_id, creds.client_secret, webhook_secret=creds.webhook_secret
    )


async def test_create_page_change_replay_and_errors(creds):
    async with _client(creds) as client:
        created = [await client.create_deal(name=f"Async {i}", seller=SELLER) for i in range(3)]
        ids = [d.id async for d in client.iter_deals(page_size=2)]
        assert ids[:3] == [d.id for d in reversed(created)]
        assert len(ids) == len(set(ids))

        cancelled = await client.cancel_deal(created[0].id)
        assert cancelled.status is DealStatus.CANCELLED
        with pytest.raises(IllegalTransitionError):
            await client.cancel_deal(created[0].id)

        key = f"async-{uuid.uuid4()}"
        first = await client.create_deal(name="Once", idempotency_key=key)
        assert await client.create_deal(name="Once", idempotency_key=key) == first

        with pytest.raises(InvalidInputError) as invalid:
            await client.create_offer_link(created[1].id, buyer_redirect_url="not a url")
        assert invalid.value.status == 405
        assert invalid.value.errors[0].field == "buyerRedirectUrl"


async def test_a_webhook_verifies_into_a_typed_event(creds, receiver: Receiver):
    verifier = WebhookVerifier([creds.webhook_secret])
    async with _client(creds) as client:
        deal = await client.create_deal(name="Async webhook")
        result = await client.trigger_deal_status(deal_id=deal.id, status="Ad")
        emitted = result.events[-1]  # after the seller's signature, which publishing needs
        assert isinstance(emitted, DealStatusEvent)
        caught_up = [e async for e in client.iter_events(deal_id=deal.id)]
        assert emitted in caught_up

    def delivered() -> DealStatusEvent | None:
        for request in list(receiver.requests):
            if request.headers["webhook-id"] == str(emitted.id):
                event = verifier.verify(request.body, request.headers)
                assert isinstance(event, DealStatusEvent)
                return event
        return None

    wait_until(lambda: delivered() is not None, 20, "the deal.status event delivered")
    event = delivered()
    assert event is not None
    assert (event.data.deal_id, event.data.status) == (deal.id, DealStatus.AD)


def test_the_two_clients_offer_the_same_methods():
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    sync, async_ = public(DealbrokerClient), public(AsyncDealbrokerClient)
    assert set(sync) - {"close"} == set(async_) - {"aclose"}
    for name in set(sync) & set(async_):
        assert list(sync[name].parameters) == list(async_[name].parameters), name


def test_the_sync_client_is_generated_from_the_async_one():
    """``client.py`` is ``aio.py`` without ``async`` and ``await``: rewritten by the script, never
    by hand, so each method is written once."""
    script = Path(__file__).parents[2] / "clients" / "python" / "generate_sync.py"
    loaded = importlib.util.spec_from_file_location("generate_sync", script)
    assert loaded is not None
    assert loaded.loader is not None
    generator = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(generator)
    assert generator.TARGET.read_text() == generator.generate(), (
        "client.py is out of date: run python clients/python/generate_sync.py"
    )
