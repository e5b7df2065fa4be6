"""OpenTelemetry traces: requests, database statements, webhook sends and worker jobs, exported
over OTLP/HTTP (protobuf) when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set; off otherwise.

Off, nothing of OpenTelemetry's SDK is imported, no middleware is added and ``span`` hands back
one shared no-op context manager: a request pays one attribute read (bench/bench_tracing.py).
On, each process (every server process of ``serve --workers N``, every ``worker``) has its own
tracer provider and batch exporter, configured by the SDK's own ``OTEL_*`` variables
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``,
``OTEL_BSP_SCHEDULE_DELAY``, ``OTEL_EXPORTER_OTLP_HEADERS``, ...).

What a span may hold is what a log line may: a request span is named by the route's template
(``POST /deals/v1/deals/{dealId}/status``), never the path, which can hold a capability link's
secret; a database span holds the statement with its placeholders, never the parameters (the
request's personal data), and on an error its classes and code, never its message; a webhook
span names the endpoint by id, never its URL. Every log line written inside a span carries its
trace id (``core.logs``).
"""

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from fastapi.telemetry import TelemetryConfig
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.trace import Span, Tracer
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger("dealbroker.tracing")

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SERVICE_NAME = "dealbroker"

# FastAPI's own telemetry stays off, whatever the tracer provider: its request span records
# the raw path and query (a capability link's secret) and its log records exception messages.
# RequestSpanMiddleware makes the request's span instead.
FASTAPI_TELEMETRY: "TelemetryConfig" = {
    "tracing": False,
    "operation_spans": False,
    "metrics": False,
    "logs": False,
    "auto_configure": False,
}

_tracer: "Tracer | None" = None
_engine_id: int | None = None
_NO_SPAN = contextlib.nullcontext()


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process should trace: an OTLP endpoint is given, and neither the SDK nor
    its traces exporter is switched off by the standard variables."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def enabled() -> bool:
    return _tracer is not None


def start(process: str) -> bool:
    """Set up this process's tracer provider and OTLP exporter if ``wanted()``; once per
    process (a second call, e.g. the worker embedded in ``serve``, keeps the first). ``process``
    (``serve``, ``worker``) becomes the resource's ``dealbroker.process`` attribute."""
    global _tracer
    if _tracer is not None or not wanted():
        return _tracer is not None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from dealbroker import __version__
    from dealbroker.core import logs

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, when given, win over these defaults.
    resource = Resource.create(
        {
            "service.name": SERVICE_NAME,
            "service.version": __version__,
            "dealbroker.process": process,
            "process.pid": os.getpid(),  # several server processes: which one
        }
    )
    provider = TracerProvider(resource=resource)  # shut down (flushed) at exit by the SDK
    provider.add_span_processor(_without_idle_jobs(BatchSpanProcessor(OTLPSpanExporter())))
    trace.set_tracer_provider(provider)
    _tracer = provider.get_tracer("dealbroker", __version__)
    logs.trace_ids = _current_ids
    log.info("tracing on: spans exported over OTLP/HTTP")
    return True


def _current_ids() -> tuple[str, str] | None:
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def span(name: str, attributes: Mapping[str, Any] | None = None) -> Any:
    """A context manager: a span named ``name``, current inside the block, or nothing at all
    when tracing is off. Yields the span (``None`` when off)."""
    if _tracer is None:
        return _NO_SPAN
    return _recording(_tracer, name, attributes)


@contextlib.contextmanager
def _recording(tracer: "Tracer", name: str, attributes: Mapping[str, Any] | None) -> Iterator[Any]:
    from opentelemetry.trace import StatusCode

    # An exception's message may hold personal data: its class is all a span keeps of it.
    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_status(StatusCode.ERROR, type(exc).__name__)
            raise


def mark_failed(current: "Span", description: str) -> None:
    """Set ``current``'s status to error, with ``description`` (no personal data in it)."""
    from opentelemetry.trace import StatusCode

    current.set_status(StatusCode.ERROR, description)


def instrument_engine(engine: "AsyncEngine") -> None:
    """A span for every statement ``engine`` runs, through OpenTelemetry's SQLAlchemy
    instrumentation (statement text with placeholders; never its parameters); an error's
    span says what ``core.db.describe_error`` says (classes and code), never the message,
    which may quote a parameter. One engine a process (the instrumentation is one per process; each
    process of ours has one engine)."""
    global _engine_id
    if _tracer is None or _engine_id is not None:
        return
    from opentelemetry import trace
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from sqlalchemy import event
    from sqlalchemy.exc import DBAPIError

    from dealbroker.core.db import describe_error

    def error_without_text(context: Any) -> None:
        found: Span | None = getattr(context.execution_context, "_otel_span", None)
        if found is None:
            return
        wrapped = context.sqlalchemy_exception
        if isinstance(wrapped, DBAPIError):  # its class, the driver's class and code
            mark_failed(found, describe_error(wrapped))
        else:
            mark_failed(found, type(context.original_exception).__name__)
        found.end()
        context.execution_context._otel_span = None

    _engine_id = id(engine.sync_engine)
    SQLAlchemyInstrumentor().instrument(
        engine=engine.sync_engine,
        tracer_provider=trace.get_tracer_provider(),
        # It declares SQLAlchemy below 2.1; the events it uses are unchanged in 2.1 (tested).
        skip_dep_check=True,
    )
    # Its error handler puts the error's text in the span's status: ours takes its place.
    for listener in list(engine.sync_engine.dialect.dispatch.handle_error):
        if getattr(listener, "__module__", "").startswith("opentelemetry.instrumentation"):
            event.remove(engine.sync_engine, "handle_error", listener)
    event.listen(engine.sync_engine, "handle_error", error_without_text)


class RequestSpanMiddleware:
    """One server span per HTTP request, named ``METHOD /route/{template}`` once routed, with a
    parent from the request's ``traceparent`` header when it has one. Added only when tracing
    is on; wraps the request log, so its access line carries the trace id."""

    def __init__(self, app: ASGIApp) -> None:
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, StatusCode

        from dealbroker.core.request_metrics import METHODS, NotingStatus, RouteTemplates

        self.app = app
        self.templates = RouteTemplates()
        self._extract, self._kind, self._error = extract, SpanKind.SERVER, StatusCode.ERROR
        self._methods, self._noting = METHODS, NotingStatus

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _tracer is None:
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in (b"traceparent", b"tracestate")
        }
        method = scope["method"] if scope["method"] in self._methods else "other"
        noting = self._noting(send)

        with _tracer.start_as_current_span(
            method,
            context=self._extract(carrier) if carrier else None,
            kind=self._kind,
            attributes={"http.request.method": method},
            record_exception=False,  # its message may hold personal data; the status says 500
            set_status_on_exception=False,
        ) as current:
            try:
                await self.app(scope, receive, noting)
            finally:
                route = self.templates(scope)
                current.update_name(f"{method} {route}")
                current.set_attribute("http.route", route)
                current.set_attribute("http.response.status_code", noting.status)
                request_id = scope.get("state", {}).get("request_id")
                if request_id:
                    current.set_attribute("dealbroker.request_id", request_id)
                if noting.status >= 500:
                    current.set_status(self._error)


JOB_DONE = "dealbroker.job.done"


def job_span(name: str) -> Any:
    """The span of one run of a worker job (``job deliveries``); nothing when tracing is off.
    Set ``JOB_DONE`` on it to the work done: a run that found none is not exported."""
    return span(f"job {name}", {"dealbroker.job": name})


def _without_idle_jobs(exporting: "SpanProcessor") -> "SpanProcessor":
    """``exporting``, but the traces of job runs that found nothing to do are dropped: the
    worker runs its jobs every round of its loop, and most rounds of an idle worker find
    nothing (a few traces a second, each with its queries, worth nothing). A job run's spans
    wait until the run ends, which then decides; every other span goes on at once."""
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

    class WithoutIdleJobs(SpanProcessor):
        def __init__(self) -> None:
            self._held: dict[int, list[ReadableSpan]] = {}
            self._lock = threading.Lock()

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            if span.parent is None and span.attributes.get("dealbroker.job") is not None:
                with self._lock:
                    self._held[span.context.trace_id] = []
            exporting.on_start(span, parent_context)

        def on_end(self, span: ReadableSpan) -> None:
            trace_id = span.context.trace_id if span.context is not None else None
            with self._lock:
                held = self._held.get(trace_id) if trace_id is not None else None
                if held is not None and span.parent is not None:
                    held.append(span)  # a child of a job run: its end decides
                    return
                if held is not None:
                    del self._held[trace_id]  # type: ignore[arg-type]
            if held is None:
                exporting.on_end(span)
            elif (span.attributes or {}).get(JOB_DONE, 1):
                for child in held:
                    exporting.on_end(child)
                exporting.on_end(span)

        def shutdown(self) -> None:
            exporting.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporting.force_flush(timeout_millis)

    return WithoutIdleJobs()
