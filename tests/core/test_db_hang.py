"""PostgreSQL hung (here: behind a loopback proxy that stops forwarding, as a hung server or a
network that drops everything looks to its clients): every statement has a time limit
(``DEALBROKER_DB_STATEMENT_TIMEOUT_SECONDS``), so the API answers 503 with Retry-After within
about that limit rather than after the whole hang, ``/readyz`` answers within its 0.5 s budget
(not ready), the worker logs each job's failure rather than blocking silently, and everything
recovers once the database answers again. The server's log says so in a few lines, each with
its process id, not a line per refused request."""

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import BACKENDS, SELLER, database_url
from tests.processes import Server, Worker, drop_database, wait_until
from tests.proxy import StallingProxy

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif("postgresql" not in BACKENDS, reason="a hung PostgreSQL server"),
]

STATEMENT_TIMEOUT = 1.0
# The longest a request may wait for its answer while the database hangs: the statement's
# timeout, the client's grace after it (``core.db.STATEMENT_TIMEOUT_GRACE``), and slack for a
# busy test machine; the pool's wait (``POOL_TIMEOUT``) and opening a connection are shorter.
ANSWER_WITHIN = STATEMENT_TIMEOUT + 1.0 + 1.5
POOL_TIMEOUT = 1.0
HANG_SECONDS = 15.0
LOAD_SECONDS = 9.0  # of the hang's: the rest is for what runs behind the requests to end
PROBE_BUDGET = 0.5  # ``core.ping.PROBE_TIMEOUT``


@pytest.fixture
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = database_url("postgresql", tmp_path_factory.mktemp("hang"), "hang")
    yield url
    drop_database(url)


class Load:
    """Requests in a loop from a few threads for ``LOAD_SECONDS``, each answer timed."""

    def __init__(self, base: str, requests: list[tuple[str, str, dict[str, object]]]) -> None:
        self.answers: list[tuple[str, float, httpx.Response]] = []
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self.threads = [
            threading.Thread(target=self._run, args=(base, *request), daemon=True)
            for request in requests
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, base: str, method: str, path: str, kwargs: dict[str, object]) -> None:
        with httpx.Client(base_url=base, timeout=60) as client:
            while time.monotonic() - self._started < LOAD_SECONDS:
                started = time.monotonic()
                response = client.request(method, path, **kwargs)  # type: ignore[arg-type]
                with self._lock:
                    self.answers.append((f"{method} {path}", time.monotonic() - started, response))

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=60)


def _json(lines: list[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def test_a_hung_database_is_503_within_the_statement_timeout_and_then_recovered(pg, tmp_path):
    url = make_url(pg)
    with StallingProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
        timeout = {"DEALBROKER_DB_STATEMENT_TIMEOUT_SECONDS": str(STATEMENT_TIMEOUT)}
        server = Server(
            proxied,
            tmp_path,
            DEALBROKER_LOG_FORMAT="json",
            DEALBROKER_EMBEDDED_WORKER="off",
            DEALBROKER_DB_POOL_TIMEOUT_SECONDS=str(POOL_TIMEOUT),
            **timeout,
        )
        worker = Worker(proxied, tmp_path, DEALBROKER_LOG_FORMAT="json", **timeout)
        try:
            worker.wait_ready()
            with httpx.Client(base_url=server.base, timeout=60) as client:
                token = client.post(
                    "/oauth2/token",
                    data={"grant_type": "client_credentials"},
                    auth=(server.credential("client id"), server.credential("client secret")),
                ).json()["access_token"]
                headers = {"Authorization": f"Bearer {token}"}

                def create(name: str) -> httpx.Response:
                    return client.post(
                        "/deals/v1/deals",
                        json={"name": name, "price": 100, "seller": SELLER},
                        headers={**headers, "Idempotency-Key": str(uuid.uuid4())},
                    )

                created = create("Before")
                assert created.status_code == 201, created.text
                deal = created.json()["id"]
                assert client.get("/readyz").status_code == 200
                server_before, worker_before = len(server.lines), len(worker.lines)

                proxy.stall()
                stalled_at = time.monotonic()
                body = {"name": "Hung", "price": 100, "seller": SELLER}
                load = Load(
                    server.base,
                    [
                        ("POST", "/deals/v1/deals", {"json": body, "headers": headers}),
                        ("POST", "/deals/v1/deals", {"json": body, "headers": headers}),
                        ("GET", f"/deals/v1/deals/{deal}", {"headers": headers}),
                        ("GET", "/deals/v1/deals", {"headers": headers}),
                        ("GET", "/deals/v1/deals", {"headers": headers}),
                    ],
                )
                probes: list[tuple[float, httpx.Response]] = []
                while time.monotonic() - stalled_at < LOAD_SECONDS:
                    started = time.monotonic()
                    probes.append((0.0, client.get("/readyz")))
                    probes[-1] = (time.monotonic() - started, probes[-1][1])
                    time.sleep(0.2)
                load.join()
                time.sleep(max(0.0, HANG_SECONDS - (time.monotonic() - stalled_at)))
                server_during = _json(server.lines[server_before:])
                worker_during = _json(worker.lines[worker_before:])
                proxy.resume()
                resumed_at = time.monotonic()

                wait_until(lambda: create("After").status_code == 201, 30, "the API recovered")
                recovered_in = time.monotonic() - resumed_at
                wait_until(lambda: client.get("/readyz").status_code == 200, 10, "ready again")
            failed = [
                str(line["message"]).split()[1]
                for line in worker_during
                if re.fullmatch(r"job \S+ failed; retrying: .*", str(line["message"]))
            ]
            for name in set(failed) - {"retention"}:  # which runs again in ten minutes
                wait_until(
                    lambda name=name: f"job {name} recovered after " in worker.output(),
                    30,
                    f"job {name} recovered",
                )
        finally:
            server.stop()
            worker.close()

    # Every request was answered 503 with Retry-After within about the statement timeout,
    # not after the hang: never a 500, never a wait for the database to come back.
    assert len(load.answers) >= 15, load.answers
    for what, elapsed, response in load.answers:
        assert response.status_code == 503, (what, response.text)
        assert response.headers["retry-after"] in ("1", "5")
        assert response.headers["content-type"] == "application/problem+json"
        assert elapsed < ANSWER_WITHIN, (what, elapsed)
    # /readyz kept to its budget, saying not ready.
    assert len(probes) >= 10
    assert all(response.status_code == 503 for _, response in probes)
    assert max(elapsed for elapsed, _ in probes) < PROBE_BUDGET + 0.3, probes
    assert recovered_in < 10

    # The server wrote the first of its refused requests, not a line each; every JSON line
    # with its process id.
    messages = [str(line["message"]) for line in server_during]
    assert sum(m.startswith("requests on the database failed; ") for m in messages) == 1, messages
    assert sum("rid=" in m for m in messages) <= 2, messages  # the outage's, the full pool's
    assert len(messages) <= 8, messages
    printed = _json(server.lines)
    assert printed
    assert all(line["pid"] == server.process.pid for line in printed)
    assert any(
        re.fullmatch(r"requests on the database recovered after \d+ failures in \d+ s", m)
        for m in map(str, (line["message"] for line in printed))
    ), server.output()
    assert "Traceback" not in server.output()

    # The worker said which jobs failed, once each, rather than blocking silently; then that
    # they ran again.
    assert failed, worker.output()
    assert len(failed) == len(set(failed)), worker.output()
    assert all(line["pid"] == worker.process.pid for line in _json(worker.lines))
    assert "Traceback" not in worker.output()
