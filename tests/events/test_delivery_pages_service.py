"""What the developer portal's delivery pages read: each attempt's request as sent, an
endpoint's deliveries by status, and one delivery with its attempts, only within the
integration that owns them."""

import json
import uuid

import pytest
from standardwebhooks.webhooks import Webhook

from dealbroker.audit import service as audit
from dealbroker.audit.service import Actor
from dealbroker.core.errors import NotFound
from dealbroker.events import service as events
from dealbroker.events.service import By

ENDPOINTS = "/integrations/v1/webhook-endpoints"


async def _endpoint(client, caller, url):
    created = await client.post(ENDPOINTS, json={"url": url}, headers=caller.headers)
    assert created.status_code == 201, created.text
    return uuid.UUID(created.json()["id"])


async def _test_event(client, caller, endpoint_id):
    sent = await client.post(f"{ENDPOINTS}/{endpoint_id}/test", headers=caller.headers)
    assert sent.status_code == 202, sent.text
    return sent.json()["eventId"]


async def test_an_attempt_keeps_the_headers_it_sent_and_its_body_is_the_events_payload(
    client, caller, receiver, worker, sessionmaker
):
    endpoint_id = await _endpoint(client, caller, receiver.url)
    event_id = await _test_event(client, caller, endpoint_id)
    receiver.answer(500, body=b"down")
    assert await worker.run_once() == 1
    async with sessionmaker() as session:
        page = await events.deliveries(session, caller.integration_id, endpoint_id, None, 1, 10)
        detail = await events.delivery(
            session, caller.integration_id, page.deliveries[0].delivery.id
        )
    (attempt,) = detail.attempts
    sent = receiver.requests[0]
    headers = json.loads(attempt.request_headers)
    assert headers == {k: sent.headers[k] for k in headers}
    assert set(headers) == {
        "content-type",
        "user-agent",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
    assert headers["webhook-id"] == event_id
    assert detail.event.payload.encode() == sent.body
    # The stored headers and body verify with the integration's secret, as the receiver's did.
    Webhook(caller.webhook_secret).verify(detail.event.payload, headers)
    assert caller.webhook_secret not in attempt.request_headers
    assert attempt.status_code == 500


async def test_deliveries_newest_first_filtered_by_status_and_paginated(
    client, caller, receiver, worker, sessionmaker
):
    endpoint_id = await _endpoint(client, caller, receiver.url)
    first = await _test_event(client, caller, endpoint_id)
    await worker.run_once()  # delivered
    receiver.answer(503)
    second = await _test_event(client, caller, endpoint_id)
    await worker.run_once()  # failed once, waits for a retry
    third = await _test_event(client, caller, endpoint_id)  # not tried yet
    async with sessionmaker() as session:
        everything = await events.deliveries(
            session, caller.integration_id, endpoint_id, None, 1, 2
        )
        rest = await events.deliveries(session, caller.integration_id, endpoint_id, None, 2, 2)
        pending = await events.deliveries(
            session, caller.integration_id, endpoint_id, "pending", 1, 10
        )
        delivered = await events.deliveries(
            session, caller.integration_id, endpoint_id, "succeeded", 1, 10
        )
        failed = await events.deliveries(
            session, caller.integration_id, endpoint_id, "failed", 1, 10
        )
    assert everything.total == 3
    ids = [str(w.event_id) for w in everything.deliveries + rest.deliveries]
    assert ids == [third, second, first]
    assert {str(w.event_id) for w in pending.deliveries} == {second, third}
    assert [str(w.event_id) for w in delivered.deliveries] == [first]
    assert failed.total == 0


async def test_another_integrations_endpoint_and_delivery_are_not_found(
    client, caller, other, receiver, worker, sessionmaker
):
    endpoint_id = await _endpoint(client, other, receiver.url)
    await _test_event(client, other, endpoint_id)
    await worker.run_once()
    async with sessionmaker() as session:
        theirs = await events.deliveries(session, other.integration_id, endpoint_id, None, 1, 10)
        delivery_id = theirs.deliveries[0].delivery.id
        with pytest.raises(NotFound):
            await events.deliveries(session, caller.integration_id, endpoint_id, None, 1, 10)
        with pytest.raises(NotFound):
            await events.delivery(session, caller.integration_id, delivery_id)
        with pytest.raises(NotFound):
            await events.health_of(session, caller.integration_id, endpoint_id)
        assert await events.health_of_integration(session, caller.integration_id) == []
        (mine,) = await events.health_of_integration(session, other.integration_id)
    assert mine.endpoint.id == endpoint_id
    assert mine.attempts == 1


async def test_a_members_disabling_is_the_integrations_own_and_audited(
    client, caller, receiver, sessionmaker
):
    endpoint_id = await _endpoint(client, caller, receiver.url)
    member = By(Actor("member:dev@market.example.com"), "req-1", operator=False)
    async with sessionmaker() as session, session.begin():
        endpoint = await events.change_enabled(
            session, caller.integration_id, endpoint_id, False, member
        )
    assert endpoint.disabled_reason == events.DISABLED_BY_INTEGRATION
    async with sessionmaker() as session:
        records, _total = await audit.page(session, 1, 10)
    (record,) = records
    assert (record.actor, record.action, record.request_id) == (
        "member:dev@market.example.com",
        "webhook.disable",
        "req-1",
    )
