"""Field rules shared by request schemas: bounded strings, http(s) URLs and prices, and the
base every request body derives from."""

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from dealbroker.core import money

# Every request body refuses unknown fields and does not coerce types ("12" is not a number).
STRICT = ConfigDict(extra="forbid", strict=True, populate_by_name=False)

MAX_URL_LENGTH = 2048


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an absolute http(s) URL")
    if any(ch.isspace() for ch in value):
        raise ValueError("must not contain white space")
    return value


def _price(value: float) -> float:
    money.to_minor(value)  # raises MoneyError (a ValueError) with the reason
    return value


def _amount(value: str) -> str:
    money.from_string(value)  # the pattern guarantees a decimal; this checks the bounds
    return value


# The largest timestamp a datetime can hold (9999-12-31T23:59:59.999Z) bounds every millis field.
MAX_MILLIS = 253_402_300_799_999

HttpUrl = Annotated[str, Field(min_length=1, max_length=MAX_URL_LENGTH), AfterValidator(_http_url)]
Price = Annotated[float, AfterValidator(_price)]
# An amount as the events write it: digits, a point, two decimals, within the price bounds.
AmountString = Annotated[str, Field(pattern=r"^\d{1,9}\.\d{2}$"), AfterValidator(_amount)]
Millis = Annotated[int, Field(ge=0, le=MAX_MILLIS, description="Milliseconds since the epoch.")]


def text(max_length: int) -> Any:
    """A non-empty string of at most ``max_length`` characters."""
    return Field(default=None, min_length=1, max_length=max_length)


NUL = "\x00"


def holds_nul(*values: str) -> bool:
    """Whether any of ``values`` holds U+0000, which a PostgreSQL text value cannot store.

    SQLite would store it, so input holding it is refused before it reaches a query (else one
    database keeps it and the other answers 500): request bodies through ``RequestModel``, the
    pages' forms and the token endpoint's form through this check.
    """
    return any(NUL in value for value in values)


class RequestModel(BaseModel):
    """The base of every request body (nested ones included): strict, and no string with NUL."""

    model_config = STRICT

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        # Every field, so a new string field cannot forget the rule; nested request models
        # check their own fields, lists of strings (images) are checked item by item.
        items = value if isinstance(value, list) else [value]
        if holds_nul(*(item for item in items if isinstance(item, str))):
            raise ValueError("must not contain the NUL character (U+0000)")
        return value
