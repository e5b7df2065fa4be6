"""Field rules shared by request schemas: bounded strings, http(s) URLs and prices, and the
base every request body derives from."""

import re
from typing import Annotated, Any

import email_validator
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic.networks import validate_email
from pydantic_core import CoreSchema, core_schema

from dealbroker.core import money

# Every request body refuses unknown fields and does not coerce types ("12" is not a number).
STRICT = ConfigDict(extra="forbid", strict=True, populate_by_name=False)

MAX_URL_LENGTH = 2048


_H16 = "[0-9A-Fa-f]{1,4}"
_IPV6 = "|".join(
    [
        f"(?:{_H16}:){{7}}{_H16}",
        f"(?:{_H16}:){{1,7}}:",
        *(f"(?:{_H16}:){{1,{n}}}(?::{_H16}){{1,{7 - n}}}" for n in range(6, 0, -1)),
        f":(?:(?::{_H16}){{1,7}}|:)",
    ]
)
# Control characters and every white space, spelled out: Python's ``\\s`` and ECMA's (the
# document's regex dialect) differ (U+0085, U+FEFF).
_SPACE = (
    "\\u0000-\\u0020\\u007f-\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
)
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_PORT = "(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
# An absolute http(s) URL as the service takes it, stated so that the OpenAPI document says it
# too: a DNS name (labels of at most 63 characters, the last one starting with a letter), an
# IPv4 address or a bracketed IPv6 address; an optional port 1-65535; no user:password@; no
# white space or control character.
URL_PATTERN = (
    "^https?://"
    f"(?:(?:[A-Za-z0-9-]{{1,63}}\\.)*[A-Za-z][A-Za-z0-9-]{{0,62}}|(?:{_OCTET}\\.){{3}}{_OCTET}"
    f"|\\[(?:{_IPV6})\\])(?::{_PORT})?(?:[/?#][^{_SPACE}]*)?$"
)
_URL = re.compile(URL_PATTERN)


def _http_url(value: str) -> str:
    # The pattern alone: what it matches, ``urlsplit`` reads as an http(s) URL with a host and
    # no white space (``tests/core/test_url_pattern.py`` holds the two checks equal).
    if not _URL.fullmatch(value):
        raise ValueError("must be an absolute http(s) URL")
    return value


def _price(value: float) -> float:
    money.to_minor(value)  # raises MoneyError (a ValueError) with the reason
    return value


def _whole(value: Any) -> Any:
    """A whole float (``2734.0``) as the integer it is: JSON Schema's integers include it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _amount(value: str) -> str:
    money.from_string(value)  # the pattern guarantees a decimal; this checks the bounds
    return value


# The largest timestamp a datetime can hold (9999-12-31T23:59:59.999Z) bounds every millis field.
MAX_MILLIS = 253_402_300_799_999

HttpUrl = Annotated[
    str,
    Field(min_length=1, max_length=MAX_URL_LENGTH, json_schema_extra={"pattern": URL_PATTERN}),
    AfterValidator(_http_url),
]
# The bounds and the two decimals are checked by ``money`` (with its messages); the schema
# states them. (Not pydantic's ``multiple_of``: float remainders would refuse 0.29.)
Price = Annotated[
    float,
    Field(
        json_schema_extra={
            "minimum": 0,
            "maximum": money.MAX_AMOUNT_MAJOR,
            "multipleOf": 0.01,
        }
    ),
    AfterValidator(_price),
]
# An amount as the events write it: digits, a point, two decimals, within the price bounds.
AmountString = Annotated[
    str, Field(pattern=r"^(?:[0-9]{1,7}\.[0-9]{2}|10000000\.00)$"), AfterValidator(_amount)
]


def _case_free(word: str) -> str:
    return "".join(f"[{ch}{ch.upper()}]" for ch in word)


# pydantic's email check (email-validator) refuses addresses on the special-use domains of
# RFC 6761 and its successors (``.test``, ``.localhost``, ...), which no mail reaches: the
# schema states that with a pattern (JSON Schema's regexes have no flags, hence the classes).
EMAIL_PATTERN = (
    "^(?!.*@(?:[^@]*\\.)?(?:"
    + "|".join(_case_free(name) for name in email_validator.SPECIAL_USE_DOMAIN_NAMES)
    + ")$)[^\\u0000]*$"
)
# The plainly valid address, which nearly every request sends: a dot-atom of ASCII ``atext``
# before the @-sign; after it, ASCII DNS labels (1-63 letters, digits and inner hyphens, no two
# hyphens anywhere: no Punycode, no ``ab--`` label) and a last label of letters only.
_PLAIN_EMAIL = re.compile(
    r"([A-Za-z0-9_!#$%&'*+\-/=?^`{|}~]+(?:\.[A-Za-z0-9_!#$%&'*+\-/=?^`{|}~]+)*)"
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{1,63})"
)
# Local parts that email-validator lowercases (RFC 2142's role mailboxes): left to it.
_ROLE_MAILBOXES = frozenset(email_validator.rfc_constants.CASE_INSENSITIVE_MAILBOX_NAMES)


def email_address(value: str) -> str:
    """pydantic's ``EmailStr`` check (email-validator, no deliverability check): its answer and
    its errors, at a fraction of the cost for the plainly valid address (``plain_email``)."""
    plain = plain_email(value)
    return plain if plain is not None else validate_email(value)[1]


def plain_email(value: str) -> str | None:
    """``value`` normalised as email-validator does, if it is a plainly valid address; None
    for anything else, which is email-validator's to judge.

    email-validator takes such an address as it is, but for the domain, which it lowercases
    (UTS #46 maps ASCII letters to lowercase and leaves digits, hyphens and dots alone), and
    refuses it only for its length (at most 254 characters in all, 253 after the @-sign) or a
    special-use domain. Everything else (unicode, quoted local parts, IP literals, display
    names, white space, role mailboxes, special-use domains, anything too long) is left to
    it: ``tests/core/test_email_fast_path.py`` proves the two agree."""
    match = _PLAIN_EMAIL.fullmatch(value) if len(value) <= 254 else None
    if match is None:
        return None
    local, domain = match.groups()
    domain = domain.lower()
    if (
        len(domain) > 253
        or "--" in domain
        or local.lower() in _ROLE_MAILBOXES
        or _special_use(domain)
    ):
        return None
    return f"{local}@{domain}"


def _special_use(domain: str) -> bool:
    for name in email_validator.SPECIAL_USE_DOMAIN_NAMES:
        if domain == name or domain.endswith("." + name):
            return True
    return False


class _EmailAddress:
    """A string checked by ``email_address``, described as pydantic's ``EmailStr`` is."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, _source: type[Any], _handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(email_address, core_schema.str_schema())

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        field_schema = handler(schema)
        field_schema.update(type="string", format="email")
        return field_schema


Email = Annotated[
    str,
    _EmailAddress,
    Field(max_length=254, json_schema_extra={"pattern": EMAIL_PATTERN}),
]

# An integer that also takes a whole float (``60.0``), as JSON Schema's ``integer`` does.
WholeInt = Annotated[int, BeforeValidator(_whole)]
Millis = Annotated[
    int,
    Field(ge=0, le=MAX_MILLIS, description="Milliseconds since the epoch."),
    BeforeValidator(_whole),
]


def text(max_length: int) -> Any:
    """A non-empty string of at most ``max_length`` characters."""
    return Field(default=None, min_length=1, max_length=max_length)


NUL = "\x00"
NUL_REFUSED = "must not contain the NUL character (U+0000)"


def holds_nul(*values: str) -> bool:
    """Whether any of ``values`` holds U+0000, which a PostgreSQL text value cannot store.

    SQLite would store it, so input holding it is refused before it reaches a query (else one
    database keeps it and the other answers 500): request bodies through ``RequestModel``, the
    pages' forms and the token endpoint's form through this check.
    """
    return any(NUL in value for value in values)


# What the document says of every request string without a pattern of its own (the ones with
# one exclude U+0000 already): JSON Schema's dialect and Python's both read ``\u0000``.
NO_NUL_PATTERN = "^[^\\u0000]*$"


def _state_no_nul(schema: dict[str, Any]) -> None:
    """Add ``NO_NUL_PATTERN`` to each string property of a request model's JSON schema (in an
    ``anyOf`` with null, and as the items of a list), so generated clients and fuzzers know."""

    def mark(node: dict[str, Any]) -> None:
        if node.get("type") == "string" and "pattern" not in node and "enum" not in node:
            node["pattern"] = NO_NUL_PATTERN
        for key in ("anyOf", "oneOf"):
            for option in node.get(key, []):
                mark(option)
        if isinstance(node.get("items"), dict):
            mark(node["items"])

    for prop in schema.get("properties", {}).values():
        mark(prop)


def examples(*given: dict[str, Any]) -> ConfigDict:
    """A model's configuration that gives its OpenAPI schema these examples."""
    return ConfigDict(json_schema_extra={"examples": list(given)})


class RequestModel(BaseModel):
    """The base of every request body (nested ones included): strict, and no string with NUL
    (refused by the validator below, stated by the schema's patterns)."""

    model_config = STRICT

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # A method, not ``json_schema_extra``: the request models set that for their examples.
        schema = handler(core_schema)
        _state_no_nul(handler.resolve_ref_schema(schema))
        return schema

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        # Every field, so a new string field cannot forget the rule; nested request models
        # check their own fields, lists of strings (images) are checked item by item.
        # (Called for each field of each body: kept to a test or two for the common values.)
        if isinstance(value, str):
            nul = NUL in value
        elif isinstance(value, list):
            nul = any(isinstance(item, str) and NUL in item for item in value)
        else:
            return value
        if nul:
            raise ValueError(NUL_REFUSED)
        return value


def _no_nul_text(value: str | None) -> str | None:
    if value is not None and NUL in value:
        raise ValueError(NUL_REFUSED)
    return value


# A text query parameter: without U+0000 (a PostgreSQL text value cannot hold it), as the
# request bodies' strings are (``RequestModel``), and stated so by the document's pattern.
NoNulQuery = AfterValidator(_no_nul_text)
