"""Traces end to end: real ``serve`` and ``worker`` processes export their spans over OTLP/HTTP
to a loopback receiver, which decodes them with OpenTelemetry's own protobuf messages.

* A request's span is named by its route's template, never its path (a capability link's
  secret); its database statements are spans of their own, without their parameters.
* The worker's job run is a span, and each webhook it sends a span within it, naming the
  endpoint by id, never by URL.
* Every log line written inside a span carries the span's trace id.
* Off unless an OTLP endpoint is given.
"""

import gzip
import json
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from dealbroker.core import tracing
from tests.conftest import BACKENDS, SELLER, database_url
from tests.core.failing_app import ECHOED, pings, serve_failing
from tests.processes import Server, Worker, drop_database, free_port, wait_until
from tests.receiver import Receiver, start_receiver

pytestmark = pytest.mark.server

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
STATUS_ERROR = 2  # opentelemetry.proto's Status.STATUS_CODE_ERROR


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, object]
    resource: dict[str, object]
    status: int
    status_message: str = ""


def _value(any_value: object) -> object:
    kind = any_value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(any_value, kind) if kind else None


def spans(receiver: Receiver) -> list[Span]:
    """Every span the receiver got on /v1/traces, decoded."""
    found = []
    for request in list(receiver.requests):
        if request.path != "/v1/traces":
            continue
        body = request.body
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        Span(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            {a.key: _value(a.value) for a in span.attributes},
                            resource,
                            span.status.code,
                            span.status.message,
                        )
                    )
    return found


def test_tracing_is_on_only_with_an_otlp_endpoint() -> None:
    assert not tracing.wanted({})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": " "})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert not tracing.wanted({**on, "OTEL_SDK_DISABLED": "true"})
    assert not tracing.wanted({**on, "OTEL_TRACES_EXPORTER": "none"})
    assert not tracing.enabled()  # not in this process: no endpoint given
    with tracing.span("nothing") as span:
        assert span is None


@pytest.fixture(scope="module", params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = database_url(request.param, tmp_path_factory.mktemp(f"trace-{request.param}"), "trace")
    yield url
    if request.param != "sqlite":
        drop_database(url)


@pytest.fixture
def collector() -> Iterator[Receiver]:
    r = start_receiver()
    yield r
    r.close()


@pytest.fixture
def webhooks() -> Iterator[Receiver]:
    r = start_receiver()
    yield r
    r.close()


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_serve_and_worker_export_spans_over_otlp(
    db: str, tmp_path: Path, collector: Receiver, webhooks: Receiver
) -> None:
    otlp = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url.removesuffix("/hook"),
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds between exports
        "DEALBROKER_LOG_FORMAT": "json",
        "DEALBROKER_LOG_LEVEL": "info",
    }
    server = Server(db, tmp_path, DEALBROKER_EMBEDDED_WORKER="off", **otlp)
    worker = Worker(db, tmp_path, **otlp)
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
            json={"url": webhooks.url + "?key=endpoint-secret"},
            headers=headers,
        )
        assert endpoint.status_code == 201, endpoint.text
        created = httpx.post(
            f"{server.base}/deals/v1/deals",
            json={"name": "Traced", "price": 500, "seller": SELLER},
            headers={**headers, "X-Request-Id": "rid-traced"},
        )
        assert created.status_code == 201, created.text
        deal = created.json()
        page = httpx.get(deal["url"])  # a capability link: its path holds a secret
        assert page.status_code == 200
        # A caller's trace context: the request's span joins the caller's trace.
        traceparent = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
        assert httpx.get(f"{server.base}/ping", headers={"traceparent": traceparent}).is_success
        wait_until(lambda: len(webhooks.requests) >= 1, 30, "the webhook")

        def exported() -> bool:
            names = {s.name for s in spans(collector)}
            return {"POST /deals/v1/deals", "job deliveries", "webhook send"} <= names and any(
                s.trace_id == CALLER_TRACE for s in spans(collector)
            )

        wait_until(exported, 30, "the spans of the request, the job and the send", 0.2)
    finally:
        server.stop()
        worker.process.send_signal(signal.SIGTERM)
        worker.wait()
        worker.close()
    got = spans(collector)

    # The request's span: by route template, with its status; its statements are its children.
    (create,) = [s for s in got if s.name == "POST /deals/v1/deals"]
    assert create.attributes["http.route"] == "/deals/v1/deals"
    assert create.attributes["http.response.status_code"] == 201
    assert create.attributes["dealbroker.request_id"] == "rid-traced"
    assert create.resource["service.name"] == "dealbroker"
    assert create.resource["dealbroker.process"] == "serve"
    assert create.resource["process.pid"] == server.process.pid
    statements = [s for s in got if s.trace_id == create.trace_id and s.name != create.name]
    assert statements, got
    assert all(s.parent_id == create.span_id for s in statements)
    assert any("INSERT" in str(s.attributes.get("db.statement", "")) for s in statements)

    (joined,) = [s for s in got if s.trace_id == CALLER_TRACE and s.name == "GET /ping"]
    assert joined.parent_id == CALLER_SPAN

    (seller_page,) = [s for s in got if s.attributes.get("http.route", "").startswith("/d/")]
    assert seller_page.name == "GET /d/{deal_id}/{signature}"

    # The worker: a job's span, and the webhook's send within it.
    (send,) = [s for s in got if s.name == "webhook send"]
    assert send.attributes["dealbroker.endpoint_id"] == endpoint.json()["id"]
    assert send.attributes["http.response.status_code"] == 200
    assert send.resource["dealbroker.process"] == "worker"
    assert send.resource["process.pid"] == worker.process.pid
    (job,) = [s for s in got if s.span_id == send.parent_id]
    assert job.name == "job deliveries"
    assert job.trace_id == send.trace_id
    assert job.attributes["dealbroker.job.done"] == 1
    # The worker's idle rounds (it polled every 0.2 s) left no trace: only runs that did work.
    runs = [s for s in got if s.name.startswith("job ")]
    assert all(s.attributes["dealbroker.job.done"] > 0 for s in runs), runs
    working = {s.trace_id for s in runs}
    worker_spans = [s for s in got if s.resource["dealbroker.process"] == "worker"]
    assert {s.trace_id for s in worker_spans} <= working  # no query outside a run with work

    # Nothing personal or secret reached a span: no path, no URL, no parameter.
    exported_bytes = b"".join(r.body for r in collector.requests)
    capability = deal["url"].split("/d/", 1)[1].encode()
    for secret in (
        capability,
        deal["url"].rsplit("/", 1)[1].encode(),
        b"endpoint-secret",
        webhooks.url.encode(),
        SELLER["email"].encode(),
        SELLER["phone"].encode(),
        token.encode(),
    ):
        assert secret not in exported_bytes, secret

    # Log lines written inside a span carry its trace id.
    lines = _json_lines(server.output())
    (access,) = [line for line in lines if line.get("request_id") == "rid-traced"]
    assert access["trace_id"] == create.trace_id
    assert access["message"].startswith("POST /deals/v1/deals 201")
    worker_lines = _json_lines(worker.output())
    assert all("trace_id" in line for line in worker_lines)


def test_a_database_error_reaches_a_span_without_its_text(
    db: str, tmp_path: Path, collector: Receiver
) -> None:
    """The database's message quotes the refused parameter (personal data in a real request):
    the statement's span says the error's class, and the request's span its 500; neither the
    value nor the message is exported."""
    port = free_port()
    process = serve_failing(
        db,
        port,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url.removesuffix("/hook"),
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: pings(base), 30, "the server")
        answer = httpx.get(f"{base}/bad-param")
        assert answer.status_code in (500, 503)
        wait_until(
            lambda: any(s.name == "GET /bad-param" for s in spans(collector)), 30, "the spans"
        )
    finally:
        process.terminate()
        process.communicate(timeout=20)
    got = spans(collector)
    (request,) = [s for s in got if s.name == "GET /bad-param"]
    assert request.attributes["http.response.status_code"] == answer.status_code
    assert request.status == STATUS_ERROR
    (failed,) = [
        s
        for s in got
        if s.trace_id == request.trace_id and s.status == STATUS_ERROR and s is not request
    ]
    assert failed.parent_id == request.span_id
    # As core.db.describe_error says it: e.g. DBAPIError (asyncpg.exceptions.DataError, 22P02)
    assert re.fullmatch(r"\w+Error \([\w.]+Error(, \w+)?\)", failed.status_message), failed
    exported = b"".join(r.body for r in collector.requests)
    assert ECHOED.encode() not in exported
    assert b"invalid input" not in exported
    assert b"JSON path" not in exported
