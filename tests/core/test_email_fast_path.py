"""The e-mail check's fast path (``validation.plain_email``) must accept and normalise exactly
as email-validator does (through pydantic's ``EmailStr`` check, which the request schemas used
before): whatever it answers, email-validator answers the same; whatever it leaves alone,
email-validator judges, with its own message.

The generated addresses are the plainly valid ones and every near miss of them: unicode in
either part (letters that lowercase or normalise to ASCII ones too), quoted local parts, IP
literals, display names, white space and control characters, role mailboxes in any case,
special-use domains, Punycode and ``ab--`` labels, numeric top-level labels, parts and labels
around their length limits, and single characters inserted or dropped anywhere.
"""

import string
from typing import Annotated

import email_validator
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, EmailStr, Field, ValidationError
from pydantic.networks import validate_email
from pydantic_core import PydanticCustomError

from dealbroker.core.validation import EMAIL_PATTERN, Email, email_address, plain_email

ATEXT = string.ascii_letters + string.digits + "_!#$%&'*+-/=?^`{|}~"
# What could make a plain-looking address something else, or something email-validator reads
# differently: specials, white space, controls, non-ASCII letters (some map to ASCII ones).
NEAR = (
    '.@ "\\()<>,;:[]\t\n\r\x00\x7f\u00a0\u200b\ufefféßÉıİ\u212a\uff45\ufb01\u0301Ωя中\U0001f600-_'
)
ROLES = ("info", "Postmaster", "ABUSE", "www", "noc", "support", "webmaster", "news")
SPECIAL = tuple(email_validator.SPECIAL_USE_DOMAIN_NAMES)


def _cased(word: str, flips: list[bool]) -> str:
    return "".join(
        c.upper() if f else c for c, f in zip(word, flips + [False] * len(word), strict=False)
    )


atom = st.text(ATEXT, min_size=1, max_size=12)
dot_atom = st.lists(atom, min_size=1, max_size=4).map(".".join)
local = st.one_of(
    dot_atom,
    dot_atom,
    st.builds(_cased, st.sampled_from(ROLES), st.lists(st.booleans(), max_size=10)),
    st.text(ATEXT + NEAR, min_size=0, max_size=20),
    st.text(ATEXT + ".", min_size=55, max_size=260),
    st.text(max_size=20).map(lambda t: f'"{t}"'),
    st.text(max_size=12),
)
label = st.one_of(
    st.text(string.ascii_letters + string.digits, min_size=1, max_size=10),
    st.text(string.ascii_letters + string.digits + "-", min_size=0, max_size=12),
    st.text(string.ascii_lowercase, min_size=58, max_size=66),
    st.sampled_from(("xn--bcher-kva", "xn--abc", "xn--", "ab--cd", "a-b", "-a", "a-", "Example")),
    st.text(string.ascii_lowercase + NEAR, min_size=1, max_size=8),
)
top = st.one_of(
    st.text(string.ascii_letters, min_size=1, max_size=8),
    st.sampled_from(SPECIAL).map(str.upper) | st.sampled_from(SPECIAL),
    st.text(string.ascii_letters + string.digits, min_size=1, max_size=4),
    label,
)
ipv4 = st.tuples(*[st.integers(0, 300)] * 4).map(lambda t: ".".join(map(str, t)))
domain = st.one_of(
    st.builds(lambda ls, t: ".".join([*ls, t]), st.lists(label, min_size=0, max_size=4), top),
    st.builds(lambda ls, t: ".".join([*ls, t]), st.lists(label, min_size=1, max_size=2), top),
    st.builds(
        lambda n, t: ".".join(["a" * 63] * n + [t]),
        st.integers(1, 5),
        st.sampled_from(("com", "c")),
    ),
    ipv4.map(lambda ip: f"[{ip}]"),
    st.sampled_from(("[IPv6:::1]", "[IPv6:2001:db8::1]", "[::1]", "[x]", "[]")),
    st.text(string.ascii_lowercase + "." + "éüøΩ中-", min_size=1, max_size=20),
    st.text(max_size=15),
)
address = st.builds(lambda lp, d: f"{lp}@{d}", local, domain)
plain_label = st.builds(
    lambda a, b: f"{a}-{b}" if b else a,
    st.text(string.ascii_letters + string.digits, min_size=1, max_size=8),
    st.text(string.ascii_letters + string.digits, max_size=4),
)
plain = st.builds(
    lambda lp, ls, t: f"{lp}@{'.'.join([*ls, t])}",
    dot_atom,
    st.lists(plain_label, min_size=1, max_size=3),
    st.text(string.ascii_letters, min_size=1, max_size=6),
)


def _edit(value: str, at: int, char: str, drop: bool) -> str:
    at %= len(value) + 1
    return value[:at] + value[at + 1 :] if drop else value[:at] + char + value[at:]


near_miss = st.builds(_edit, address, st.integers(0, 300), st.sampled_from(NEAR), st.booleans())
addresses = st.one_of(
    plain,
    plain,
    address,
    address,
    near_miss,
    st.builds(_edit, plain, st.integers(0, 300), st.sampled_from(NEAR), st.booleans()),
    st.builds(lambda n, a: f"{n} <{a}>", st.sampled_from(("Kari", '"Kari N"', "")), address),
    st.builds(lambda a, s: s + a + s, address, st.sampled_from((" ", "\t", "\n", "\u00a0"))),
    st.text(max_size=30),
)


def _reference(value: str) -> tuple[str, str]:
    try:
        return "ok", validate_email(value)[1]
    except PydanticCustomError as e:
        return "error", str(e)


def _ours(value: str) -> tuple[str, str]:
    try:
        return "ok", email_address(value)
    except PydanticCustomError as e:
        return "error", str(e)


@settings(max_examples=4000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(addresses)
@example("seller1@example.com")
@example("Kari.Nordmann+ads@Mail.Example.COM")
@example("a@b.c")
@example("PostMaster@example.com")
@example("a@b.localhost")
@example("a@B.TEST")
@example("a@xn--bcher-kva.example")
@example("a@ab--cd.example")
@example("a@example.123")
@example("a@[127.0.0.1]")
@example('"a b"@example.com')
@example("é@example.com")
@example("a@\u212aelvin.com")
@example("a" * 64 + "@" + ".".join(["b" * 63] * 3) + ".com")
@example("a" * 65 + "@example.com")
@example("a" * 243 + "@example.com")
@example("a" * 242 + "@example.com")
@example("a@" + ".".join(["b" * 63] * 3) + ".cc")
@example("a@" + ".".join(["b" * 63] * 3) + ".ccc")
@example("a@" + "b" * 64 + ".com")
def test_the_fast_path_answers_as_email_validator(value: str) -> None:
    reference = _reference(value)
    fast = plain_email(value)
    event("fast path" if fast is not None else f"left to email-validator: {reference[0]}")
    if fast is not None:
        assert reference == ("ok", fast)
    assert _ours(value) == reference


def test_the_plain_address_takes_the_fast_path() -> None:
    assert plain_email("seller1@example.com") == "seller1@example.com"
    assert plain_email("Kari.Nordmann+ads@Mail.Example.COM") == "Kari.Nordmann+ads@mail.example.com"
    for other in (
        "info@example.com",
        "a@b.test",
        "é@example.com",
        '"a"@example.com',
        "a@[1.2.3.4]",
    ):
        assert plain_email(other) is None


class Before(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    email: Annotated[EmailStr, Field(max_length=254, json_schema_extra={"pattern": EMAIL_PATTERN})]


class After(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    email: Email


def _validated(model: type[BaseModel], value: object) -> object:
    try:
        return model.model_validate({"email": value}).model_dump()
    except ValidationError as e:
        return e.errors(include_url=False)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(addresses, st.builds(lambda n: "a" * n + "@example.com", st.integers(240, 2100))))
@example(None)
@example(12)
@example(b"a@example.com")
def test_the_field_validates_and_describes_itself_as_email_str_did(value: object) -> None:
    assert _validated(After, value) == _validated(Before, value)


def test_the_schema_is_email_strs() -> None:
    assert After.model_json_schema()["properties"] == Before.model_json_schema()["properties"]
