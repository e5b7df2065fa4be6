"""``dealbroker listen``: a real server process, the real command following its events API, and a
real loopback receiver verifying what arrives with the Standard Webhooks library."""

import json
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.cli.listening import Api, Listener
from tests.conftest import BACKENDS, SELLER, database_url
from tests.processes import Server, cli, drop_database, env, wait_until
from tests.receiver import Received, Receiver

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = database_url(request.param, tmp_path_factory.mktemp(f"listen-{request.param}"), "listen")
    yield url
    if request.param != "sqlite":
        drop_database(url)


@pytest.fixture(scope="module")
def server(db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(db, tmp_path_factory.mktemp("listen-cwd"))
    yield srv
    srv.stop()


def _args(server: Server, receiver: Receiver) -> list[str]:
    return [
        "--forward-to",
        receiver.url,
        "--api-url",
        server.base,
        "--client-id",
        server.credential("client id"),
    ]


def _verified_ids(receiver: Receiver, secret: str) -> list[str]:
    verifier = Webhook(secret)
    ids = []
    for request in list(receiver.requests):
        event = verifier.verify(request.body, request.headers)
        assert event["id"] == request.headers["webhook-id"]
        ids.append(event["id"])
    return ids


def test_new_events_are_forwarded_signed_in_order_each_once(server, db, receiver, tmp_path):
    api = Api(server)
    api.create_deal("Before listen")  # already there: not forwarded (listen starts from now)
    before = api.newest_event()
    receiver.answer(503)  # the first try fails: forwarded again, once
    listener = Listener(
        db,
        tmp_path,
        *_args(server, receiver),
        DEALBROKER_CLIENT_SECRET=server.credential("client secret"),
        DEALBROKER_WEBHOOK_SECRET=server.credential("webhook secret"),
    )
    try:
        deal_id = api.create_deal("During listen")
        api.trigger("dealOffer", {"dealId": deal_id, "shippingType": "Pickup"})
        api.trigger("dealOfferApproved", {"dealId": deal_id})
        api.trigger("signatureStatus", {"dealId": deal_id})
        expected = api.events_after(before)
        assert len(expected) >= 5
        wait_until(lambda: len(listener.lines) >= len(expected), 30, "every event forwarded")
    finally:
        assert listener.stop() == 0
    secret = server.credential("webhook secret")
    ids = _verified_ids(receiver, secret)
    assert ids[0] == ids[1] == expected[0]  # the retry after the 503
    assert ids[1:] == expected
    assert len(listener.lines) == len(expected)
    for line, event_id in zip(listener.lines, expected, strict=True):
        assert event_id in line
        assert line.endswith("[200]")
    assert "deal.status" in listener.lines[0]
    assert listener.errors[-1] == f"stopped after {len(expected)} events"


def test_replays_after_an_event_with_the_secret_from_the_database(server, db, receiver, tmp_path):
    api = Api(server)
    deal_id = api.create_deal("Replayed")
    first = api.newest_event()
    api.trigger("dealStatus", {"dealId": deal_id, "status": "Cancelled"})
    backlog = api.events_after(first)
    assert backlog
    listener = Listener(
        db,
        tmp_path,
        *_args(server, receiver),
        "--client-secret",
        server.credential("client secret"),
        "--after",
        first,
    )
    try:
        wait_until(lambda: len(listener.lines) >= len(backlog), 30, "the backlog forwarded")
        later = api.create_deal("After the backlog")
        wait_until(lambda: len(listener.lines) > len(backlog), 30, "the new event forwarded")
    finally:
        assert listener.stop(signal.SIGTERM) == 0
    ids = _verified_ids(receiver, server.credential("webhook secret"))
    assert ids[: len(backlog)] == backlog
    assert len(ids) == len(set(ids)) == len(backlog) + 1
    assert later in receiver.requests[-1].body.decode()


def test_refused_credentials_and_an_unknown_cursor_stop_with_a_message(server, db, tmp_path):
    base = ["--api-url", server.base, "--forward-to", "http://127.0.0.1:9/hook"]
    wrong = subprocess.run(
        [sys.executable, "-m", "dealbroker", "listen", *base, "--client-id", "dbc_x"],
        env=env(db, DEALBROKER_CLIENT_SECRET="nope", DEALBROKER_WEBHOOK_SECRET="whsec_AAAA"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert wrong.returncode == 1
    assert "invalid_client" in wrong.stderr
    unknown = subprocess.run(
        [
            sys.executable,
            "-m",
            "dealbroker",
            "listen",
            *base,
            "--client-id",
            server.credential("client id"),
            "--after",
            "9b2f6c1e-3d4a-4f5b-8c6d-7e8f9a0b1c2d",
        ],
        env=env(db, DEALBROKER_CLIENT_SECRET=server.credential("client secret")),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert unknown.returncode == 1
    assert "no event 9b2f6c1e" in unknown.stderr


def _token(server: Server, client_id: str, client_secret: str) -> dict[str, str]:
    token = httpx.post(
        f"{server.base}/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(client_id, client_secret),
    ).json()["access_token"]
    return {"Authorization": f"Bearer {token}"}


def _verifies(request: Received, secret: str) -> bool:
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


def test_a_rotation_while_listening_signs_with_both_secrets_for_the_overlap(
    server, db, receiver, tmp_path
):
    """Secrets read from the database are read again for each batch: an event forwarded during
    a rotation's overlap verifies with the old and the new secret, as a delivery does, and once
    the old one has stopped, with the new one only."""
    created = json.loads(cli(db, "integrations", "create", "Rotating").stdout)
    client_id, first_secret = created["client_id"], created["webhook_secret"]
    headers = _token(server, client_id, created["client_secret"])

    def create_deal(name: str) -> None:
        response = httpx.post(
            f"{server.base}/deals/v1/deals",
            json={"name": name, "price": 500, "seller": SELLER},
            headers=headers,
        )
        assert response.status_code == 201, response.text

    def rotate(overlap: int) -> str:
        done = cli(
            db,
            "integrations",
            "rotate-webhook-secret",
            client_id,
            "--overlap-seconds",
            str(overlap),
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["webhook_secret"]

    listener = Listener(
        db,
        tmp_path,
        "--forward-to",
        receiver.url,
        "--api-url",
        server.base,
        "--client-id",
        client_id,
        DEALBROKER_CLIENT_SECRET=created["client_secret"],
    )
    try:
        create_deal("Before the rotation")
        wait_until(lambda: len(receiver.requests) == 1, 30, "the first event forwarded")
        second_secret = rotate(overlap=3600)
        create_deal("During the overlap")
        wait_until(lambda: len(receiver.requests) == 2, 30, "the second event forwarded")
        third_secret = rotate(overlap=0)
        create_deal("After the overlap")
        wait_until(lambda: len(receiver.requests) == 3, 30, "the third event forwarded")
    finally:
        assert listener.stop() == 0
    before, during, after = receiver.requests
    assert _verifies(before, first_secret)
    assert not _verifies(before, second_secret)
    assert len(during.headers["webhook-signature"].split()) == 2
    assert _verifies(during, first_secret)
    assert _verifies(during, second_secret)
    assert _verifies(after, third_secret)
    assert not _verifies(after, second_secret)
    assert not _verifies(after, first_secret)


def test_an_unknown_client_id_without_a_secret_stops_with_a_message(server, db, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dealbroker",
            "listen",
            "--api-url",
            server.base,
            "--forward-to",
            "http://127.0.0.1:9/hook",
            "--client-id",
            "dbc_nobody",
        ],
        env=env(db, DEALBROKER_CLIENT_SECRET="nope"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert "dbc_nobody" in done.stderr
