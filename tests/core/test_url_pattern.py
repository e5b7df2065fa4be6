"""The URL fields' check is ``URL_PATTERN`` alone (``core.validation._http_url``): held here to
what it replaced, ``urlsplit`` reading an http(s) URL with a host, no white space, and the
pattern, for every string the pattern matches and for strings near it."""

import re
import sys
from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from dealbroker.core.validation import URL_PATTERN, _http_url

_URL = re.compile(URL_PATTERN)


def _before(value: str) -> bool:
    """The check as it was: whether it accepted ``value``."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname or not _URL.fullmatch(value):
        return False
    return not any(ch.isspace() for ch in value)


def _now(value: str) -> bool:
    try:
        _http_url(value)
    except ValueError:
        return False
    return True


def test_no_white_space_gets_through_the_pattern():
    for code in range(sys.maxunicode + 1):
        ch = chr(code)
        if ch.isspace():
            for url in (f"http://a/{ch}", f"http://a/b?{ch}", f"http://a#{ch}x", f"http://a{ch}"):
                assert not _now(url), (hex(code), url)


@settings(max_examples=3000, deadline=None)
@given(st.from_regex(URL_PATTERN, fullmatch=True))
def test_what_the_pattern_matches_the_old_check_accepted(url):
    assert _now(url)
    assert _before(url), url


_NEAR = st.builds(
    lambda scheme, host, rest: f"{scheme}{host}{rest}",
    st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "http:/", "http:///", ""]),
    st.one_of(
        st.sampled_from(["a", "a.b", "[::1]", "[1.2.3.4]", "[::1", "1.2.3.4", "u:p@a", "a:0"]),
        st.text(max_size=12),
    ),
    st.one_of(st.sampled_from(["", "/", "/x y", ":80/", ":65536", "?q", "#f", "\\\\"]), st.text()),
)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(_NEAR, st.text()))
def test_the_check_accepts_what_the_old_one_did(value):
    assert _now(value) == _before(value), value
