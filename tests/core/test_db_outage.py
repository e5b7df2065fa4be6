"""A PostgreSQL restart under load: while the database is down the API answers 503
problem+json with Retry-After, never a 500; the server and the worker recover by themselves
within seconds once it is back; every create that got a 2xx is in the database, and the worker
delivers what is created afterwards.

Runs a private PostgreSQL server (tests.pg_cluster), so the one the rest of the suite uses is
never stopped."""

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from dealbroker.core.migrate import upgrade
from tests.conftest import BACKENDS, SELLER
from tests.pg_cluster import Cluster, running, sql
from tests.processes import Server, Worker, wait_until
from tests.receiver import start_receiver

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif("postgresql" not in BACKENDS, reason="an outage of PostgreSQL"),
]

DOWN_SECONDS = 4.0
RECOVER_SECONDS = 15.0


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with running("dealbroker-outage-") as pg:
        yield pg


class Load:
    """A bounded loop of creates (each with an Idempotency-Key) and reads, in a thread."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        self.base, self.headers = base, headers
        self.statuses: Counter[int] = Counter()
        self.created: set[str] = set()
        self.bad: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _check(self, response: httpx.Response) -> None:
        self.statuses[response.status_code] += 1
        if response.status_code == 503:
            if response.headers.get("content-type") != "application/problem+json" or not (
                response.headers.get("retry-after")
            ):
                self.bad.append(f"503 without problem+json and Retry-After: {response.text}")
        elif response.status_code >= 300:
            self.bad.append(f"{response.status_code}: {response.text[:300]}")

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30) as client:
            for _ in range(5_000):  # bounded, whatever happens
                if self.stop.is_set():
                    return
                try:
                    created = client.post(
                        "/deals/v1/deals",
                        json={"name": "Outage", "price": 100, "seller": SELLER},
                        headers={**self.headers, "Idempotency-Key": str(uuid.uuid4())},
                    )
                    self._check(created)
                    if created.status_code == 201:
                        deal_id = created.json()["id"]
                        self.created.add(deal_id)
                        read = client.get(f"/deals/v1/deals/{deal_id}", headers=self.headers)
                        self._check(read)
                        continue
                except httpx.HTTPError as exc:  # the server must answer, whatever the database
                    self.bad.append(f"no answer: {exc!r}")
                time.sleep(0.05)

    def succeeded_since(self, count: int) -> bool:
        return self.statuses[201] > count


def test_a_restart_of_postgresql_is_503_then_recovered_with_nothing_lost(cluster, tmp_path):
    sql(f"{cluster.url}/postgres", "CREATE DATABASE outage", autocommit=True)
    db = f"{cluster.url}/outage"
    upgrade(db)
    receiver = start_receiver()
    server = Server(db, tmp_path)
    worker = Worker(db, tmp_path)
    load = None
    try:
        worker.wait_ready()
        token = httpx.post(
            f"{server.base}/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(server.credential("client id"), server.credential("client secret")),
        ).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        endpoint = httpx.post(
            f"{server.base}/integrations/v1/webhook-endpoints",
            json={"url": receiver.url},
            headers=headers,
        )
        assert endpoint.status_code == 201, endpoint.text

        load = Load(server.base, headers)
        wait_until(lambda: load.statuses[201] >= 5, 30, "creates before the outage")
        cluster.stop()
        down_at = time.monotonic()
        before = load.statuses[503]
        wait_until(
            lambda: load.statuses[503] > before + 3, 20, f"503s while it is down: {load.bad}"
        )
        time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - down_at)))
        cluster.start()
        back_at = time.monotonic()
        done = load.statuses[201]
        wait_until(lambda: load.succeeded_since(done + 3), RECOVER_SECONDS, "the API recovered")
        recovered_in = time.monotonic() - back_at
        load.stop.set()
        load.thread.join(timeout=40)

        # Every answer was a success or a 503 problem with Retry-After.
        assert load.bad == [], server.output()
        assert load.statuses[500] == 0
        assert recovered_in < RECOVER_SECONDS
        stored = {str(row[0]) for row in sql(db, "SELECT id FROM deals")}
        assert load.created <= stored  # every create answered 201 is in the database

        # The worker recovered too: what is created now is delivered.
        after = httpx.post(
            f"{server.base}/deals/v1/deals",
            json={"name": "After the outage", "price": 100, "seller": SELLER},
            headers=headers,
        )
        assert after.status_code == 201
        try:
            wait_until(
                lambda: any(after.json()["id"] in r.body.decode() for r in receiver.requests),
                RECOVER_SECONDS,
                "the worker delivering again",
            )
        except AssertionError as exc:
            pending = sql(
                db,
                "SELECT status, attempts, next_attempt_at, last_status_code, last_error, now()"
                " FROM deliveries WHERE status = 'pending' ORDER BY created_at DESC LIMIT 5",
            )
            raise AssertionError(
                f"{exc}; deliveries pending: {pending}; the worker ({worker.process.poll()})"
                " printed:\n"
                f"{worker.output()}"
            ) from None
        # While it was down, the jobs' failures were single lines, not tracebacks, and not a
        # line per job and poll; once it was back, each said so: the delivery job when its run
        # ends, which may be a moment after the delivery (a short batch is held up to the
        # linger time before it is recorded).
        wait_until(
            lambda: "job deliveries recovered after " in worker.output(),
            10,
            f"the delivery job saying it recovered: {worker.output()}",
        )
        printed = worker.output()
        assert "Traceback" not in printed, printed
        assert printed.count("job deliveries failed") <= 2, printed
    finally:
        if load is not None:
            load.stop.set()
        server.stop()
        worker.close()
        receiver.close()
