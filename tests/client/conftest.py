"""A real ``dealbroker serve`` process (sandbox, its embedded worker on every backend) for the
client's tests, with the demo integration's credentials and a loopback webhook receiver."""

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import BACKENDS, database_url
from tests.processes import Server, drop_database
from tests.receiver import Receiver, start_receiver


@dataclass(frozen=True)
class Credentials:
    base: str
    client_id: str
    client_secret: str
    webhook_secret: str


@pytest.fixture(scope="package", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(f"client-{request.param}")
    url = database_url(request.param, tmp, "client")
    srv = Server(url, tmp, DEALBROKER_EMBEDDED_WORKER="on", DEALBROKER_WORKER_POLL_SECONDS="0.2")
    yield srv
    srv.stop()
    if request.param != "sqlite":
        drop_database(url)


@pytest.fixture(scope="package")
def creds(server: Server) -> Credentials:
    return Credentials(
        server.base,
        server.credential("client id"),
        server.credential("client secret"),
        server.credential("webhook secret"),
    )


@pytest.fixture(scope="package")
def receiver(creds: Credentials) -> Iterator[Receiver]:
    """A loopback receiver registered as the integration's webhook endpoint (every kind)."""
    receiver = start_receiver()
    token = httpx.post(
        f"{creds.base}/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(creds.client_id, creds.client_secret),
    ).json()["access_token"]
    created = httpx.post(
        f"{creds.base}/integrations/v1/webhook-endpoints",
        json={"url": receiver.url},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert created.status_code == 201, created.text
    yield receiver
    receiver.close()
