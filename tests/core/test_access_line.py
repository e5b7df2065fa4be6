"""The access line is redacted in parts, where it is made: it must read exactly as redacting the
whole line read, whatever the request sends, in the text and in the JSON form.

The generated paths and request ids are made of what the patterns of ``logs.redact`` look
for (e-mails, IBANs, account and phone numbers, tokens, bearer strings, key=value secrets,
capability paths) and of what could join a match across the line's parts (digits, spaces,
``=``, ``:``, upper case, the letters that match ASCII ones only when case is ignored, control
characters), glued in any order.
"""

import io
import logging
import uuid

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dealbroker.core import logs
from dealbroker.core.request_log import METHODS, access_line, loggable, loggable_path

FRAGMENTS = (
    "/d/",
    "/o/",
    "/pay/",
    "/sandbox/mailbox/",
    "/-/",
    "…",
    "/deals/v1/deals/",
    "bearer",
    "Bearer ",
    "token=",
    "secret:",
    "password",
    "api_key",
    "tel=",
    "phone:",
    "mobil",
    "whsec_",
    "dbs_",
    "sk_live_",
    "@",
    "kari@example.no",
    ".no",
    "+47",
    "0046",
    "+47 400 00 000",
    "40000000",
    "400 00 000",
    "070-123 45 67",
    "NO93",
    "NO93 8601 1117 947",
    "8601.11.17947",
    "86011117947",
    "Q2x9mZr0kX4fT7b1VwYc3HnP8sLd6GjE5aUoRiKe0Mq",
    "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10",
    " ",
    "  ",
    "-",
    "=",
    ":",
    '"',
    "'",
    ",",
    ";",
    ".",
    "/",
    "_",
    "0",
    "1",
    "2",
    "9",
    "12",
    "200",
    "ſ",
    "K",
    "İ",
    "ı",
    "ſecret=x",
    "\n",
    "\x1b",
    "\\",
    "\u2028",
    "é",
    "٣",
    "ms rid=",
)
PIECE = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.text(alphabet="abcdefABCDEF0123456789 -_/.=:+@", max_size=12),
    st.text(max_size=4),
)
TEXT = st.lists(PIECE, max_size=10).map("".join)
PATH = st.one_of(TEXT.map(lambda text: "/" + text), TEXT)
STATUS = st.one_of(
    st.sampled_from((200, 201, 204, 303, 404, 409, 422, 500)), st.integers(-5, 10**9)
)
MS = st.one_of(
    st.floats(0, 50),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from((0.04, 1234567.89, 23456789.1, 9.999999e8, 1e9, 1e45)),
)
# Paths the short way takes: what a plain path may hold, and what in it the patterns look for.
PLAIN_PIECE = st.one_of(
    st.sampled_from(
        (
            "/d/",
            "/o/",
            "/pay/",
            "/sandbox/mailbox/",
            "/-/",
            "/…",
            "…",
            "bearer",
            "/bearer",
            "token",
            "api",
            "tel",
            "whsec_",
            "dbs_",
            "sk_live_",
            "_",
            "-",
            ".",
            "/",
            "0046",
            "40000000",
            "0701234567",
            "86011117947",
            "no93",
            "q2x9mzr0kx4ft7b1vwyc3hnp8sld6gje5auorike0mq",
            "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10",
            "/deals/v1/deals/",
            "/healthz",
            "secret",
            "ſecret=1",
        )
    ),
    st.text(alphabet="abcdefr0123456789_-./…", max_size=45),
    # Just outside a plain path: the short way must refuse these.
    st.sampled_from(
        ("NO93860111179470", "AB12", "token=", "tel:", "=", ":", " ", "+", "Bearer", "ſ")
    ),
)
PLAIN_PATH = st.lists(PLAIN_PIECE, max_size=8).map(lambda pieces: "/" + "".join(pieces))
ASCII_RID = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENTS), st.text(alphabet="abcdefABCDEF0123456789 -_/.=:+@", max_size=12)
    ),
    max_size=8,
).map(lambda pieces: loggable("".join(pieces).encode("ascii", "replace").decode()[:100]))
METHOD = st.one_of(st.sampled_from(sorted(METHODS)), st.sampled_from(("get", "BEARER", "X\n")))
RID = st.one_of(
    st.builds(lambda: uuid.uuid4().hex),
    st.builds(lambda: str(uuid.uuid4())),
    st.text(alphabet="0123456789abcdefABCDEF-", max_size=45),
    TEXT.map(lambda text: loggable(text.encode("latin-1", "replace").decode("latin-1")[:100])),
    TEXT.map(loggable),  # beyond Latin-1, as no header decodes
)


def whole_line(method: str, path: str, status: int, ms: float, rid: str) -> str:
    """The line as it was made before: formatted, then redacted as a whole by the filter."""
    message = "%s %s %s %.1fms rid=%s"
    return logs.redact(message % (loggable(method), loggable_path(path), status, ms, rid))


def formatted(form: str, msg: str, args: tuple[object, ...] | None) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(logs.formatter(form))  # type: ignore[arg-type]
    record = logging.LogRecord("dealbroker.http", logging.INFO, "", 0, msg, args, None)
    record.created, record.msecs = 1764182719.25, 250.0
    handler.handle(record)
    return stream.getvalue()


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(method=METHOD, path=PATH, status=STATUS, ms=MS, rid=RID)
def test_the_access_line_reads_as_the_whole_lines_redaction(method, path, status, ms, rid):
    line = access_line(method, path, status, ms, rid)
    # A line not marked redacted is redacted whole by the filter, as before.
    shown = line if type(line) is logs.Redacted else logs.redact(line)
    assert shown == whole_line(method, path, status, ms, rid)
    old = ("%s %s %s %.1fms rid=%s", (loggable(method), loggable_path(path), status, ms, rid))
    for form in ("text", "json"):
        assert formatted(form, line, None) == formatted(form, *old)


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(sorted(METHODS)),
    path=PLAIN_PATH,
    status=st.one_of(st.integers(100, 999), STATUS),
    ms=st.one_of(st.floats(0, 1e9, exclude_max=True), MS),
    rid=st.one_of(RID, ASCII_RID),
)
# "ſ" matches "s" when case is ignored: the path's "secret" lets the pattern run over the line,
# and it masks the request id's "ſecret=x" too.
@example(method="GET", path="/secret", status=200, ms=1.0, rid="ſecret=x")
# A random token just long enough, in the path and as the request id; a status read as a phone.
@example(method="GET", path="/" + "0123456789abcdef" * 3, status=200, ms=1.0, rid="a")
@example(method="GET", path="/x", status=200, ms=1.0, rid="0123456789abcdef" * 2 + "01234567")
@example(method="GET", path="/x", status=23456789, ms=1.0, rid="a")
# Around the paths the masking and the path's redaction leave as they are (``_UNTOUCHED``): a
# segment one short of a random token, and one as long; capability paths at the start and
# further in.
@example(
    method="GET",
    path="/deals/v1/" + "0123456789abcdef" * 2 + "0123456",
    status=200,
    ms=1.0,
    rid="a",
)
@example(
    method="GET",
    path="/deals/v1/" + "0123456789abcdef" * 2 + "01234567",
    status=200,
    ms=1.0,
    rid="a",
)
@example(method="GET", path="/portal/login/abc", status=200, ms=1.0, rid="a")
@example(method="GET", path="/back-office/login/abc", status=200, ms=1.0, rid="a")
@example(method="GET", path="/sandbox/mailbox/abc", status=200, ms=1.0, rid="a")
@example(method="GET", path="/deals/d/abc", status=200, ms=1.0, rid="a")
@example(method="GET", path="/x/pay/abc", status=200, ms=1.0, rid="a")
def test_a_plain_paths_line_reads_as_the_whole_lines_redaction(method, path, status, ms, rid):
    test_the_access_line_reads_as_the_whole_lines_redaction.hypothesis.inner_test(
        method, path, status, ms, rid
    )


def test_an_api_line_takes_the_short_way_and_a_strange_one_the_whole_redaction():
    rid = uuid.uuid4().hex
    deal = "/deals/v1/deals/3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"
    assert type(access_line("GET", deal, 200, 1.25, rid)) is logs.Redacted
    assert (
        access_line("GET", "/d/x/y/-/sign", 303, 1.25, "client-1")
        == "GET /d/…/…/-/sign 303 1.2ms rid=client-1"
    )
    # A path that could join a phone number with the status is left to the whole line's
    # redaction: "+47 1234 200" is a phone number there.
    line = access_line("GET", "/x +47 1234", 200, 1.25, rid)
    assert type(line) is str
    assert logs.redact(line) == f"GET /x [phone] 1.2ms rid={rid}"
    line = access_line("GET", "/x/bearer", 200, 1.25, rid)
    assert logs.redact(line) == f"GET /x/bearer [secret] 1.2ms rid={rid}"
