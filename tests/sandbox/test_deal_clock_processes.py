"""A deal's own sandbox clock in real running processes: ``dealbroker serve`` answers the
sandbox (on PostgreSQL, with no worker of its own) and ``dealbroker worker`` fires deadlines and
delivers webhooks.

Two paid pickup deals of one integration; one deal's clock is moved to a few seconds before its
7 days to hand over end. The worker, not the request, then fires that deal's deadline: its
``deal.status`` webhooks (``Pickup_Expired``, then ``Refunded``) reach a loopback receiver, in
order of the deal's sequence, while the other deal's deadline stays 7 days off and sends nothing."""

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import SELLER
from tests.processes import Server, Worker, wait_until
from tests.receiver import Receiver, start_receiver

pytestmark = pytest.mark.server

DAY = 24 * 3600
MARGIN = 5  # seconds left on the moved deal's deadline: the worker fires it, not the request
FIRE_TIMEOUT = 30.0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = start_receiver()
    yield rec
    rec.close()


def _paid_pickup(api: httpx.Client, secret: dict[str, str]) -> str:
    created = api.post("/deals/v1/deals", json={"name": "Armchair", "price": 800, "seller": SELLER})
    assert created.status_code == 201, created.text
    deal_id = created.json()["id"]
    for name, body in (
        ("dealOffer", {"dealId": deal_id, "shippingType": "Pickup"}),
        ("paymentStatus", {"dealId": deal_id, "status": "Paid"}),
    ):
        answer = api.post(f"/webhooks/v1/{name}", json=body, headers=secret)
        assert answer.status_code in (200, 204), answer.text
    assert api.get(f"/deals/v1/deals/{deal_id}").json()["status"] == "Pickup_Pending"
    return deal_id


def _statuses(receiver: Receiver, deal_id: str) -> list[str]:
    """The ``deal.status`` webhooks the receiver got for the deal, in the deal's order
    (``deal_sequence``: a batch is delivered concurrently, so they may arrive out of order)."""
    bodies = [json.loads(r.body) for r in list(receiver.requests)]
    ours = [b for b in bodies if b["event"] == "deal.status" and b["data"]["dealId"] == deal_id]
    return [b["data"]["status"] for b in sorted(ours, key=lambda b: b["deal_sequence"])]


def test_the_worker_fires_a_deal_moved_on_its_own_clock_and_not_the_other(
    pg_url: str, tmp_path: Path, receiver: Receiver
) -> None:
    server = Server(pg_url, tmp_path)
    worker = Worker(pg_url, tmp_path)
    try:
        worker.wait_ready()
        token = httpx.post(
            f"{server.base}/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(server.credential("client id"), server.credential("client secret")),
        ).json()["access_token"]
        secret = {"webhook-secret": server.credential("webhook secret")}
        with httpx.Client(
            base_url=server.base, headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as api:
            endpoint = api.post("/integrations/v1/webhook-endpoints", json={"url": receiver.url})
            assert endpoint.status_code == 201, endpoint.text
            moved, other = _paid_pickup(api, secret), _paid_pickup(api, secret)
            wait_until(
                lambda: _statuses(receiver, other)[-1:] == ["Pickup_Pending"],
                FIRE_TIMEOUT,
                "the webhooks of the way to Pickup_Pending",
            )

            # To MARGIN seconds before its deadline, from what is left of it now (the deal was
            # paid a while ago on a busy machine: 7 days less MARGIN may already be past it).
            before = api.get(f"/sandbox/v1/deals/{moved}/clock", headers=secret).json()
            ((left,),) = [(t["dueInSeconds"],) for t in before["timers"]]
            assert 7 * DAY - 120 < left <= 7 * DAY
            answer = api.post(
                f"/sandbox/v1/deals/{moved}/clock/advance",
                json={"seconds": left - MARGIN},
                headers={**secret, "Idempotency-Key": str(uuid.uuid4())},
            )
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            assert (body["clockOffsetSeconds"], body["timersMoved"], body["timersFired"]) == (
                left - MARGIN,
                1,
                0,
            )

            wait_until(
                lambda: _statuses(receiver, moved)[-2:] == ["Pickup_Expired", "Refunded"],
                FIRE_TIMEOUT + MARGIN,
                "the moved deal's deadline to fire and its webhooks to arrive",
                interval=0.2,
            )
            assert api.get(f"/deals/v1/deals/{moved}").json()["status"] == "Refunded"

            # The other deal's time did not move: its deadline is 7 days off, nothing was sent.
            assert api.get(f"/deals/v1/deals/{other}").json()["status"] == "Pickup_Pending"
            clock = api.get(f"/sandbox/v1/deals/{other}/clock", headers=secret).json()
            assert clock["clockOffsetSeconds"] == 0
            ((trigger, due_in),) = [(t["trigger"], t["dueInSeconds"]) for t in clock["timers"]]
            assert trigger == "pickup_expired"
            assert 7 * DAY - 120 < due_in <= 7 * DAY
            assert _statuses(receiver, other)[-1] == "Pickup_Pending"
        worker.process.terminate()
        assert worker.wait() == 0, worker.output()
    finally:
        server.stop()
        worker.close()
    assert "Traceback" not in server.output(), server.output()
