"""A deal's conversations for its integration: ``GET /deals/v1/deals/{dealId}/conversations``,
and the opt-in ``deal.message`` event (delivered only to endpoints that name it, listed by the
events API only when asked for)."""

import json
import uuid

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from standardwebhooks.webhooks import Webhook

from dealbroker.audit.service import Actor
from dealbroker.conversations import service as conversations
from dealbroker.conversations.service import Party
from dealbroker.events.tasks import DeliveryJob
from tests.conftest import Caller, create_deal, make_caller, make_settings
from tests.conversations.helpers import resolved
from tests.events.delivery import drain, register
from tests.receiver import Receiver, start_receiver


async def _link(client: httpx.AsyncClient, caller: Caller, deal_id: str, **body: object) -> str:
    response = await client.post(
        f"/deals/v1/deals/{deal_id}/offer", json=body, headers=caller.headers
    )
    assert response.status_code == 201, response.text
    return str(response.json()["url"])


async def _write(
    sessionmaker: async_sessionmaker[AsyncSession],
    url: str,
    author: Party,
    text: str,
    db_url: str,
) -> uuid.UUID:
    async with sessionmaker() as session, session.begin():
        link, deal = await resolved(session, url)
        message = await conversations.post(session, deal, link, author, text, make_settings(db_url))
        return message.id


def _path(deal_id: object) -> str:
    return f"/deals/v1/deals/{deal_id}/conversations"


async def test_the_integration_reads_its_deals_conversations(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    other: Caller,
    db_url: str,
) -> None:
    deal = await create_deal(client, caller)
    named = await _link(client, caller, deal["id"], buyer={"name": "Ola Nordmann"})
    anonymous = await _link(client, caller, deal["id"])
    asked = await _write(sessionmaker, named, Party.BUYER, "Is the frame 56 cm?", db_url)
    answer = await _write(sessionmaker, named, Party.SELLER, "Yes. Call 912 34 567", db_url)
    await _write(sessionmaker, anonymous, Party.BUYER, "Pay by bank transfer?", db_url)
    async with sessionmaker() as session, session.begin():
        await conversations.hide(
            session, uuid.UUID(deal["id"]), answer, Actor("operator:support@example.com")
        )

    response = await client.get(_path(deal["id"]), headers=caller.headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["page"] == {"pageSize": 10, "pageNumber": 1, "totalPages": 1, "totalCount": 2}
    latest, first = body["items"]  # the one with the latest message first
    assert set(first) == {
        "id",
        "offerLinkId",
        "buyerName",
        "createdAt",
        "lastMessageAt",
        "sellerBlocked",
        "buyerBlocked",
        "messages",
    }
    assert first["offerLinkId"] == named.rsplit("offer=", 1)[1]
    assert (first["buyerName"], latest["buyerName"]) == ("Ola Nordmann", None)
    assert (first["sellerBlocked"], first["buyerBlocked"]) == (False, False)
    assert first["createdAt"].endswith("Z")
    question, hidden = first["messages"]  # oldest first
    assert question == {
        "id": str(asked),
        "from": "buyer",
        "text": "Is the frame 56 cm?",
        "sentAt": question["sentAt"],
        "warnings": [],
        "reported": False,
        "hidden": False,
    }
    # Support hid the seller's answer: the integration sees that, not the words.
    assert hidden["id"] == str(answer)
    assert (hidden["from"], hidden["text"], hidden["hidden"], hidden["warnings"]) == (
        "seller",
        None,
        True,
        [],
    )
    assert [(m["text"], m["warnings"]) for m in latest["messages"]] == [
        ("Pay by bank transfer?", ["payment"])
    ]

    paged = await client.get(_path(deal["id"]), params={"pageSize": 1}, headers=caller.headers)
    assert [c["id"] for c in paged.json()["items"]] == [latest["id"]]
    assert paged.json()["page"]["totalPages"] == 2
    # Each conversation carries all its messages: at most 10 a page, said when more was asked.
    capped = await client.get(_path(deal["id"]), params={"pageSize": 100}, headers=caller.headers)
    assert capped.json()["page"] == {
        "pageSize": 10,
        "pageNumber": 1,
        "totalPages": 1,
        "totalCount": 2,
        "adjusted": ["pageSize"],
    }
    # Another integration's deal is not found, as with the other deal reads.
    assert (await client.get(_path(deal["id"]), headers=other.headers)).status_code == 404
    assert (await client.get(_path(uuid.uuid4()), headers=caller.headers)).status_code == 404
    assert (await client.get(_path("nope"), headers=caller.headers)).status_code == 400
    assert (await client.get(_path(deal["id"]))).status_code == 401


async def test_a_deal_without_messages_and_the_read_scope(
    client: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession], caller: Caller
) -> None:
    deal = await create_deal(client, caller)
    empty = await client.get(_path(deal["id"]), headers=caller.headers)
    assert empty.json() == {
        "page": {"pageSize": 10, "pageNumber": 1, "totalPages": 0, "totalCount": 0},
        "items": [],
    }
    writer = await make_caller(client, sessionmaker, "Writer only", scopes=["deals:write"])
    refused = await client.get(_path(deal["id"]), headers=writer.headers)
    assert refused.status_code == 403


async def test_the_message_event_is_opt_in(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    caller: Caller,
    receiver: Receiver,
    worker: DeliveryJob,
    db_url: str,
) -> None:
    everything = start_receiver()
    try:
        opted = await register(client, caller, receiver.url, events=["deal.message", "deal.offer"])
        assert opted["events"] == ["deal.message", "deal.offer"]
        await register(client, caller, everything.url)
        deal = await create_deal(client, caller)
        url = await _link(client, caller, deal["id"])
        message_id = await _write(sessionmaker, url, Party.BUYER, "Ring meg på 912 34 567", db_url)
        await drain(worker)
        got = [json.loads(r.body) for r in receiver.requests]
        assert [b["event"] for b in got] == ["deal.message"]
        request = receiver.requests[0]
        assert Webhook(caller.webhook_secret).verify(request.body, request.headers) == got[0]
        data = got[0]["data"]
        assert data["messageId"] == str(message_id)
        assert (data["dealId"], data["from"], data["warnings"]) == (deal["id"], "buyer", ["phone"])
        assert "text" not in data
        assert "Ring" not in request.body.decode()
        listed = await client.get(_path(deal["id"]), headers=caller.headers)
        assert listed.json()["items"][0]["id"] == data["conversationId"]
        # The endpoint that names no kind gets every kind of the interface, not this one.
        assert [json.loads(r.body)["event"] for r in everything.requests] == ["deal.status"]
    finally:
        everything.close()

    # The events API lists it only when asked for by name.
    plain = await client.get("/events/v1/events", headers=caller.headers)
    assert [e["event"] for e in plain.json()["items"]] == ["deal.status"]
    assert plain.json()["page"]["totalCount"] == 1
    asked = await client.get(
        "/events/v1/events", params={"event": "deal.message"}, headers=caller.headers
    )
    assert [e["id"] for e in asked.json()["items"]] == [got[0]["id"]]
    one = await client.get(f"/events/v1/events/{got[0]['id']}", headers=caller.headers)
    assert one.json()["event"] == "deal.message"


async def test_an_endpoint_names_deal_message_and_unnames_it(
    client: httpx.AsyncClient, caller: Caller, receiver: Receiver
) -> None:
    every_kind = [
        "deal.status",
        "signature.status",
        "deal.offer",
        "deal.offerApproved",
        "deal.offerDenied",
        "payment.status",
        "deal.shipment",
        "deal.message",
    ]
    created = await register(client, caller, receiver.url, events=every_kind)
    assert created["events"] == every_kind
    path = f"/integrations/v1/webhook-endpoints/{created['id']}"
    patched = await client.patch(path, json={"events": None}, headers=caller.headers)
    assert patched.status_code == 200
    assert patched.json()["events"] is None
    again = await client.patch(path, json={"events": ["deal.message"]}, headers=caller.headers)
    assert again.json()["events"] == ["deal.message"]
