"""Rotating the webhook secret: ``POST /integrations/v1/webhook-secret/rotate`` and
``dealbroker integrations rotate-webhook-secret``.

During the overlap window a delivery carries a signature under the old and the new secret, and
the sandbox triggers accept either; after it, only the new one. Deliveries go to a real receiver
on loopback and are verified with the Standard Webhooks library, as an integrator would.
"""

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from dealbroker.core import clock
from dealbroker.events.tasks import DeliveryJob
from dealbroker.integrations import service as integrations
from tests.conftest import create_deal, make_caller, row_counts
from tests.processes import cli

ROTATE = "/integrations/v1/webhook-secret/rotate"
ENDPOINTS = "/integrations/v1/webhook-endpoints"
DAY = timedelta(hours=24)


@pytest.fixture
def moved_clock():
    """A clock the test sets by hand (``moved_clock[0]``), starting at the real time: the
    Standard Webhooks verifier compares a delivery's timestamp with the real time."""
    now = [datetime.now(UTC)]
    clock.set_clock(lambda: now[0])
    yield now
    clock.reset_clock()


async def fresh(client, caller):
    """The caller with a token issued at the clock's current time."""
    response = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(caller.client_id, caller.client_secret),
    )
    assert response.status_code == 200, response.text
    return replace(caller, token=response.json()["access_token"])


async def rotate(client, caller, body=None, headers=None):
    sent = {**caller.headers, **(headers or {})}
    if body is None:
        return await client.post(ROTATE, headers=sent)
    return await client.post(ROTATE, json=body, headers=sent)


async def trigger(client, secret):
    """A sandbox trigger without a deal (it emits a dummy event): 200, or the refusal."""
    return await client.post("/webhooks/v1/dealStatus", headers={"webhook-secret": secret})


def verifies(secret: str, request) -> bool:
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


async def deliver(sessionmaker) -> int:
    job = DeliveryJob(sessionmaker, allow_private=True)
    sent = 0
    try:
        while handled := await job.run_once():
            sent += handled
    finally:
        await job.aclose()
    return sent


async def test_rotation_answers_the_new_secret_and_keeps_the_old_for_a_day(
    client, caller, moved_clock
):
    response = await rotate(client, caller)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"webhookSecret", "previousSecretExpiresAt"}
    assert body["webhookSecret"].startswith("whsec_")
    assert body["webhookSecret"] != caller.webhook_secret
    Webhook(body["webhookSecret"])  # a secret the Standard Webhooks libraries take
    expires = datetime.fromisoformat(body["previousSecretExpiresAt"])
    assert expires == moved_clock[0] + DAY


@pytest.mark.parametrize(
    ("hours_ago", "old_verifies"),
    [pytest.param(23, True, id="during-overlap"), pytest.param(25, False, id="after-overlap")],
)
async def test_deliveries_are_signed_with_both_secrets_during_the_overlap_only(
    client, caller, sessionmaker, receiver, moved_clock, hours_ago, old_verifies
):
    real_now = moved_clock[0]
    await client.post(ENDPOINTS, json={"url": receiver.url}, headers=caller.headers)
    moved_clock[0] = real_now - timedelta(hours=hours_ago)
    caller = await fresh(client, caller)
    new = (await rotate(client, caller)).json()["webhookSecret"]
    moved_clock[0] = real_now  # the delivery happens now, as the verifier's clock sees it
    caller = await fresh(client, caller)
    await create_deal(client, caller)

    assert await deliver(sessionmaker) == 1
    [request] = receiver.requests
    signatures = request.headers["webhook-signature"].split(" ")
    assert len(signatures) == (2 if old_verifies else 1)
    assert all(s.startswith("v1,") for s in signatures)
    assert verifies(new, request)
    assert verifies(caller.webhook_secret, request) is old_verifies
    assert json.loads(request.body)["event"] == "deal.status"


async def test_one_delivery_verifies_with_either_secret_and_a_stranger_with_neither(
    client, caller, other, sessionmaker, receiver, moved_clock
):
    await client.post(ENDPOINTS, json={"url": receiver.url}, headers=caller.headers)
    new = (await rotate(client, caller, {"overlapSeconds": 3600})).json()["webhookSecret"]
    await create_deal(client, caller)
    assert await deliver(sessionmaker) == 1
    [request] = receiver.requests
    assert verifies(caller.webhook_secret, request)
    assert verifies(new, request)
    assert not verifies(other.webhook_secret, request)


async def test_triggers_accept_either_secret_during_the_overlap_and_only_the_new_after(
    client, caller, moved_clock
):
    start = moved_clock[0]
    new = (await rotate(client, caller)).json()["webhookSecret"]
    moved_clock[0] = start + DAY - timedelta(seconds=1)
    assert (await trigger(client, caller.webhook_secret)).status_code == 200
    assert (await trigger(client, new)).status_code == 200

    moved_clock[0] = start + DAY
    refused = await trigger(client, caller.webhook_secret)
    assert refused.status_code == 401
    assert refused.json()["detail"] == "The webhook-secret is not valid."
    assert (await trigger(client, new)).status_code == 200


async def test_a_zero_overlap_ends_the_old_secret_at_once(client, caller, receiver, sessionmaker):
    response = await rotate(client, caller, {"overlapSeconds": 0})
    assert response.json()["previousSecretExpiresAt"] is None
    new = response.json()["webhookSecret"]
    assert (await trigger(client, caller.webhook_secret)).status_code == 401
    assert (await trigger(client, new)).status_code == 200

    await client.post(ENDPOINTS, json={"url": receiver.url}, headers=caller.headers)
    await create_deal(client, caller)
    assert await deliver(sessionmaker) >= 1
    request = receiver.requests[-1]
    assert len(request.headers["webhook-signature"].split(" ")) == 1
    assert verifies(new, request)
    assert not verifies(caller.webhook_secret, request)


async def test_a_second_rotation_ends_the_first_secret_at_once(client, caller):
    first = (await rotate(client, caller)).json()["webhookSecret"]
    second = (await rotate(client, caller)).json()["webhookSecret"]
    assert (await trigger(client, caller.webhook_secret)).status_code == 401
    assert (await trigger(client, first)).status_code == 200
    assert (await trigger(client, second)).status_code == 200


async def test_concurrent_rotations_are_serialised(client, caller, sessionmaker):
    """A rotation that starts while another is uncommitted waits for it and replaces its secret:
    both new secrets are valid and the original is not. Reading the row without its lock would
    keep the original and lose the first new secret."""

    async def rotate_in(session) -> str:
        rotated = await integrations.rotate_webhook_secret(session, caller.integration_id)
        return rotated.webhook_secret

    async with sessionmaker() as first_session:
        await first_session.begin()
        first = await rotate_in(first_session)
        second_task = asyncio.create_task(_in_own_transaction(sessionmaker, rotate_in))
        await asyncio.sleep(0.3)  # the second has read the row (or waits for it) by now
        await first_session.commit()
    second = await second_task
    answers = {
        s: (await trigger(client, s)).status_code for s in (caller.webhook_secret, first, second)
    }
    assert answers == {caller.webhook_secret: 401, first: 200, second: 200}


async def _in_own_transaction(sessionmaker, work):
    async with sessionmaker() as session, session.begin():
        return await work(session)


async def test_rotation_leaves_tokens_and_other_integrations_alone(client, caller, other):
    await rotate(client, caller)
    assert (await client.get("/deals/v1/deals", headers=caller.headers)).status_code == 200
    assert (await trigger(client, other.webhook_secret)).status_code == 200


async def test_an_idempotency_key_replays_the_same_secret_and_rotates_once(client, caller):
    key = {"Idempotency-Key": "rotate-1"}
    first = await rotate(client, caller, {"overlapSeconds": 600}, headers=key)
    again = await rotate(client, caller, {"overlapSeconds": 600}, headers=key)
    assert again.status_code == 200
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    # Rotated once: the original secret is still the valid previous one.
    assert (await trigger(client, caller.webhook_secret)).status_code == 200
    reused = await rotate(client, caller, {"overlapSeconds": 60}, headers=key)
    assert reused.status_code == 422


@pytest.mark.parametrize(
    ("send", "status", "detail"),
    [
        pytest.param({"json": {"overlapSeconds": 604801}}, 400, "less than or equal", id="long"),
        pytest.param({"json": {"overlapSeconds": -1}}, 400, "greater than or equal", id="neg"),
        pytest.param({"json": {"overlapSeconds": "60"}}, 400, "valid integer", id="string"),
        pytest.param({"json": {"overlap": 60}}, 400, "unknown field", id="unknown"),
        pytest.param(
            {"content": b"{", "headers": {"content-type": "application/json"}},
            400,
            "Malformed JSON",
            id="malformed",
        ),
        pytest.param(
            {"content": b"overlapSeconds=60", "headers": {"content-type": "text/plain"}},
            415,
            "application/json",
            id="not-json",
        ),
        pytest.param(
            {"content": b" " * 300_000, "headers": {"content-type": "application/json"}},
            413,
            "larger than",
            id="too-large",
        ),
    ],
)
async def test_bad_requests_rotate_nothing(client, caller, sessionmaker, send, status, detail):
    counts = await row_counts(sessionmaker)
    send = dict(send)  # the parameter is shared by both backends' runs
    headers = {**caller.headers, **send.pop("headers", {})}
    response = await client.post(ROTATE, headers=headers, **send)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert detail in response.json()["detail"]
    assert await row_counts(sessionmaker) == counts
    assert (await trigger(client, caller.webhook_secret)).status_code == 200


async def test_rotation_needs_a_token_with_write_scope(client, sessionmaker):
    reader = await make_caller(client, sessionmaker, "Reader", ["deals:read"])
    refused = await rotate(client, reader)
    assert refused.status_code == 403
    assert refused.json()["detail"] == "This token lacks the scope deals:write."
    assert (await client.post(ROTATE)).status_code == 401


async def test_the_cli_rotates_with_an_overlap(client, caller, db_url):
    done = await asyncio.to_thread(
        cli,
        db_url,
        "integrations",
        "rotate-webhook-secret",
        caller.client_id,
        "--overlap-seconds",
        "3600",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["client_id"] == caller.client_id
    new = out["webhook_secret"]
    assert new.startswith("whsec_")
    assert new != caller.webhook_secret
    expires = datetime.fromisoformat(out["previous_webhook_secret_expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(hours=1))) < timedelta(minutes=1)
    assert (await trigger(client, caller.webhook_secret)).status_code == 200
    assert (await trigger(client, new)).status_code == 200

    now_only = await asyncio.to_thread(
        cli,
        db_url,
        "integrations",
        "rotate-webhook-secret",
        caller.client_id,
        "--overlap-seconds",
        "0",
    )
    assert now_only.returncode == 0, now_only.stderr
    assert json.loads(now_only.stdout)["previous_webhook_secret_expires_at"] is None
    assert (await trigger(client, new)).status_code == 401


async def test_the_cli_refuses_a_bad_overlap_or_client(caller, db_url):
    too_long = await asyncio.to_thread(
        cli,
        db_url,
        "integrations",
        "rotate-webhook-secret",
        caller.client_id,
        "--overlap-seconds",
        "604801",
    )
    assert too_long.returncode == 2
    unknown = await asyncio.to_thread(
        cli, db_url, "integrations", "rotate-webhook-secret", "dbc_unknown"
    )
    assert unknown.returncode == 1
    assert "No integration with client id 'dbc_unknown'" in unknown.stderr
