"""The sandbox's carrier, from the integration's side: ``POST /webhooks/v1/parcelEvent`` books
the deal's parcel (walking the deal there first) and has the carrier tell an event, taken by the
same handler as Bring's pushes, with the real webhooks in order."""

from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from dealbroker.app import create_app
from dealbroker.core.settings import Settings
from tests.conftest import create_deal, make_settings
from tests.sandbox.calls import trigger


@pytest.fixture
def settings(db_url: str) -> Settings:
    return make_settings(db_url, carrier="simulated", secret_key="parcel-trigger-" + "k" * 32)


@pytest.fixture
async def app(settings: Settings, engine: AsyncEngine) -> AsyncIterator[object]:
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        yield application


async def _event(client, caller, deal_id: str, kind: str):  # type: ignore[no-untyped-def]
    return await trigger(
        client, "parcelEvent", {"dealId": deal_id, "type": kind}, secret=caller.webhook_secret
    )


async def test_a_draft_is_walked_to_a_booked_parcel_and_moved(client, caller) -> None:
    deal = await create_deal(client, caller, price=450)
    answer = await _event(client, caller, deal["id"], "picked_up")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["deal"]["status"] == "Shipping_In_Progress"
    assert body["deal"]["shipment"]["source"] == "carrier"
    assert body["deal"]["shipment"]["lastEvent"] == "picked_up"
    news = [e["data"]["type"] for e in body["events"] if e["event"] == "deal.shipment"]
    assert news == ["booked", "picked_up"]
    statuses = [e["data"]["status"] for e in body["events"] if e["event"] == "deal.status"]
    assert statuses[-2:] == ["Shipping_Pending", "Shipping_In_Progress"]
    answer = await _event(client, caller, deal["id"], "ready_for_pickup")
    assert answer.json()["deal"]["status"] == "Shipping_In_Progress"
    answer = await _event(client, caller, deal["id"], "delivered")
    assert answer.json()["deal"]["status"] == "Shipping_Arrived"


async def test_returned_refunds_and_a_closed_deal_is_refused(client, caller) -> None:
    deal = await create_deal(client, caller, price=450)
    await _event(client, caller, deal["id"], "picked_up")
    answer = await _event(client, caller, deal["id"], "returned")
    assert answer.json()["deal"]["status"] == "Refunded"
    again = await _event(client, caller, deal["id"], "delivered")
    assert again.status_code == 409
    assert again.json()["currentStatus"] == "Refunded"


async def test_lost_opens_the_dispute(client, caller) -> None:
    deal = await create_deal(client, caller, price=450)
    await _event(client, caller, deal["id"], "picked_up")
    answer = await _event(client, caller, deal["id"], "lost")
    assert answer.json()["deal"]["status"] == "Shipping_Review_Denied"


async def test_without_the_sandbox_carrier_there_is_none(db_url, engine, caller) -> None:
    application = create_app(make_settings(db_url), engine)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            deal = await create_deal(client, caller, price=450)
            answer = await _event(client, caller, deal["id"], "picked_up")
    assert answer.status_code == 409
