"""Logs: one JSON object a line when asked, each line with the request id and the integration
and deal ids where known, and nothing secret or personal in any line or traceback."""

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dealbroker.app import create_app
from dealbroker.core import logs
from tests.conftest import BACKENDS, SELLER, database_url, make_settings
from tests.core.failing_app import bad_sql, boom, pings, serve_failing
from tests.processes import Server, Worker, drop_database, free_port, wait_until

DEAL = "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"
TOKEN = "Q2x9mZr0kX4fT7b1VwYc3HnP8sLd6GjE5aUoRiKe0Mq"  # as secrets.token_urlsafe(32) writes one


@pytest.mark.parametrize(
    ("text", "logged"),
    [
        ("from kari.nordmann+shop@example.no", "from [email]"),
        ("call +47 400 00 000 or 40000000", "call [phone] or [phone]"),
        ("to NO93 8601 1117 947 or NO9386011117947", "to [account] or [account]"),
        ("to 8601.11.17947 or 86011117947", "to [account] or [account]"),
        (f"Authorization: Bearer {TOKEN}", "Authorization: [secret] [secret]"),
        ("POST ?client_secret=s3cr3t&x=1", "POST ?client_secret=[secret]&x=1"),
        ('{"password": "hunter22"}', '{"password": "[secret]"}'),
        ("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD7xF6vQoJt4s= leaked", "[secret] leaked"),
        (f"dbs_{TOKEN}", "[secret]"),
        (f"the token {TOKEN}.", "the token [secret]."),
        (f"GET https://x.example/d/{DEAL}/SIGNATURE/-/sign", "GET https://x.example/d/…"),
        ("GET /o/TOKEN/-/offer 200", "GET /o/… 200"),
        ("GET /pay/TOKEN?return=/o/TOKEN 303", "GET /pay/… 303"),
        # What identifies no one stays readable.
        ("GET /d/…/…/-/sign 303 12.3ms", "GET /d/…/…/-/sign 303 12.3ms"),
        (f"GET /deals/v1/deals/{DEAL} 200 rid=" + "0f" * 16, None),
        ("timer fired on 2026-11-23 12:00:00 after attempt 3 for 4500 kr", None),
        ("job test_a_very_long_function_name_without_any_digit_at_all failed", None),
        ("DBAPIError (asyncpg.exceptions.DataError, 22000) at deals/service.py:76", None),
    ],
)
def test_redact_masks_secrets_and_personal_data(text, logged):
    assert logs.redact(text) == (text if logged is None else logged)


RID = "9f1c2b7e4d8a4c3e8b5f0a6d2e1c7b94"
INTEGRATION = "5b1e3c2a-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    "line",
    [
        # Access lines: method, path, status, duration (a slow request's too), request id.
        f"POST /deals/v1/deals 201 12345.6ms rid={RID}",
        f"POST /deals/v1/deals 201 23456.7ms rid={RID}",
        f"GET /deals/v1/deals/{DEAL} 200 2.1ms rid={RID}",
        f"GET /deals/v1/deals/{DEAL} 503 30001.2ms rid=rid-12345678",
        f"POST /oauth2/token 401 98765.4ms rid={RID}",
        "GET /ping 200 0.4ms rid=12345678-1234-4234-8234-123456789012",
        "GET /d/…/…/-/sign 303 12.3ms rid=20261126184519",
        # Timestamps: ISO 8601, the text format's, epoch seconds and milliseconds.
        "2026-11-26 18:45:19,568 ERROR dealbroker.http database error on /ping",
        "deadline 2026-11-26T18:45:19.568123+00:00 passed",
        "webhook-timestamp 1764182719 for msg_2Lx5 at 1764182719568",
        # Amounts, counts, ids, a process id and an address with a port.
        "payout of 25 000 000 kr (2500000000 minor units), fee 12 500,00, amount=25000000",
        "price 1 250 000,00 NOK; 3 deliveries retried of 120000 total",
        f"integration {INTEGRATION} deal {DEAL} pid 2345678 on 127.0.0.1:54321",
        "stopped after 1234567 deliveries in 98765.43 s",
    ],
)
def test_redact_leaves_statuses_durations_ids_timestamps_and_amounts(line):
    """The scrubber once turned 2,365 access lines into ``POST /deals/v1/deals [phone].6ms``,
    each slow request's status lost: what is not personal stays as it was."""
    assert logs.redact(line) == line


@pytest.mark.parametrize(
    ("text", "logged"),
    [
        (
            "SMTP refused kari.nordmann@example.no: mailbox full",
            "SMTP refused [email]: mailbox full",
        ),
        (
            "buyer wrote: ring meg på 412 34 567 etter 17",
            "buyer wrote: ring meg på [phone] etter 17",
        ),
        ("call 41 23 45 67 or 4123 4567, or +46 70 123 45 67", None),
        ("ring 070-123 45 67 eller 08-123 456 78 eller 0046701234567", None),
        ("phone=41234567 tel: +47 41 23 45 67 mobile=12", None),
        ("pay to NO93 8601 1117 947, SE45 5000 0000 0583 9825 7466 or 8601.11.17947.", None),
    ],
)
def test_redact_still_masks_personal_data_in_free_text(text, logged):
    redacted = logs.redact(text)
    if logged is not None:
        assert redacted == logged
    for personal in (
        "412 34 567",
        "41 23 45 67",
        "4123 4567",
        "70 123 45 67",
        "070-123",
        "08-123",
        "0046701234567",
        "41234567",
        "NO93",
        "SE45",
        "8601.11",
        "kari",
    ):
        assert personal not in redacted, redacted
    assert "[phone]" in redacted or "[account]" in redacted or "[email]" in redacted


def _handler(form: str) -> tuple[logging.Handler, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.formatter(form))  # type: ignore[arg-type]
    return handler, stream


def test_a_json_line_carries_the_context_and_no_secret_even_in_a_traceback():
    handler, stream = _handler("json")
    logger = logging.getLogger("dealbroker.test.logs")
    logger.addHandler(handler)
    logger.propagate = False
    token = logs.start({"path_params": {"dealId": DEAL}}, "rid-1")
    try:
        logs.bind(integration_id="5b1e3c2a-0000-4000-8000-000000000001")
        try:
            raise ValueError(f"refused {SELLER['email']} with {TOKEN}")
        except ValueError:
            logger.exception("sending to %s failed", SELLER["phone"])
        logger.warning("outside the deal", extra={"deal_id": "another"})
    finally:
        logs.end(token)
        logger.removeHandler(handler)
    logger.warning("no request")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines()[:2])
    assert first["message"] == "sending to [phone] failed"
    assert first["level"] == "ERROR"
    assert first["logger"] == "dealbroker.test.logs"
    assert first["request_id"] == "rid-1"
    assert first["integration_id"] == "5b1e3c2a-0000-4000-8000-000000000001"
    assert first["deal_id"] == DEAL
    assert first["pid"] == os.getpid()  # ``serve --workers`` processes write to one stream
    assert first["time"].endswith("+00:00")
    assert "ValueError: refused [email] with [secret]" in first["exc_info"]
    assert second["deal_id"] == "another"  # what a job passes wins over the request's
    written = stream.getvalue()
    for secret in (SELLER["email"], SELLER["phone"], TOKEN):
        assert secret not in written


def test_a_line_written_in_a_span_carries_its_trace_id(monkeypatch):
    ids = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    lines = {}
    for form in ("json", "text"):
        handler, stream = _handler(form)
        logger = logging.getLogger("dealbroker.test.trace")
        logger.addHandler(handler)
        logger.propagate = False
        try:
            logger.warning("outside")
            with monkeypatch.context() as patch:
                patch.setattr(logs, "trace_ids", lambda: ids)
                logger.warning("inside")
        finally:
            logger.removeHandler(handler)
        lines[form] = stream.getvalue().splitlines()
    outside, inside = (json.loads(line) for line in lines["json"])
    assert (outside["trace_id"], outside["span_id"]) == (None, None)
    assert (inside["trace_id"], inside["span_id"]) == ids
    assert not lines["text"][0].endswith(ids[0])
    assert lines["text"][1].endswith(f"WARNING dealbroker.test.trace inside trace_id={ids[0]}")


_MESSAGES = st.one_of(
    st.sampled_from(
        [
            "GET /healthz 200 0.3ms rid=8e777f1322924facb51a004820a9c664",
            f"GET /o/{TOKEN} 404 1.0ms rid=x",
            f"POST /x 201 2.0ms rid={SELLER['email']} {SELLER['phone']}",
            'quote " backslash \\ newline \n tab \t ø å ü \u2028 \x1b',
        ]
    ),
    st.text(max_size=60),
)
_IDS = st.one_of(st.none(), st.text(max_size=40))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    form=st.sampled_from(["text", "json"]),
    message=_MESSAGES,
    redacted=st.booleans(),
    request_id=_IDS,
    integration_id=_IDS,
    deal_param=st.one_of(st.none(), st.just(DEAL)),
    trace=st.one_of(st.none(), st.tuples(st.text(max_size=32), st.text(max_size=16))),
    created=st.floats(min_value=1.7e9, max_value=1.9e9),
)
def test_the_line_writer_writes_what_the_logging_module_writes(
    form, message, redacted, request_id, integration_id, deal_param, trace, created
):
    # LineWriter stands in for the record, filter and formatter chain of the access log: each
    # line, in both forms, with or without a request's context and a span, byte for byte.
    if redacted:
        message = logs.Redacted(logs.redact(message))  # as access_line marks its lines
    handler, stream = _handler(form)
    logger = logging.Logger("dealbroker.http")  # stands alone: its handler is the only one
    logger.addHandler(handler)
    writer = logs.LineWriter(logger)
    lines = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: created)
        patch.setattr(time, "time_ns", lambda: int(created * 1e9))
        patch.setattr(logs, "trace_ids", lambda: trace)
        context = None
        if request_id is not None:
            scope = {} if deal_param is None else {"path_params": {"dealId": deal_param}}
            context = logs.start(scope, request_id)
            logs.bind(integration_id=integration_id)
        try:
            for write in (logger.info, writer.info):
                write(message)
                lines.append(stream.getvalue())
                stream.seek(0)
                stream.truncate()
        finally:
            if context is not None:
                logs.end(context)
    assert writer._checked is not None  # it stood in, rather than handing the line over
    assert lines[1] == lines[0]


def test_the_line_writer_hands_a_line_over_when_the_configuration_is_not_its_own():
    handler, stream = _handler("text")
    logger = logging.Logger("dealbroker.http")
    logger.addHandler(handler)
    writer = logs.LineWriter(logger)
    writer.info("one")
    assert writer._checked is not None
    # A second handler (a test's capture), a filter of the logger's: the logging module's.
    captured = logging.StreamHandler(io.StringIO())
    logger.addHandler(captured)
    writer.info("two")
    assert captured.stream.getvalue() == "two\n"
    logger.removeHandler(captured)
    logger.addFilter(lambda record: record.getMessage() != "three")
    writer.info("three")
    logger.filters.clear()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))  # another format
    writer.info("four")
    one, two, four = stream.getvalue().splitlines()
    assert one.endswith(" INFO dealbroker.http one")
    assert two.endswith(" INFO dealbroker.http two")
    assert four == "INFO four"


@pytest.mark.parametrize("created", [1764182719.0, 1764182719.9995, 1764182720.0004, 1764200000.25])
def test_the_text_lines_time_is_the_logging_modules_own(created):
    # The date and second are made once a second (the access log writes a line a request):
    # the line must read as logging.Formatter writes it, milliseconds included.
    ours, standard = logs.TextFormatter(logs.TEXT_FORMAT), logging.Formatter(logs.TEXT_FORMAT)
    for _ in range(2):  # the second time from the formatter's remembered second
        record = logging.LogRecord(
            "dealbroker.http", logging.INFO, "", 0, "GET /healthz", None, None
        )
        record.created, record.msecs = created, int((created - int(created)) * 1000)
        assert ours.format(record) == standard.format(record)


_ACCESS_LOGGER = """
import logging, sys, uvicorn
from dealbroker.core import logs
for access_log in (True, False):
    # uvicorn configures its loggers, with or without its access log, then an app factory
    # configures logging again (as bench/ceiling_app.py does): uvicorn's access log must
    # stay without a handler, which is what its protocol asks before writing a line.
    uvicorn.Config("x:y", log_config=logs.config("info", "text"), access_log=access_log
                   ).configure_logging()
    logs.configure("info", "text")
    print(logging.getLogger("uvicorn.access").hasHandlers())
"""


def test_uvicorns_access_log_writes_nowhere_whoever_configures_logging_last():
    # It would write capability links' paths and query strings in full, and a second line per
    # request beside the redacted one.
    out = subprocess.run(
        [sys.executable, "-c", _ACCESS_LOGGER], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_bind_outside_a_request_does_nothing_and_refuses_unknown_fields():
    logs.bind(integration_id="x")  # no request: nothing to bind to
    token = logs.start({}, "rid")
    try:
        with pytest.raises(ValueError, match="unknown log context field"):
            logs.bind(email="kari@example.com")
    finally:
        logs.end(token)


@pytest.fixture(scope="module", params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = database_url(request.param, tmp_path_factory.mktemp(f"logs-{request.param}"), "logs")
    yield url
    if request.param != "sqlite":
        drop_database(url)


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.server
def test_serve_writes_json_lines_with_ids_and_without_secrets(db, tmp_path):
    server = Server(db, tmp_path, DEALBROKER_LOG_FORMAT="json", DEALBROKER_LOG_LEVEL="info")
    client_id, client_secret = server.credential("client id"), server.credential("client secret")
    webhook_secret = server.credential("webhook secret")
    try:
        token = httpx.post(
            f"{server.base}/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(client_id, client_secret),
        ).json()["access_token"]
        bearer = {"Authorization": f"Bearer {token}", "X-Request-Id": "rid-create"}
        created = httpx.post(
            f"{server.base}/deals/v1/deals",
            json={"name": "Logged", "price": 500, "seller": SELLER},
            headers=bearer,
        )
        assert created.status_code == 201, created.text
        deal_id = created.json()["id"]
        read = httpx.get(
            f"{server.base}/deals/v1/deals/{deal_id}",
            params={"token": token},  # a query string is never logged
            headers={**bearer, "X-Request-Id": "rid-read"},
        )
        assert read.status_code == 200
        trigger = httpx.post(
            f"{server.base}/webhooks/v1/dealStatus",
            json={"dealId": deal_id, "status": "Cancelled"},
            headers={"webhook-secret": webhook_secret, "X-Request-Id": "rid-trigger"},
        )
        assert trigger.status_code == 200, trigger.text
        page = httpx.get(f"{server.base}/o/{TOKEN}", headers={"X-Request-Id": "rid-page"})
        assert page.status_code == 404
    finally:
        server.stop()
    output = server.output()
    lines = _json_lines(output.split("API docs at /docs)", 1)[1])
    assert lines, output
    for line in lines:
        assert {"time", "level", "logger", "message", "request_id"} <= line.keys()
    access = {line["request_id"]: line for line in lines if line["logger"] == "dealbroker.http"}
    assert access["rid-create"]["integration_id"] is not None
    assert access["rid-create"]["message"].startswith("POST /deals/v1/deals 201")
    assert access["rid-read"]["deal_id"] == deal_id
    assert access["rid-read"]["integration_id"] == access["rid-create"]["integration_id"]
    assert access["rid-trigger"]["integration_id"] == access["rid-create"]["integration_id"]
    assert access["rid-page"]["message"].startswith("GET /o/… 404")
    assert access["rid-page"]["integration_id"] is None
    logged = output.split("API docs at /docs)", 1)[1]
    for secret in (client_secret, webhook_secret, token, TOKEN, SELLER["email"], SELLER["phone"]):
        assert secret not in logged


@pytest.mark.server
def test_worker_writes_json_lines(db, tmp_path):
    worker = Worker(db, tmp_path, DEALBROKER_LOG_FORMAT="json")
    try:
        worker.wait_ready()
        worker.process.send_signal(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        worker.close()
    lines = _json_lines(worker.output())
    assert lines[0]["message"].startswith("running jobs: ")
    assert lines[-1]["message"] == "stopped after 0 deliveries"
    assert all(line["logger"] == "dealbroker.process" for line in (lines[0], lines[-1]))


@pytest.fixture
async def failing_app(db_url, engine) -> AsyncIterator[FastAPI]:
    """The app with two routes that fail as bugs would: in the code, and in the database."""
    application = create_app(make_settings(db_url), engine)
    application.add_api_route("/boom", boom)
    application.add_api_route("/bad-sql", bad_sql)
    async with application.router.lifespan_context(application):
        yield application


def _names_the_database_error(message: str) -> bool:
    """The line of ``/bad-sql``'s database error: a bug's (``database error on ...``), or on
    SQLite, which calls it an ``OperationalError``, the first of a run of refused requests."""
    return message.startswith("database error on /bad-sql rid=rid-sql") or (
        message.startswith("requests on the database failed; answering 503: ")
        and message.endswith(" on /bad-sql rid=rid-sql")
    )


async def test_a_500_and_a_database_error_are_logged_with_the_request_id(failing_app):
    """The 500's error line is written by Starlette's last-resort handler, outside the request
    log's middleware once; the server's own traceback line after the request has ended."""
    handler, stream = _handler("json")
    logger = logging.getLogger("dealbroker")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)  # the access lines too
    escaped: list[BaseException] = []
    try:
        transport = httpx.ASGITransport(app=failing_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for path, rid in (("/boom", "rid-boom"), ("/bad-sql", "rid-sql")):
                try:
                    await client.get(path, headers={"X-Request-Id": rid})
                except Exception as exc:  # raised after the 500 was sent, as to a server
                    escaped.append(exc)
        # What uvicorn writes for such an exception, after the request's context has ended.
        for exc in escaped:
            logging.getLogger("dealbroker.server").error(
                "Exception in ASGI application", exc_info=exc
            )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    by_message = {line["message"]: line for line in lines}
    assert by_message["unhandled RuntimeError on GET rid=rid-boom"]["request_id"] == "rid-boom"
    # A bug's line on PostgreSQL; on SQLite, an outage's first (``logs.Failures``).
    database = [line for line in lines if _names_the_database_error(line["message"])]
    assert database, lines
    assert {line["request_id"] for line in database} == {"rid-sql"}
    access = [line for line in lines if line["message"].startswith("GET /")]
    statuses = {line["request_id"]: line["message"].split()[2] for line in access}
    # SQLite calls the unknown column an OperationalError: the database's trouble, a 503.
    assert statuses == {"rid-boom": "500", "rid-sql": "503" if not escaped[1:] else "500"}
    uvicorn = [line for line in lines if line["message"] == "Exception in ASGI application"]
    assert [line["request_id"] for line in uvicorn] == ["rid-boom", "rid-sql"][: len(escaped)]
    assert len(uvicorn) == len(escaped) >= 1


async def test_a_clients_request_id_is_redacted_in_the_json_form_as_in_the_text_form(failing_app):
    """A client's ``X-Request-Id`` is echoed to it as sent, but every JSON line shows it as the
    access line does after "rid=": an e-mail address or a token in it reaches no line."""
    handler, stream = _handler("json")
    logger = logging.getLogger("dealbroker")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)  # the access lines too
    sent = {
        "kari.nordmann+shop@example.no": "[email]",
        f"req-{TOKEN}": "[secret]",
        "rid-12345678": "rid-12345678",  # what identifies no one stays readable
    }
    try:
        transport = httpx.ASGITransport(app=failing_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for rid in sent:
                answer = await client.get("/ping", headers={"X-Request-Id": rid})
                assert answer.headers["x-request-id"] == rid
            with pytest.raises(RuntimeError):  # raised after the 500 was sent, as to a server
                await client.get("/boom", headers={"X-Request-Id": f"{TOKEN} {SELLER['email']}"})
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    written = stream.getvalue()
    lines = [json.loads(line) for line in written.splitlines()]
    access = [line for line in lines if line["logger"] == "dealbroker.http"]
    assert [line["request_id"] for line in access[:3]] == list(sent.values())
    # The JSON field reads as the text form's access line shows the id.
    assert all(line["message"].endswith(f" rid={line['request_id']}") for line in access)
    error = next(line for line in lines if line["message"].startswith("unhandled RuntimeError"))
    assert error["request_id"] == "[secret] [email]"
    for secret in ("kari.nordmann", TOKEN, SELLER["email"]):
        assert secret not in written


def test_a_request_id_a_job_passes_is_redacted_too():
    handler, stream = _handler("json")
    logger = logging.getLogger("dealbroker.test.logs")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("retried", extra={"request_id": "kari@example.no"})
        logger.warning("retried", extra={"request_id": "0f" * 16})
    finally:
        logger.removeHandler(handler)
    assert [json.loads(line)["request_id"] for line in stream.getvalue().splitlines()] == [
        "[email]",
        "0f" * 16,
    ]


@pytest.mark.server
def test_a_server_logs_a_500_with_the_request_id_on_every_line(db, tmp_path):
    """A real server: its own traceback line (uvicorn's, written after the request's context
    ended) carries the request id, as the app's error lines do."""
    port = free_port()
    process = serve_failing(db, port)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: pings(base), 30, "the server")
        assert httpx.get(f"{base}/boom", headers={"X-Request-Id": "rid-boom"}).status_code == 500
        answer = httpx.get(f"{base}/bad-sql", headers={"X-Request-Id": "rid-sql"})
        assert answer.status_code in (500, 503)  # SQLite: an OperationalError, the database's
        assert answer.headers["X-Request-Id"] == "rid-sql"
    finally:
        process.terminate()
        _, err = process.communicate(timeout=20)
    lines = _json_lines("\n".join(line for line in err.splitlines() if line.startswith("{")))
    by_rid: dict[str, list[str]] = {}
    for line in lines:
        by_rid.setdefault(line["request_id"], []).append(line["message"].strip())
    boom = by_rid["rid-boom"]
    assert "unhandled RuntimeError on GET rid=rid-boom" in boom
    assert "Exception in ASGI application" in boom, err
    assert any(m.startswith("GET /boom 500") for m in boom)
    assert any(_names_the_database_error(m) for m in by_rid["rid-sql"])
    if answer.status_code == 500:
        assert "Exception in ASGI application" in by_rid["rid-sql"]
    assert all(line["request_id"] for line in lines if "Exception" in line["message"])


def test_a_run_of_failures_is_its_first_a_count_a_minute_and_its_end():
    """``logs.Failures``: the lines of an outage, whatever failed (a job, the requests, a
    periodic write): the first failure, then at most once a minute the count so far and the
    latest, then how many there were and how long they lasted; a success alone says nothing."""
    handler, stream = _handler("text")
    logger = logging.getLogger("dealbroker.test.failures")
    logger.addHandler(handler)
    logger.propagate = False
    failures = logs.Failures(logger, "writing things", "kept for the next time")
    try:
        failures.succeeded(now=0.0)  # nothing failed: nothing to say
        failures.failed("ConnectionRefusedError at core/x.py:1", now=100.0)
        for second in range(101, 160):  # a failure a second: counted, not written
            failures.failed("ConnectionRefusedError at core/x.py:1", now=float(second))
        failures.failed("TimeoutError at core/x.py:2", now=160.0)  # a minute on: the count
        failures.failed("TimeoutError at core/x.py:2", now=161.0)
        failures.succeeded(now=170.0)
        failures.succeeded(now=171.0)  # over already
        failures.failed("TimeoutError at core/x.py:2", now=200.0)  # a new run
    finally:
        logger.removeHandler(handler)
    messages = [line.split(" ", 4)[4] for line in stream.getvalue().splitlines()]
    assert messages == [
        "writing things failed; kept for the next time: ConnectionRefusedError at core/x.py:1",
        "writing things failed 61 times in 60 s; kept for the next time: TimeoutError at core/x.py:2",
        "writing things recovered after 62 failures in 70 s",
        "writing things failed; kept for the next time: TimeoutError at core/x.py:2",
    ]
    levels = [line.split(" ", 3)[2] for line in stream.getvalue().splitlines()]
    assert levels == ["ERROR", "ERROR", "WARNING", "ERROR"]
