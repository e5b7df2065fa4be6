"""End to end: the real ``dealbroker`` command, a server process on a loopback port, and a
standard OAuth2 client library (authlib) doing the client-credentials flow against it."""

import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from authlib.integrations.httpx_client import AsyncOAuth2Client

from tests.conftest import BACKENDS, SELLER, database_url
from tests.payments.bank import RAIL
from tests.processes import Server, cli, env, free_port, wait_until

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def server_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    # An empty database: ``serve`` must migrate it and create the demo integration itself.
    tmp = tmp_path_factory.mktemp(f"server-{request.param}")
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp / 'server.db'}"
    url = database_url(request.param, tmp, "server")
    from alembic import command

    from dealbroker.core.migrate import alembic_config

    command.downgrade(alembic_config(url), "base")  # start from nothing, as a new user would
    return url


@pytest.fixture(scope="module")
def server(server_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(server_db, tmp_path_factory.mktemp("cwd"))
    yield srv
    srv.stop()


def test_serve_prints_working_demo_credentials(server):
    assert server.banner[0].startswith("Created the demo integration")
    assert server.credential("client id").startswith("dbc_")
    assert server.credential("client secret").startswith("dbs_")
    assert server.credential("webhook secret").startswith("whsec_")


@pytest.mark.parametrize("auth_method", ["client_secret_basic", "client_secret_post"])
async def test_authlib_client_credentials_flow(server, auth_method):
    async with AsyncOAuth2Client(
        client_id=server.credential("client id"),
        client_secret=server.credential("client secret"),
        token_endpoint_auth_method=auth_method,
        base_url=server.base,
    ) as oauth:
        token = await oauth.fetch_token(
            f"{server.base}/oauth2/token", grant_type="client_credentials"
        )
        assert token["token_type"] == "Bearer"
        assert token["expires_in"] == 3600
        created = await oauth.post(
            "/deals/v1/deals", json={"name": "Lamp", "price": 250, "seller": SELLER}
        )
        assert created.status_code == 201
        deal = created.json()
        assert deal["url"].startswith(f"{server.base}/d/")  # links follow where the server listens
        fetched = await oauth.get(f"/deals/v1/deals/{deal['id']}")
        assert fetched.json() == deal
        listed = await oauth.get("/deals/v1/deals", params={"pageSize": 1})
        assert listed.json()["items"] == [deal]
        offer = await oauth.post(f"/deals/v1/deals/{deal['id']}/offer", json={"price": 200})
        assert offer.status_code == 201
        page = httpx.get(offer.json()["url"])
        assert page.status_code == 200
        assert deal["id"] in page.text
        cancelled = await oauth.post(f"/deals/{deal['id']}/status", json={"status": "Cancelled"})
        assert cancelled.json()["status"] == "Cancelled"


async def test_wrong_secret_is_refused_over_http(server):
    async with AsyncOAuth2Client(
        client_id=server.credential("client id"), client_secret="wrong"
    ) as oauth:
        with pytest.raises(Exception, match="invalid_client"):
            await oauth.fetch_token(f"{server.base}/oauth2/token", grant_type="client_credentials")


def test_openapi_is_served(server):
    spec = httpx.get(f"{server.base}/openapi.json").json()
    assert "/deals/v1/deals" in spec["paths"]


def test_cli_manages_integrations_against_the_running_server(server, server_db):
    created = cli(server_db, "integrations", "create", "Shop", "--scope", "deals:read")
    assert created.returncode == 0, created.stderr
    info = json.loads(created.stdout)
    assert info["scopes"] == ["deals:read"]
    assert info["active"] is True
    token = httpx.post(
        f"{server.base}/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(info["client_id"], info["client_secret"]),
    ).json()["access_token"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{server.base}/deals/v1/deals", headers=bearer).status_code == 200

    listed = cli(server_db, "integrations", "list")
    names = [json.loads(line)["name"] for line in listed.stdout.splitlines()]
    assert names == ["Demo integration", "Shop"]
    assert "secret" not in listed.stdout  # neither secret: the output may end up in a log
    assert info["webhook_secret"] not in listed.stdout

    shown = json.loads(cli(server_db, "integrations", "webhook-secret", info["client_id"]).stdout)
    assert shown == {"client_id": info["client_id"], "webhook_secret": info["webhook_secret"]}

    rotated = json.loads(cli(server_db, "integrations", "rotate-secret", info["client_id"]).stdout)
    assert rotated["client_secret"] != info["client_secret"]
    assert "webhook_secret" not in rotated  # this command issues the client secret only

    cli(server_db, "integrations", "rotate-webhook-secret", info["client_id"])
    during = json.loads(cli(server_db, "integrations", "webhook-secret", info["client_id"]).stdout)
    assert during["previous_webhook_secret"] == info["webhook_secret"]
    assert during["webhook_secret"] != info["webhook_secret"]
    assert during["previous_webhook_secret_expires_at"]
    assert httpx.get(f"{server.base}/deals/v1/deals", headers=bearer).status_code == 401

    assert cli(server_db, "integrations", "disable", info["client_id"]).returncode == 0
    refused = httpx.post(
        f"{server.base}/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(info["client_id"], rotated["client_secret"]),
    )
    assert refused.status_code == 401

    missing = cli(server_db, "integrations", "disable", "dbc_nope")
    assert missing.returncode == 1
    assert "No integration" in missing.stderr

    # Each change is in the audit trail, as the system user who ran it, never with a secret.
    trail = [json.loads(line) for line in cli(server_db, "audit", "list").stdout.splitlines()]
    mine = [r for r in trail if r["targetId"] == info["client_id"]]
    assert [(r["action"], r["actor"]) for r in mine] == [
        ("integration.disable", f"system:{pwd.getpwuid(os.getuid()).pw_name}"),
        ("integration.rotate_webhook_secret", f"system:{pwd.getpwuid(os.getuid()).pw_name}"),
        ("integration.rotate_secret", f"system:{pwd.getpwuid(os.getuid()).pw_name}"),
        ("integration.create", f"system:{pwd.getpwuid(os.getuid()).pw_name}"),
    ]
    assert (mine[0]["before"]["active"], mine[0]["after"]["active"]) == (True, False)
    assert "secret" not in json.dumps([r["after"] for r in mine] + [r["before"] for r in mine])


def test_second_start_creates_no_second_demo(server, server_db, tmp_path):
    again = Server(server_db, tmp_path)
    try:
        assert again.banner[0].startswith("Integrations exist already")
        assert not any("client secret:" in line for line in again.banner)
    finally:
        again.stop()


def test_cli_manages_webhooks(server, server_db):
    from tests.receiver import start_receiver

    receiver = start_receiver()
    try:
        client_id = server.credential("client id")
        created = cli(
            server_db,
            "webhooks",
            "create",
            "--client-id",
            client_id,
            receiver.url,
            "--event",
            "webhook.test",
            "--description",
            "cli",
        )
        assert created.returncode == 2  # webhook.test is not a kind one subscribes to
        assert "events" in created.stderr
        # The module's earlier tests emitted events too: the recovery below looks from here.
        since = datetime.now(UTC).replace(tzinfo=None, microsecond=0).isoformat()
        created = cli(
            server_db,
            "webhooks",
            "create",
            "--client-id",
            client_id,
            receiver.url,
            "--description",
            "cli",
        )
        assert created.returncode == 0, created.stderr
        endpoint = json.loads(created.stdout)
        listed = cli(server_db, "webhooks", "list", "--client-id", client_id)
        assert endpoint["id"] in listed.stdout
        tested = cli(server_db, "webhooks", "test", "--client-id", client_id, endpoint["id"])
        event_id = json.loads(tested.stdout)["eventId"]
        # The server embeds the worker on SQLite; on PostgreSQL a worker process delivers.
        worker = None
        if not server_db.startswith("sqlite"):
            worker = subprocess.Popen(
                [sys.executable, "-m", "dealbroker", "worker"], env=env(server_db)
            )
        try:
            deadline = time.monotonic() + 20
            while not any(r.headers.get("webhook-id") == event_id for r in receiver.requests):
                assert time.monotonic() < deadline, "the test event was not delivered"
                time.sleep(0.1)
        finally:
            if worker is not None:
                worker.terminate()
                assert worker.wait(timeout=20) == 0
        attempts = cli(server_db, "webhooks", "attempts", "--client-id", client_id, endpoint["id"])
        assert json.loads(attempts.stdout.splitlines()[0])["eventId"] == event_id
        recovered = cli(
            server_db,
            "webhooks",
            "recover",
            "--client-id",
            client_id,
            endpoint["id"],
            "--since",
            since,
            "--now",
        )
        assert json.loads(recovered.stdout) == {"queued": 0}  # the test event arrived
        disabled = cli(server_db, "webhooks", "disable", "--client-id", client_id, endpoint["id"])
        assert json.loads(disabled.stdout)["enabled"] is False
        deleted = cli(server_db, "webhooks", "delete", "--client-id", client_id, endpoint["id"])
        assert deleted.returncode == 0
        # Every change in the audit trail (reading them is not recorded), newest first.
        trail = [json.loads(line) for line in cli(server_db, "audit", "list").stdout.splitlines()]
        mine = [r for r in trail if r["targetId"] == endpoint["id"]]
        assert [r["action"] for r in mine] == [
            "webhook.delete",
            "webhook.disable",
            "webhook.recover",
            "webhook.test",
            "webhook.create",
        ]
        assert (mine[1]["before"]["enabled"], mine[1]["after"]["enabled"]) == (True, False)
        assert mine[1]["after"]["disabledReason"] == "disabled by dealbroker's operators"
        assert mine[2]["after"]["waiting"] is True
        assert mine[3]["after"]["eventId"] == event_id
        assert mine[0]["after"] is None  # deleted: what it was is before
        assert {(r["after"] or r["before"])["clientId"] for r in mine} == {client_id}
    finally:
        receiver.close()


def _sandbox(server, name: str, body: dict) -> httpx.Response:
    response = httpx.post(
        f"{server.base}/webhooks/v1/{name}",
        json=body,
        headers={"webhook-secret": server.credential("webhook secret")},
    )
    assert response.status_code in (200, 204), response.text
    return response


async def _paid_pickup_deal(server) -> tuple[str, AsyncOAuth2Client]:
    oauth = AsyncOAuth2Client(
        client_id=server.credential("client id"),
        client_secret=server.credential("client secret"),
        base_url=server.base,
    )
    await oauth.fetch_token(f"{server.base}/oauth2/token", grant_type="client_credentials")
    deal = (
        await oauth.post("/deals/v1/deals", json={"name": "Chair", "price": 300, "seller": SELLER})
    ).json()
    _sandbox(server, "dealOffer", {"dealId": deal["id"], "shippingType": "Pickup"})
    _sandbox(server, "dealOfferApproved", {"dealId": deal["id"]})
    _sandbox(server, "signatureStatus", {"dealId": deal["id"]})
    _sandbox(server, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
    assert (await oauth.get(f"/deals/v1/deals/{deal['id']}")).json()["status"] == "Pickup_Pending"
    return deal["id"], oauth


async def test_cli_resolves_disputes(server, server_db):
    deal_id, oauth = await _paid_pickup_deal(server)
    try:
        _sandbox(server, "dealStatus", {"dealId": deal_id, "status": "Pickup_Denied"})
        listed = cli(server_db, "disputes", "list")
        assert deal_id in listed.stdout
        both = cli(server_db, "disputes", "resolve", deal_id, "--release", "--refund")
        assert both.returncode == 2
        resolved = cli(server_db, "disputes", "resolve", deal_id, "--refund")
        assert resolved.returncode == 0, resolved.stderr
        assert json.loads(resolved.stdout) == {
            "dealId": deal_id,
            "status": "Refunded",
            "paymentStatus": "Refunded",
            "return": None,
        }
        again = cli(server_db, "disputes", "resolve", deal_id, "--release")
        assert again.returncode == 1
        assert "cannot move" in again.stderr
        trail = [json.loads(line) for line in cli(server_db, "audit", "list").stdout.splitlines()]
        decided = [r for r in trail if r["action"] == "dispute.resolve"]
        assert len(decided) == 1  # the refused second decision left no record
        assert decided[0]["targetId"] == deal_id
        assert decided[0]["actor"] == f"system:{pwd.getpwuid(os.getuid()).pw_name}"
        assert decided[0]["before"] == {"status": "Pickup_Denied"}
        assert decided[0]["after"]["outcome"] == "refund"
        assert decided[0]["after"]["status"] == "Refunded"
        deal = (await oauth.get(f"/deals/v1/deals/{deal_id}")).json()
        assert (deal["status"], deal["paymentStatus"]) == ("Refunded", "Refunded")
    finally:
        await oauth.aclose()


async def test_cli_decides_a_return_then_refund(server, server_db):
    """Disputes decided on evidence: the queue shows the decision date (and whether it has
    passed), the operator decides a return then refund with the seller's address and a reason,
    and deals show lists it."""
    deal_id, oauth = await _paid_pickup_deal(server)
    try:
        _sandbox(server, "dealStatus", {"dealId": deal_id, "status": "Pickup_Denied"})
        (queued,) = [
            row
            for row in map(json.loads, cli(server_db, "disputes", "list").stdout.splitlines())
            if row["dealId"] == deal_id
        ]
        assert queued["decideBy"] is not None
        assert (queued["overdue"], queued["return"]) == (False, None)
        for refused in (
            ("--return-then-refund",),  # the address is needed
            ("--refund", "--return-address", "Storgata 1"),  # and only goes with a return
            ("--return-then-refund", "--return-address", "x" * 501),
            ("--release", "--reason", "x" * 2001),
        ):
            answer = cli(server_db, "disputes", "resolve", deal_id, *refused)
            assert answer.returncode == 2, refused
            assert answer.stderr.startswith("error: ")
        decided = cli(
            server_db,
            "disputes",
            "resolve",
            deal_id,
            "--return-then-refund",
            "--return-address",
            "Kari Nordmann, Storgata 1, 0155 Oslo",
            "--reason",
            "The photos show a crack.",
        )
        assert decided.returncode == 0, decided.stderr
        assert json.loads(decided.stdout) == {
            "dealId": deal_id,
            "status": "Pickup_Denied",  # the money stays held while the item goes back
            "paymentStatus": "Paid",
            "return": {
                "address": "Kari Nordmann, Storgata 1, 0155 Oslo",
                "carrier": None,
                "tracking": None,
                "sentAt": None,
            },
        }
        twice = cli(
            server_db,
            "disputes",
            "resolve",
            deal_id,
            "--return-then-refund",
            "--return-address",
            "A",
        )
        assert twice.returncode == 1
        assert "already under way" in twice.stderr
        shown = json.loads(cli(server_db, "deals", "show", deal_id).stdout)
        assert shown["deal"]["decisionReason"] == "The photos show a crack."
        assert shown["deal"]["disputeReturn"]["address"].startswith("Kari Nordmann")
        assert [d["trigger"] for d in shown["deadlines"]][-1] == "return_not_sent"
        # The operator's word is the last: a refund during the return ends it.
        refunded = cli(server_db, "disputes", "resolve", deal_id, "--refund")
        assert json.loads(refunded.stdout)["status"] == "Refunded"
    finally:
        await oauth.aclose()


async def test_cli_moves_the_sandbox_clock(server, server_db):
    deal_id, oauth = await _paid_pickup_deal(server)
    try:
        moved = cli(
            server_db,
            "sandbox",
            "advance-clock",
            "--client-id",
            server.credential("client id"),
            "--seconds",
            str(7 * 24 * 3600),
        )
        assert moved.returncode == 0, moved.stderr
        report = json.loads(moved.stdout)
        # Not counted: the integration's other deals (this module's other tests) fall due too,
        # and the server's own worker may fire any of them between the command's two
        # transactions (moving the timers, then firing them). Each fires once: the deal's refund.
        assert report["timersFired"] >= 0
        deal = (await oauth.get(f"/deals/v1/deals/{deal_id}")).json()
        assert (deal["status"], deal["paymentStatus"]) == ("Refunded", "Refunded")
    finally:
        await oauth.aclose()


async def test_cli_moves_one_deals_clock(server, server_db):
    moved_id, oauth = await _paid_pickup_deal(server)
    other_id, other_oauth = await _paid_pickup_deal(server)
    try:
        args = ["--client-id", server.credential("client id"), "--seconds", str(7 * 24 * 3600)]
        moved = cli(server_db, "sandbox", "advance-clock", *args, "--deal", moved_id)
        assert moved.returncode == 0, moved.stderr
        report = json.loads(moved.stdout)
        assert (report["dealId"], report["clockOffsetSeconds"]) == (moved_id, 7 * 24 * 3600)
        assert report["timersMoved"] == 1
        assert report["timersFired"] in (0, 1)  # 0: the server's worker fired it first
        deal = (await oauth.get(f"/deals/v1/deals/{moved_id}")).json()
        assert (deal["status"], deal["paymentStatus"]) == ("Refunded", "Refunded")
        other = (await oauth.get(f"/deals/v1/deals/{other_id}")).json()
        assert other["status"] == "Pickup_Pending"
        unknown = cli(server_db, "sandbox", "advance-clock", *args, "--deal", str(uuid.uuid4()))
        assert unknown.returncode != 0
        assert "No deal" in unknown.stderr
    finally:
        await oauth.aclose()
        await other_oauth.aclose()


PRODUCTION = {
    "DEALBROKER_ENVIRONMENT": "production",
    "DEALBROKER_SECRET_KEY": "p" * 40,
    "DEALBROKER_SUPPORT_EMAIL": "support@market.example.com",
    "DEALBROKER_SIMPLE_SIGNATURE": "true",
}


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_production_refuses_to_start_with_the_simulated_provider(command, tmp_path):
    """Production must not start on the simulated provider: it would complete and pay out
    deals with no money moved."""
    database = tmp_path / "production.db"
    port = free_port()
    args = [command, "--port", str(port)] if command == "serve" else [command]
    process = subprocess.Popen(
        [sys.executable, "-m", "dealbroker", *args],
        env=env(f"sqlite+aiosqlite:///{database}", **PRODUCTION),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: the simulated payment provider")
    assert "sandbox" in lines[0]
    assert not database.exists()  # refused before migrating
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))


def test_production_refuses_to_start_without_a_support_contact(tmp_path):
    """Every page and message shows the person to ask: production does not start without one,
    and says which setting it needs in one line."""
    database = tmp_path / "production.db"
    without = {k: v for k, v in PRODUCTION.items() if k != "DEALBROKER_SUPPORT_EMAIL"}
    done = subprocess.run(
        [sys.executable, "-m", "dealbroker", "worker"],
        env=env(f"sqlite+aiosqlite:///{database}", **without, **REAL_MONEY),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "DEALBROKER_SUPPORT_EMAIL" in lines[0]
    assert not database.exists()


REAL_MONEY = {
    "DEALBROKER_PAYMENT_PROVIDER": "stripe",
    "DEALBROKER_STRIPE_SECRET_KEY": "sk_test_production_test_key",
    "DEALBROKER_STRIPE_PUBLISHABLE_KEY": "pk_test_production_test_key",
    "DEALBROKER_STRIPE_WEBHOOK_SECRET": "whsec_production_test_secret",
    **RAIL,
}


def test_production_serves_on_real_money_and_prints_no_credentials(tmp_path):
    """With Stripe and the bank-file rail production starts; its output is its log, so it
    creates no demo integration and prints no credential: the operator registers one."""
    database = f"sqlite+aiosqlite:///{tmp_path / 'production.db'}"
    server = Server(database, tmp_path, **PRODUCTION, **REAL_MONEY)
    try:
        assert server.banner[0].startswith("Production: integrations are registered with")
        assert httpx.get(f"{server.base}/readyz").status_code == 200
    finally:
        server.stop()
    assert "secret" not in server.output().lower()
    # The operator's choice of typed-name signatures, said at start.
    assert "Production: signatures are by typed name, not eID." in server.output()
    listed = cli(database, "integrations", "list")
    assert (listed.returncode, listed.stdout) == (0, "")


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_production_refuses_to_start_without_eid_or_the_simple_signature(command, tmp_path):
    """Production signs with eID, unless the operator says typed names are enough."""
    database = tmp_path / "production.db"
    without = {k: v for k, v in PRODUCTION.items() if k != "DEALBROKER_SIMPLE_SIGNATURE"}
    args = [command, "--port", str(free_port())] if command == "serve" else [command]
    done = subprocess.run(
        [sys.executable, "-m", "dealbroker", *args],
        env=env(f"sqlite+aiosqlite:///{database}", **without, **REAL_MONEY),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "DEALBROKER_EID_ISSUER" in lines[0]
    assert "DEALBROKER_SIMPLE_SIGNATURE" in lines[0]
    assert not database.exists()


def test_sandbox_worker_starts_and_stops_on_sigterm(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "dealbroker", "worker"],
        env=env(database_url("sqlite", tmp_path, "worker")),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        started = next((line for line in process.stderr if "running jobs:" in line), None)
        assert started is not None, "the worker exited without starting"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        assert "stopped after 0 deliveries" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_serve_finishes_a_request_in_flight_on_sigterm(tmp_path):
    """SIGTERM while a request is half received: the server stops taking connections, answers
    the request it has (201, stored), and shuts down cleanly."""
    database = database_url("sqlite", tmp_path, "graceful")
    server = Server(database, tmp_path, DEALBROKER_LOG_LEVEL="info")
    try:
        token = httpx.post(
            f"{server.base}/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(server.credential("client id"), server.credential("client secret")),
        ).json()["access_token"]
        body = json.dumps({"name": "In flight", "price": 100, "seller": SELLER}).encode()
        head = (
            f"POST /deals/v1/deals HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as connection:
            connection.sendall(head + body[:10])
            time.sleep(0.5)  # the server is reading this request
            server.process.send_signal(signal.SIGTERM)
            wait_until(lambda: _refused(server.port), 10, "the server to stop taking connections")
            connection.sendall(body[10:])
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
        deal_id = json.loads(answer.split(b"\r\n\r\n", 1)[1])["id"]
        # Done, uvicorn ends the process with the signal it was sent, after the shutdown (which
        # systemd counts as a clean stop of a service).
        assert server.process.wait(timeout=20) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in server.output()
    finally:
        server.stop()
    shown = cli(database, "deals", "show", deal_id)
    assert shown.returncode == 0, shown.stderr
    assert "In flight" in shown.stdout


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False
