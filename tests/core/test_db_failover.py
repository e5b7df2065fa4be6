"""The failover drill's smaller form (scripts/failover-drill runs the whole one, with Patroni,
etcd and HAProxy): a primary and a synchronous streaming standby, `serve` and `worker` reaching
them through a multi-host URL with ``target_session_attrs=read-write``, a load of creates; the
primary crashes, and the standby is promoted a moment later (by hand here, as Patroni would).

While it happens the API answers only 2xx or 503 with Retry-After (never a 500, never no
answer); afterwards every create answered 201 is on the new primary, every deal there has its
event delivered, no event is delivered twice but by the worker's documented lease re-send, and
a token revoked on the new primary while the servers were switching is refused: the token
cache cannot keep it alive through a notification lost in the switch.

Runs private PostgreSQL servers (tests.pg_cluster); the one the rest of the suite uses is never
touched."""

import json
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from dealbroker.core.migrate import upgrade
from tests.conftest import BACKENDS
from tests.core.test_db_outage import Load
from tests.pg_cluster import Cluster, running, sql
from tests.processes import Server, Worker, cli, wait_until
from tests.receiver import start_receiver

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif("postgresql" not in BACKENDS, reason="a failover of PostgreSQL"),
]

PROMOTE_AFTER_SECONDS = 2.0
RECOVER_SECONDS = 20.0
LEASE_SECONDS = 2.0


@pytest.fixture
def pair() -> Iterator[tuple[Cluster, Cluster]]:
    """A primary that commits only once its standby has the commit (synchronous replication:
    an acknowledged write is on both), and that standby, streaming."""
    with running("dealbroker-primary-", settings={"synchronous_standby_names": "'*'"}) as primary:
        with running("dealbroker-standby-", standby_of=primary) as standby:
            wait_until(
                lambda: (
                    sql(
                        f"{primary.url}/postgres",
                        "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'",
                    )
                    == [("sync",)]
                ),
                30,
                "the standby streaming synchronously",
            )
            yield primary, standby


def _token(base: str, client_id: str, secret: str) -> str:
    answer = httpx.post(
        f"{base}/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(client_id, secret),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"]


def test_a_standby_promoted_after_the_primary_crashed_loses_nothing(pair, tmp_path):
    primary, standby = pair
    sql(f"{primary.url}/postgres", "CREATE DATABASE failover", autocommit=True)
    hosts = f"host=127.0.0.1:{primary.port}&host=127.0.0.1:{standby.port}"
    db = f"postgresql+asyncpg://postgres@/failover?{hosts}&target_session_attrs=read-write"
    upgrade(db)
    receiver = start_receiver()
    server = Server(db, tmp_path)
    worker = Worker(db, tmp_path, lease=LEASE_SECONDS)
    load = None
    try:
        worker.wait_ready()
        headers = {
            "Authorization": "Bearer "
            + _token(
                server.base, server.credential("client id"), server.credential("client secret")
            )
        }
        endpoint = httpx.post(
            f"{server.base}/integrations/v1/webhook-endpoints",
            json={"url": receiver.url},
            headers=headers,
        )
        assert endpoint.status_code == 201, endpoint.text
        # A second integration whose token the server has cached before the crash.
        other = json.loads(cli(db, "integrations", "create", "Other shop").stdout)
        other_bearer = {
            "Authorization": "Bearer "
            + _token(server.base, other["client_id"], other["client_secret"])
        }
        for _ in range(2):  # read, then served from the cache
            assert (
                httpx.get(f"{server.base}/deals/v1/deals", headers=other_bearer).status_code == 200
            )

        load = Load(server.base, headers)
        wait_until(lambda: load.statuses[201] >= 10, 30, f"creates before the crash: {load.bad}")
        primary.crash()
        crashed_at = time.monotonic()
        before = load.statuses[503]
        wait_until(lambda: load.statuses[503] > before, 20, f"503s without a primary: {load.bad}")
        time.sleep(max(0.0, PROMOTE_AFTER_SECONDS - (time.monotonic() - crashed_at)))
        standby.promote()
        promoted_at = time.monotonic()
        # Revoked on the new primary at once, while the servers may still be switching: its
        # notification may reach no listener, and the cache must not answer for it.
        rotated = cli(db, "integrations", "rotate-secret", other["client_id"])
        assert rotated.returncode == 0, rotated.stderr
        done = load.statuses[201]
        wait_until(lambda: load.succeeded_since(done + 3), RECOVER_SECONDS, "the API recovered")
        recovered_in = time.monotonic() - promoted_at
        refused = Counter(
            httpx.get(f"{server.base}/deals/v1/deals", headers=other_bearer, timeout=30).status_code
            for _ in range(20)
        )
        assert refused == {401: 20}, refused
        load.stop.set()
        load.thread.join(timeout=40)

        # Every answer was a success or a 503 problem with Retry-After.
        assert load.bad == [], server.output()
        assert set(load.statuses) <= {200, 201, 503}, load.statuses
        assert load.statuses[503] > 0  # the crash was seen
        assert recovered_in < RECOVER_SECONDS
        stored = {str(row[0]) for row in sql(f"{standby.url}/failover", "SELECT id FROM deals")}
        assert load.created <= stored  # every create answered 201 is on the new primary

        # Every deal on the new primary (acknowledged or not: a create may commit and its answer
        # be lost) has its creation's event delivered, by a worker that recovered by itself.
        def delivered() -> list[tuple[str, str]]:
            found = []
            for request in list(receiver.requests):
                body = json.loads(request.body)
                if body.get("event") == "deal.status":
                    found.append((request.headers["webhook-id"], body["data"]["dealId"]))
            return found

        wait_until(
            lambda: stored <= {deal for _, deal in delivered()},
            RECOVER_SECONDS + LEASE_SECONDS,
            f"every deal's event delivered; the worker printed:\n{worker.output()}",
        )
        # A delivery sent again is one whose record was lost in the switch (the lease re-send):
        # at most a batch's worth, never every event twice.
        copies = Counter(event_id for event_id, _ in delivered())
        twice = [event_id for event_id, count in copies.items() if count > 1]
        assert len(twice) <= max(1, len(copies) // 10), (len(twice), len(copies))
        printed = worker.output() + server.output()
        assert "Traceback" not in printed, printed
    finally:
        if load is not None:
            load.stop.set()
        server.stop()
        worker.close()
        receiver.close()
