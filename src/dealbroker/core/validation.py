"""Field rules shared by request schemas: bounded strings, http(s) URLs and prices."""

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, ConfigDict, Field

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
