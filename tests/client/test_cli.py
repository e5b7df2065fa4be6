"""The client package's ``dealbroker-client`` command, run as a real process from a virtual
environment holding only the client, against the real server on loopback: a whole sandbox deal
driven by ``trigger`` and forwarded by ``listen`` to a receiver that verifies every signature,
a restart that resumes without losing or repeating an event, the ``--events`` filter, and the
one-line errors for bad credentials, an unknown deal and an unreachable server."""

import json
import queue
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from dealbroker_client import WebhookVerificationError, WebhookVerifier, signed_headers

from tests.client.conftest import Credentials
from tests.client_venv import ClientVenv
from tests.processes import Server, free_port
from tests.receiver import Receiver, start_receiver

pytestmark = pytest.mark.server


@pytest.fixture
def env(client_venv: ClientVenv, creds: Credentials, tmp_path: Path) -> dict[str, str]:
    return client_venv.env(
        XDG_STATE_HOME=str(tmp_path / "state"),  # listen's default state file
        DEALBROKER_API_URL=creds.base,
        DEALBROKER_CLIENT_ID=creds.client_id,
        DEALBROKER_CLIENT_SECRET=creds.client_secret,
        DEALBROKER_WEBHOOK_SECRET=creds.webhook_secret,
    )


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["dealbroker-client", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(env: dict[str, str], *args: str) -> object:
    done = run(env, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _reader(stream: IO[str]) -> "queue.Queue[str]":
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return lines


class Listen:
    """``dealbroker-client listen`` in the background; its stdout (one event a line) and stderr
    read by threads."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.process = subprocess.Popen(
            ["dealbroker-client", "listen", "--interval", "0.2", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        self._out, self._err = _reader(self.process.stdout), _reader(self.process.stderr)
        self.events: list[dict] = []
        self.notes: list[str] = []
        self.wait_note("Ready:")

    def _drain(self) -> None:
        while not self._out.empty():
            self.events.append(json.loads(self._out.get()))
        while not self._err.empty():
            self.notes.append(self._err.get())

    def wait_note(self, start: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._drain()
            found = [n for n in self.notes if n.startswith(start)]
            if found:
                return found[-1]
            if self.process.poll() is not None and self._err.empty():
                break
            time.sleep(0.05)
        raise AssertionError(f"no {start!r} from listen: {self.notes}")

    def wait_events(self, ids: list[str], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._drain()
            if set(ids) <= {e["id"] for e in self.events}:
                return
            time.sleep(0.05)
        raise AssertionError(f"listen printed {len(self.events)} events, not {ids}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        code = self.process.wait(timeout=30)
        time.sleep(0.2)  # the reader threads see the last lines
        self._drain()
        return code


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = start_receiver()
    yield receiver
    receiver.close()


def _ids(result: object) -> list[str]:
    assert isinstance(result, dict)
    return [e["id"] for e in result["events"]]


def test_a_whole_sandbox_deal_forwarded_signed_and_verified(env, creds, receiver, tmp_path):
    receiver.answer(503)  # the first forward fails once: it is tried again
    listen = Listen(env, "--forward-to", receiver.url, "--state", str(tmp_path / "state.json"))
    result = ok(env, "trigger", "carrier-completed")
    assert isinstance(result, dict)
    ids = _ids(result)
    assert result["status"] == "Completed"
    listen.wait_events(ids)
    assert listen.stop(signal.SIGINT) == 0
    assert listen.notes[-1].startswith("Stopped")

    # Printed once each, in order, as the events API has them.
    assert [e["id"] for e in listen.events] == ids
    assert listen.events == result["events"]
    # Forwarded: every delivery verifies with the webhook secret, as a webhook would.
    verifier = WebhookVerifier(creds.webhook_secret)
    delivered = [verifier.verify(r.body, r.headers) for r in receiver.requests]
    assert [str(e.id) for e in delivered] == [ids[0], *ids]  # the first one twice
    assert all(r.headers["webhook-id"] == json.loads(r.body)["id"] for r in receiver.requests)
    assert sum(f"{ids[0]}  [200]" in n for n in listen.notes) == 1  # the retry's answer

    deal = ok(env, "deals", "get", result["dealId"])
    assert isinstance(deal, dict)
    assert deal["status"] == "Completed"


def test_listen_resumes_after_a_restart_without_losing_or_repeating(env, tmp_path):
    state = str(tmp_path / "state.json")
    ok(env, "trigger", "deal.offer")  # an event before: the first listener's "now" is a cursor
    first = Listen(env, "--state", state)
    before = _ids(ok(env, "trigger", "cancelled-with-pending-offer"))
    first.wait_events(before)
    assert first.stop() == 0  # within the cursor's settling time: the state names them

    while_down = _ids(ok(env, "trigger", "cancelled-with-pending-offer"))
    second = Listen(env, "--state", state)
    assert "after event" in second.notes[0]
    after = _ids(ok(env, "trigger", "pickup-completed"))
    second.wait_events(while_down + after)
    time.sleep(1)  # time for a repeat to show
    assert second.stop() == 0

    printed = [e["id"] for e in first.events + second.events]
    assert printed == before + while_down + after


def test_listen_forwards_only_the_kinds_asked_for(env, creds, receiver, tmp_path):
    listen = Listen(
        env,
        "--forward-to",
        receiver.url,
        "--events",
        "deal.status,payment.status",
        "--state",
        str(tmp_path / "state.json"),
    )
    result = ok(env, "trigger", "pickup-completed")
    assert isinstance(result, dict)
    wanted = [e["id"] for e in result["events"] if e["event"] in ("deal.status", "payment.status")]
    assert len(wanted) < len(result["events"])
    listen.wait_events(wanted)
    time.sleep(1)
    assert listen.stop() == 0
    assert [e["id"] for e in listen.events] == wanted
    verifier = WebhookVerifier(creds.webhook_secret)
    assert [str(verifier.verify(r.body, r.headers).id) for r in receiver.requests] == wanted


def test_deals_events_trigger_and_clock(env):
    result = ok(env, "trigger", "deal.offer")
    assert isinstance(result, dict)
    assert [e["event"] for e in result["events"]] == ["deal.offer"]

    scenario = ok(env, "trigger", "payment-failed-then-paid")
    assert isinstance(scenario, dict)
    deal_id = scenario["dealId"]
    moved = ok(env, "trigger", "dealStatus", "--deal", deal_id, "--status", "Shipping_In_Progress")
    assert isinstance(moved, dict)
    assert moved["deal"]["status"] == "Shipping_In_Progress"
    deals = ok(env, "deals", "list", "--page", "1", "--page-size", "2")
    assert isinstance(deals, dict)
    assert deals["page"]["pageSize"] == 2
    assert deals["items"][0]["id"] == deal_id

    first = _ids(scenario)[0]
    page = run(env, "events", "--after", first, "--limit", "2")
    assert page.returncode == 0, page.stderr
    items = json.loads(page.stdout)["items"]
    assert [e["id"] for e in items] == _ids(scenario)[1:3]
    assert page.stderr.strip() == f"next: --after {items[-1]['id']}"

    clock = ok(env, "clock", "advance", "60")
    assert isinstance(clock, dict)
    assert clock["clockOffsetSeconds"] >= 60
    own = ok(env, "clock", "advance", "120", "--deal", deal_id)
    assert isinstance(own, dict)
    assert (own["dealId"], own["clockOffsetSeconds"]) == (deal_id, 120)
    shown = ok(env, "clock", "show", "--deal", deal_id)
    assert isinstance(shown, dict)
    assert shown["totalOffsetSeconds"] == 120 + shown["integrationClockOffsetSeconds"]


def test_errors_are_one_line_with_the_problem_and_its_request_id(env, creds):
    missing = run(env, "deals", "get", str(uuid.uuid4()))
    assert missing.returncode == 1
    assert missing.stdout == ""
    line = missing.stderr.strip()
    assert "\n" not in line
    assert line.startswith("error: 404 Not Found: No deal ")
    assert "(requestId " in line

    bad = {**env, "DEALBROKER_CLIENT_SECRET": "dbs_not-the-secret"}
    for args in (("deals", "list"), ("listen",)):
        refused = run(bad, *args)
        assert refused.returncode == 1, refused
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert refused.stderr.startswith("error: 401 invalid_client: ")
        assert "(requestId " in refused.stderr
        assert "dbs_not-the-secret" not in refused.stderr + refused.stdout

    unknown = run(env, "listen", "--after", str(uuid.uuid4()))
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("error: 404 Not Found: No event ")
    assert unknown.stderr.count("\n") == 1, unknown.stderr

    not_an_id = run(env, "trigger", "deal.status", "--status", "Shipping_Arrived", "--deal", "x")
    assert not_an_id.returncode == 2
    # The cursor's walk never meets the opt-in deal.message: asking listen for it is refused.
    opt_in = run(env, "listen", "--events", "deal.message")
    assert opt_in.returncode == 2
    assert "opt-in" in opt_in.stderr
    no_secret = {k: v for k, v in env.items() if k != "DEALBROKER_WEBHOOK_SECRET"}
    refused = run(no_secret, "trigger", "carrier-completed")
    assert refused.returncode == 2
    assert "DEALBROKER_WEBHOOK_SECRET" in refused.stderr
    assert creds.client_secret not in refused.stderr


def test_an_unreachable_server_is_one_line_and_exit_1(env):
    nowhere = {**env, "DEALBROKER_API_URL": f"http://127.0.0.1:{free_port()}"}
    for args in (("deals", "list"), ("listen",), ("trigger", "carrier-completed")):
        done = run(nowhere, *args)
        assert done.returncode == 1
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"error: cannot reach {nowhere['DEALBROKER_API_URL']}: ")


def test_the_venv_holds_the_client_only(client_venv):
    python = str(client_venv.bin / "python")
    server = subprocess.run([python, "-c", "import dealbroker"], env=client_venv.env(), check=False)
    assert server.returncode != 0
    where = subprocess.run(
        [python, "-c", "import dealbroker_client; print(dealbroker_client.__file__)"],
        env=client_venv.env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(client_venv.path)


def test_a_forward_that_keeps_failing_is_given_up_after_its_retries(env, receiver, tmp_path):
    receiver.answer(500, times=2)
    listen = Listen(
        env, "--forward-to", receiver.url, "--retries", "1", "--state", str(tmp_path / "s.json")
    )
    given_up = _ids(ok(env, "trigger", "deal.offer"))
    delivered = _ids(ok(env, "trigger", "deal.offer"))
    listen.wait_events(given_up + delivered)
    assert listen.stop() == 0
    assert [r.headers["webhook-id"] for r in receiver.requests] == given_up * 2 + delivered
    assert any(n.endswith(f"{given_up[0]}  [500]") for n in listen.notes)
    assert any(n.endswith(f"{delivered[0]}  [200]") for n in listen.notes)


def test_signed_headers_sign_with_both_secrets_of_a_rotation():
    old, new = (
        "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_" + "bmV3LXNlY3JldC1mb3ItdGhlLXRlc3Q=",
    )
    event_id = str(uuid.uuid4())
    payload = json.dumps(
        {"id": event_id, "event": "webhook.test", "api_version": "v1", "created": 1, "data": {}}
    )
    headers = signed_headers([new, old], event_id, payload)
    assert len(headers["webhook-signature"].split()) == 2
    for secret in (old, new):
        assert str(WebhookVerifier(secret).verify(payload, headers).id) == event_id
    with pytest.raises(WebhookVerificationError):
        WebhookVerifier("whsec_" + "b3RoZXItc2VjcmV0LW5vdC1naXZlbg==").verify(payload, headers)


def test_credentials_as_options_before_or_after_the_command(env, creds):
    bare = {k: v for k, v in env.items() if not k.startswith("DEALBROKER_")}
    given = ("--api-url", creds.base, "--client-id", creds.client_id)
    secret = ("--client-secret", creds.client_secret)
    for args in ((*given, *secret, "deals", "list"), (*given, "deals", "list", *secret)):
        page = ok(bare, *args)
        assert isinstance(page, dict)
        assert page["page"]["pageNumber"] == 1
    version = run(bare, "--version")
    assert version.returncode == 0
    assert version.stdout.strip() == "dealbroker-client 0.1.0"


def test_listen_rides_out_a_server_that_goes_away(client_venv, tmp_path):
    """The service stops while listen runs, and comes back on the same address: listen says so
    once, keeps trying, and prints what happened meanwhile, once."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'outage.db'}"
    first = Server(url, tmp_path, DEALBROKER_EMBEDDED_WORKER="on")
    env = client_venv.env(
        DEALBROKER_API_URL=first.base,
        DEALBROKER_CLIENT_ID=first.credential("client id"),
        DEALBROKER_CLIENT_SECRET=first.credential("client secret"),
        DEALBROKER_WEBHOOK_SECRET=first.credential("webhook secret"),
    )
    listen = Listen(env, "--state", str(tmp_path / "state.json"))
    try:
        first.stop()
        listen.wait_note("warning: the events API failed, trying again: ")
        second = Server(url, tmp_path, port=first.port, DEALBROKER_EMBEDDED_WORKER="on")
        try:
            ids = _ids(ok(env, "trigger", "cancelled-with-pending-offer"))
            listen.wait_events(ids)
            listen.wait_note("the events API answers again")
            assert listen.stop() == 0
        finally:
            second.stop()
    finally:
        if listen.process.poll() is None:
            listen.stop()
    assert [e["id"] for e in listen.events] == ids
    assert sum(n.startswith("warning: ") for n in listen.notes) == 1, listen.notes
