"""Logging: one configuration for every process, as text for a terminal or one JSON object a
line for a log pipeline (``DEALBROKER_LOG_FORMAT``), each line carrying the request id and the
integration and deal ids where they are known, and nothing secret or personal.

What is known about the work at hand sits in ``Context``, set by the request log middleware
for a request (and bound to by the code that learns more, e.g. the bearer-token check), or
passed as ``extra`` by a job. The code never logs secrets or personal data on purpose (request
bodies, query strings and database error texts are not logged at all, capability links are
masked by ``request_log.loggable_path``); ``redact`` is the second line behind that rule: every
line, and every traceback, is scrubbed of what looks like an e-mail address, a phone number,
an account number, a token or a capability path before it is written.
"""

import logging
import logging.config
import os
import re
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pythonjsonlogger.json import JsonFormatter
from starlette.types import Scope

CONTEXT_FIELDS = ("request_id", "integration_id", "deal_id")
TRACE_FIELDS = ("trace_id", "span_id")

# This process's id, on every JSON line (``pid``): ``serve --workers`` runs several server
# processes that write to one stream. Looked up once, and again in a forked child.
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def _no_trace() -> tuple[str, str] | None:
    return None


# The current span's (trace id, span id); ``core.tracing`` replaces this when tracing is on.
trace_ids: Callable[[], tuple[str, str] | None] = _no_trace


@dataclass
class Context:
    """What is known about the request at hand. One object per request, shared by reference,
    so what a dependency learns deep inside the request (the integration behind its token) is
    seen by the access line written after it, whatever context copies lie in between."""

    request_id: str | None = None
    integration_id: str | None = None
    deal_id: str | None = None
    scope: Scope | None = field(default=None, repr=False)
    # The request id and how the lines show it (``redact_request_id``), worked out once.
    _shown_id: tuple[str, str] | None = field(default=None, init=False, repr=False)

    def shown_request_id(self) -> str | None:
        rid = self.request_id
        if rid is None:
            return None
        if self._shown_id is None or self._shown_id[0] != rid:
            self._shown_id = (rid, redact_request_id(rid))
        return self._shown_id[1]

    def deal(self) -> str | None:
        if self.deal_id is not None:
            return self.deal_id
        params = (self.scope or {}).get("path_params") or {}
        found = params.get("dealId") or params.get("deal_id")
        return None if found is None else str(found)


_context: ContextVar[Context | None] = ContextVar("dealbroker_log_context", default=None)


def start(scope: Scope, request_id: str) -> Any:
    """Begin a request's context; returns the token ``end`` takes."""
    return _context.set(Context(request_id=request_id, scope=scope))


def request_id() -> str | None:
    """The id of the request at hand (its ``X-Request-Id``), None outside a request."""
    context = _context.get()
    return None if context is None else context.request_id


def end(token: Any) -> None:
    _context.reset(token)


_ESCAPED = "_dealbroker_log_context"


def mark_escaped(exc: BaseException) -> None:
    """Remember on ``exc`` the request it escaped from: the server logs it after the request's
    context has ended (uvicorn's "Exception in ASGI application"), and that line carries the
    request's ids all the same."""
    context = _context.get()
    if context is not None:
        try:
            setattr(exc, _ESCAPED, context)
        except AttributeError:  # an exception without a __dict__: its line goes without
            pass


def _context_of(record: logging.LogRecord) -> Context | None:
    context = _context.get()
    if context is None and record.exc_info and record.exc_info[1] is not None:
        context = getattr(record.exc_info[1], _ESCAPED, None)
    return context


def bind(**fields: object) -> None:
    """Record what the code has learnt about the request at hand (``integration_id``,
    ``deal_id``); nothing happens outside a request."""
    context = _context.get()
    if context is None:
        return
    for name, value in fields.items():
        if name not in CONTEXT_FIELDS:
            raise ValueError(f"unknown log context field {name}")
        setattr(context, name, None if value is None else str(value))


# Where a number in free text may start and end: not inside a word, an id, a path, a date or a
# decimal, nor as a field's value (``amount=25000000``: machine-written, a phone is named), and
# not followed by decimals (``201 12345.6ms`` is a status and a duration, not a phone number).
_START = r"(?<![\w.,\-=/+])"
_END = r"(?![\w\-]|[.,]\d)"
# Phone numbers as people write them: international (``+47 400 00 000``, ``0046 70 123 45
# 67``), Swedish national (``070-123 45 67``, ``08-123 456 78``), Norwegian and Danish (eight
# digits, the first 2 to 9, grouped as ``40000000``, ``40 00 00 00``, ``400 00 000``, ``4000
# 0000``). Amounts (``25 000 000``), statuses before durations, epoch times (``1764182719``)
# and counts do not look like these.
_PHONE = (
    r"(?:\+|00)\d(?:[ \-]?\d){6,13}"
    r"|0\d(?:[ \-]?\d){7,9}"
    r"|[2-9]\d{7}|[2-9]\d \d{2} \d{2} \d{2}|[2-9]\d{2} \d{2} \d{3}|[2-9]\d{3} \d{4}"
)

# A capability path's segments (the seller's page, an offer link, a checkout, a mailbox);
# a segment already masked ("…") is left, so the form action after "/-/" stays readable.
_CAPABILITY = re.compile(r"(/(?:d|o|pay|sandbox/mailbox)/)(?!…)[^\s\"'<>]+")
_CAPABILITY_MARKS = ("/d/", "/o/", "/pay/", "/sandbox/mailbox/")
_PREFIXED = re.compile(r"\b(?:whsec|dbs|sk_live|sk_test|rk_live|rk_test)_[A-Za-z0-9_+/=\-]+")
# A random token (40 or more URL-safe characters, a digit among them; a long name is not).
_TOKEN = re.compile(r"(?<![A-Za-z0-9_\-])(?=[A-Za-z_\-]*\d)[A-Za-z0-9_\-]{40,}(?![A-Za-z0-9_\-])")

# Most specific first: a token is not read as a phone number, an e-mail's digits not as one.
# Each pattern comes with the words (lower case) one of which a text must hold for the pattern to
# match at all, so most lines skip most patterns;
# ``_DIGIT`` stands for any digit, ``None`` for no such shortcut.
_DIGIT = "0123456789"
_PATTERNS: tuple[tuple[re.Pattern[str], str, tuple[str, ...] | None], ...] = (
    (_CAPABILITY, r"\1…", ("/",)),
    (re.compile(r"(?i)(\bbearer\s+)[^\s\"',;]+"), r"\1[secret]", ("bearer",)),
    (
        re.compile(
            r"(?i)\b((?:client_)?secret|token|password|passwd|authorization|api[_-]?key"
            r"|webhook-secret)(\"?\s*[:=]\s*\"?)[^\s\"',;&]+"
        ),
        r"\1\2[secret]",
        ("secret", "token", "passw", "authorization", "api"),
    ),
    (_PREFIXED, "[secret]", ("_",)),
    (_TOKEN, "[secret]", (_DIGIT,)),
    (re.compile(r"[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+"), "[email]", ("@",)),
    # A field named as a phone number, whatever its value looks like.
    (
        re.compile(
            r"(?i)\b(phone|tel|telephone|mobile|mobil|telefon)(\"?\s*[:=]\s*\"?)"
            r"(?:\+?\d[\d \-]*\d|[^\s\"',;&]+)"
        ),
        r"\1\2[phone]",
        ("phone", "tel", "mobil"),
    ),
    (
        re.compile(rf"\b[A-Z]{{2}}\d{{2}}(?: ?[A-Z0-9]{{4}}){{2,7}}(?: ?[A-Z0-9]{{1,4}})?{_END}"),
        "[account]",
        (_DIGIT,),
    ),
    (re.compile(rf"{_START}\d{{4}}[. ]?\d{{2}}[. ]?\d{{5}}{_END}"), "[account]", (_DIGIT,)),
    (re.compile(rf"{_START}(?:{_PHONE}){_END}"), "[phone]", (_DIGIT,)),
)
_HAS_DIGIT = re.compile(r"\d")


def redact(text: str) -> str:
    """``text`` with what looks like a secret or personal data replaced by a marker."""
    # Looked up once: a marker put in by one pattern ("[secret]") opens no match for another.
    lowered = text.lower()
    digits = _HAS_DIGIT.search(text) is not None
    for pattern, replacement, needles in _PATTERNS:
        if needles is None or _holds(lowered, digits, needles):
            text = pattern.sub(replacement, text)
    return text


# A plain path: lower-case words, digits, "_", ".", "-", "/", and "…" as a whole segment (a
# masked one). Of what ``redact`` looks for, such a path can hold only a capability path, a
# prefixed secret and a random token: it has no space (a bearer string), no "=" or ":" (a named
# secret or phone number), no "@", no upper case (an account number), and no place where a
# phone or account number may start (each character follows a word's, ".", "-" or "/", or a
# "…" that a digit cannot follow).
PLAIN_PATH = re.compile(r"/(?:[a-z0-9_./\-]|…(?![^/]))*")


def redact_plain_path(path: str) -> str:
    """``redact(path)`` of a path ``PLAIN_PATH`` matches, running only the patterns that can
    match in one, and each only when the text holds what it needs (a capability prefix, "_",
    more than 40 characters)."""
    if any(mark in path for mark in _CAPABILITY_MARKS):
        path = _CAPABILITY.sub(r"\1…", path)
    if "_" in path:
        path = _PREFIXED.sub("[secret]", path)
    if len(path) > 40:
        path = _TOKEN.sub("[secret]", path)
    return path


# A request id ``redact`` leaves alone after "rid=": the middleware's own (a uuid's hex) and a
# lower-case uuid; a phone or account number cannot start after "=", "-" or a word character,
# and a random token is 40 characters or more.
_PLAIN_REQUEST_ID = re.compile(r"[0-9a-f\-]{0,39}")


def redact_request_id(rid: str) -> str:
    """A request id (a client's ``X-Request-Id``, say) as a line may show it: what ``redact``
    leaves of it after "rid=", as in the access line (the text form's only place for it) and in
    the JSON form's ``request_id``. Nothing before it can reach into the id, and no match can
    start in "rid=", which is kept."""
    if _PLAIN_REQUEST_ID.fullmatch(rid):
        return rid
    return redact(f"rid={rid}").removeprefix("rid=")


class Redacted(str):
    """A message redacted where it was made (the access line, ``request_log.access_line``):
    ``ContextFilter`` writes it as it is instead of redacting it again. Only a message that is
    exactly what ``redact`` would make of it may be marked so."""

    __slots__ = ()


def _holds(lowered: str, digits: bool, needles: tuple[str, ...]) -> bool:
    for needle in needles:
        if needle is _DIGIT:
            if digits:
                return True
        elif needle in lowered:
            return True
    return False


class ContextFilter(logging.Filter):
    """Adds the context's ids to every record, the request id redacted (a client sends it), and
    writes its message and traceback redacted (the record's arguments are formatted into the
    message first, so none escapes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context_of(record)
        rid = getattr(record, "request_id", None)
        if rid is not None:  # a job's own
            record.request_id = redact_request_id(str(rid))
        else:
            record.request_id = None if context is None else context.shown_request_id()
        for name in ("integration_id", "deal_id"):
            if getattr(record, name, None) is None:
                value = None
                if context is not None:
                    value = context.deal() if name == "deal_id" else getattr(context, name)
                setattr(record, name, value)
        ids = trace_ids()
        record.trace_id, record.span_id = ids if ids is not None else (None, None)
        record.pid = _pid
        if type(record.msg) is not Redacted or record.args:
            record.msg, record.args = redact(record.getMessage()), None
        if record.exc_info:
            text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            record.exc_text, record.exc_info = redact(text), None
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
JSON_FIELDS = ("levelname", "name", "message", "pid", *CONTEXT_FIELDS, *TRACE_FIELDS)


# A process's start and stop, written whatever the level: what an operator looks for first.
process_log = logging.getLogger("dealbroker.process")


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, and the trace id at the end of a line written inside a span."""

    _second: tuple[int, str] = (-1, "")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802
        line = super().formatMessage(record)
        trace_id = getattr(record, "trace_id", None)
        return line if trace_id is None else f"{line} trace_id={trace_id}"

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        """``logging.Formatter``'s time, its date and second made once a second rather than once
        a line (the access log writes a line per request)."""
        msec_format = self.default_msec_format
        if datefmt is not None or msec_format is None:
            return super().formatTime(record, datefmt)
        return self.time_text(record.created, record.msecs)

    def time_text(self, created: float, msecs: float) -> str:
        """The line's time, ``created`` as ``logging.Formatter`` writes it by default."""
        second = int(created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        return self.default_msec_format % (self._second[1], msecs)  # type: ignore[operator]


class JsonLineFormatter(JsonFormatter):
    """The JSON form's formatter, as ``formatter`` configures it (its own type, so that
    ``LineWriter`` knows the configuration it may stand in for)."""


if sys.version_info >= (3, 13):

    def _record_time() -> tuple[float, float]:
        """A line's time and its milliseconds, as the running Python's ``LogRecord`` makes them."""
        ns = time.time_ns()
        created, msecs = ns / 1e9, (ns % 1_000_000_000) // 1_000_000 + 0.0
        if msecs == 999.0 and int(created) != ns // 1_000_000_000:
            msecs = 0.0  # the float rounded up to the next second
        return created, msecs

else:

    def _record_time() -> tuple[float, float]:
        """A line's time and its milliseconds, as the running Python's ``LogRecord`` makes them."""
        created = time.time()
        return created, int((created - int(created)) * 1000) + 0.0


class LineWriter:
    """Writes a logger's INFO lines as the logging configuration of ``config`` writes them,
    byte for byte, without the logging module's record, filter and formatter chain: the access
    log writes a line per request, and that chain cost a fifth of a ``/healthz``
    (bench/README.md).

    It stands in only while a line would reach exactly one handler, the stream handler that
    ``config`` makes (``ContextFilter``, ``formatter``'s text or JSON formatter, nothing added),
    through no filter; otherwise (a test's capturing handler, a filter added, another format)
    and whenever the write fails, the line goes through the logging module as any other.
    ``tests/core/test_logs.py`` holds the two equal in both forms."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        # The handler last found standing in for, and its formatter and filter then.
        self._checked: tuple[logging.Handler, logging.Formatter | None, list[Any]] | None = None

    def _handler(self) -> logging.StreamHandler[Any] | None:
        logger = self.logger
        if logger.disabled or logger.filters:
            return None
        found: logging.Handler | None = None
        current: logging.Logger | None = logger
        while current is not None:  # as Logger.callHandlers walks
            for handler in current.handlers:
                if found is not None:
                    return None
                found = handler
            current = current.parent if current.propagate else None
        if found is None or found.level > logging.INFO:
            return None
        checked = self._checked
        if checked is None or not (
            checked[0] is found and checked[1] is found.formatter and checked[2] == found.filters
        ):
            if not (
                type(found) is logging.StreamHandler
                and len(found.filters) == 1
                and type(found.filters[0]) is ContextFilter
                and type(found.formatter) in (TextFormatter, JsonLineFormatter)
                and found.formatter.datefmt is None  # type: ignore[union-attr]
                and (
                    type(found.formatter) is not TextFormatter
                    or found.formatter._fmt == TEXT_FORMAT
                )
                and logging.getLevelName(logging.INFO) == "INFO"
            ):
                return None
            self._checked = (found, found.formatter, list(found.filters))
        return found  # type: ignore[return-value]

    def info(self, message: str) -> None:
        """``logger.info(message)``, the caller having asked ``isEnabledFor(INFO)``."""
        handler = self._handler()
        if handler is None:
            self.logger.info(message)
            return
        created, msecs = _record_time()
        text = message if type(message) is Redacted else redact(message)
        ids = trace_ids()
        form = handler.formatter
        if type(form) is TextFormatter:
            line = f"{form.time_text(created, msecs)} INFO {self.logger.name} {text}"
            if ids is not None:
                line = f"{line} trace_id={ids[0]}"
        else:
            assert isinstance(form, JsonLineFormatter)
            context = _context.get()
            fields: dict[str, Any] = {
                "levelname": "INFO",
                "name": self.logger.name,
                "message": text,
                "pid": _pid,
                "request_id": None if context is None else context.shown_request_id(),
                "integration_id": None if context is None else context.integration_id,
                "deal_id": None if context is None else context.deal(),
                "trace_id": None if ids is None else ids[0],
                "span_id": None if ids is None else ids[1],
            }
            data = {form.rename_fields.get(name, name): fields[name] for name in JSON_FIELDS}
            data["time"] = datetime.fromtimestamp(created, tz=UTC)
            line = form.serialize_log_record(data)
        stream = handler.stream
        try:
            with handler.lock:  # type: ignore[union-attr]
                stream.write(line + handler.terminator)
                # ``StreamHandler.flush`` without taking the lock held already (the handler's
                # type is ``StreamHandler`` itself, checked above).
                if stream and hasattr(stream, "flush"):
                    stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.logger.info(message)  # the logging module reports what went wrong


# While something keeps failing, how often its failures are logged, with their count
# (``Failures``).
FAILURE_LOG_SECONDS = 60.0


class Failures:
    """A run of failures of one thing (a job, the requests on the database, a periodic write),
    logged as an operator reads an outage: the first failure, then at most every
    ``FAILURE_LOG_SECONDS`` their count and the latest, and at the first success after them,
    how many there were and how long they lasted. Never a line per failure: while the database
    is down a job fails on every poll, a server process refuses every request.

    Its lines: ``<what> failed; <then>: <latest>``, ``<what> failed <n> times in <s> s;
    <then>: <latest>`` (at ``level``), ``<what> recovered after <n> failures in <s> s``
    (a warning). ``latest`` says what failed without an error's text (``core.db.describe_error``):
    it may hold personal data."""

    def __init__(
        self, log: logging.Logger, what: str, then: str, level: int = logging.ERROR
    ) -> None:
        self.log = log
        self.what = what
        self.then = then
        self.level = level
        self.since: float | None = None  # the first failure of the run, ``time.monotonic``
        self.logged_at = 0.0  # the last one logged
        self.count = 0

    def failed(self, latest: str, now: float | None = None) -> None:
        """One more failure; ``latest`` says what it was."""
        now = time.monotonic() if now is None else now
        if self.since is None:
            self.since, self.logged_at, self.count = now, now, 1
            self.log.log(self.level, "%s failed; %s: %s", self.what, self.then, latest)
            return
        self.count += 1
        if now - self.logged_at < FAILURE_LOG_SECONDS:
            return
        self.logged_at = now
        self.log.log(
            self.level,
            "%s failed %d times in %.0f s; %s: %s",
            self.what,
            self.count,
            now - self.since,
            self.then,
            latest,
        )

    def succeeded(self, now: float | None = None) -> None:
        """It worked: the end of a run of failures, if there was one."""
        since = self.since
        if since is None:
            return
        now = time.monotonic() if now is None else now
        self.since = None
        self.log.warning(
            "%s recovered after %d failures in %.0f s", self.what, self.count, now - since
        )


def formatter(form: Literal["text", "json"]) -> logging.Formatter:
    """The lines' form. ``dictConfig`` calls this in every process it configures (uvicorn's
    server processes too), which is where Python's warnings (a library's deprecation at import)
    are routed into logging: written raw to stderr they would break a JSON log's lines, and
    where records stop looking up the fields no line shows (``skip_unused_fields``)."""
    logging.captureWarnings(True)
    skip_unused_fields()
    if form == "json":
        return JsonLineFormatter(
            list(JSON_FIELDS),
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp="time",  # UTC, ISO 8601
        )
    return TextFormatter(TEXT_FORMAT)


def config(level: str, form: Literal["text", "json"]) -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of every process: ``serve`` hands it to uvicorn too, so
    its server processes (several with ``--workers``) and its own loggers write the same way."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": ContextFilter}},
        "formatters": {"default": {"()": formatter, "form": form}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "default",
                "filters": ["context"],
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        # uvicorn's loggers write through the root's handler, not handlers of their own; but
        # its access log writes nowhere, whoever runs the app and however (``serve`` turns it
        # off, a plain ``uvicorn`` command line may not, and a later ``dictConfig`` would turn
        # it back on): it would log capability links' paths and query strings in full, and a
        # second line per request. ``request_log`` writes the one access line, redacted.
        "loggers": {
            **{
                name: {"level": level.upper(), "handlers": [], "propagate": True}
                for name in ("uvicorn", "uvicorn.error")
            },
            "uvicorn.access": {"handlers": [], "propagate": False},
            process_log.name: {"level": "INFO"},
        },
    }


def configure(level: str, form: Literal["text", "json"]) -> None:
    logging.config.dictConfig(config(level, form))


def skip_unused_fields() -> None:
    """A record no longer looks up where it was made (the caller's file, line and function),
    nor its thread and process: no line the processes write shows them, and the access log
    writes one record per request (the logging module's documented optimisations). Every
    process that ``dictConfig`` configures calls this, through ``formatter``."""
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
