"""Money conversions: exact, never through float arithmetic."""

import time
from decimal import Decimal

import pytest

from dealbroker.core import money


@pytest.mark.parametrize(
    ("value", "minor"),
    [
        (0, 0),
        (1, 100),
        (0.1, 10),
        (19.99, 1999),
        (4500.5, 450050),
        (Decimal("0.01"), 1),
        (10_000_000, 1_000_000_000),
    ],
)
def test_to_minor(value, minor):
    assert money.to_minor(value) == minor


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (-1, "negative"),
        (0.001, "two decimals"),
        (1.005, "two decimals"),
        (10_000_000.01, "exceed"),
        (1e308, "exceed"),
        (float("inf"), "finite"),
        (float("nan"), "finite"),
        (True, "number"),
    ],
)
def test_to_minor_refuses(value, reason):
    with pytest.raises(money.MoneyError, match=reason):
        money.to_minor(value)


def test_round_trips():
    for minor in (0, 1, 10, 99, 100, 1999, 450050, 123456789):
        assert money.to_minor(money.to_number(minor)) == minor
    assert money.to_number(1500) == 15
    assert isinstance(money.to_number(1500), int)
    assert money.to_string(450050) == "4500.50"
    assert money.to_string(5) == "0.05"
    for minor in (0, 5, 1999, 450050, 999_999_999):
        assert money.from_string(money.to_string(minor)) == minor


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("abc", "number"),
        ("", "number"),
        ("1.005", "two decimals"),
        ("-1.00", "negative"),
        # More digits than a Decimal context keeps (28): scaling once rounded this to 10.
        ("0.1000000000000000000000000000001", "two decimals"),
    ],
)
def test_from_string_refuses(value, reason):
    with pytest.raises(money.MoneyError, match=reason):
        money.from_string(value)


# A penetration test found that a 20-character form value (``1e999990``) held the server for
# 24 s: the bound was checked after scaling, and scaling built a number of a million digits.
# Each of these must be answered in milliseconds; 50 ms is a correctness bound, not a benchmark.
QUICK = 0.05
HUGE_OR_ODD = [
    ("1e999990", "exceed"),
    ("1E+999990", "exceed"),
    ("9" * 5000, "exceed"),
    ("1" + "0" * 5000, "exceed"),
    ("1e9999999999999999", "exceed"),  # once a decimal.Overflow, not a reason
    ("1e-999990", "two decimals"),
    ("9" * 5000 + ".001", "two decimals"),  # too precise is said first, as for small amounts
    ("-1e999990", "negative"),
    ("-1e-999990", "negative"),
    ("Infinity", "finite"),
    ("-Infinity", "finite"),
    ("NaN", "finite"),
    ("sNaN", "finite"),
    ("1e99999999999999999999", "number"),  # an exponent no Decimal holds
]


def _quickly(convert, value):
    started = time.perf_counter()
    try:
        return convert(value)
    finally:
        assert time.perf_counter() - started < QUICK


@pytest.mark.parametrize(
    ("text", "reason"), HUGE_OR_ODD, ids=lambda v: v if len(v) < 30 else f"{v[:4]}...{len(v)}chars"
)
def test_huge_or_odd_amounts_are_refused_in_milliseconds(text, reason):
    with pytest.raises(money.MoneyError, match=reason):
        _quickly(money.from_string, text)
    if reason != "number":
        with pytest.raises(money.MoneyError, match=reason):
            _quickly(money.to_minor, Decimal(text))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (10**100_000, "exceed"),  # as a Decimal, 0.4 s of quadratic conversion
        (-(10**100_000), "negative"),
        (1e308, "exceed"),
        (float("inf"), "finite"),
        (float("nan"), "finite"),
    ],
    ids=["int-1e100000", "int-minus-1e100000", "float-1e308", "float-inf", "float-nan"],
)
def test_huge_numbers_are_refused_in_milliseconds(value, reason):
    with pytest.raises(money.MoneyError, match=reason):
        _quickly(money.to_minor, value)


@pytest.mark.parametrize("text", ["-0", "-0.00", "0e999990", "0e-999990", "0.000"])
def test_zero_in_any_spelling_is_zero_in_milliseconds(text):
    assert _quickly(money.from_string, text) == 0
    assert _quickly(money.to_minor, Decimal(text)) == 0


def test_trailing_zeros_are_no_precision():
    assert money.from_string("1.500") == 150
    assert money.from_string("1" + "0" * 7 + "." + "0" * 40) == money.MAX_AMOUNT_MINOR
    assert money.from_string("1E+2") == 10000


@pytest.mark.parametrize(
    ("amount", "percent", "fixed", "fee"),
    [
        (10000, Decimal("5"), Decimal("0"), 500),
        (10050, Decimal("2.5"), Decimal("0"), 251),  # 251.25 -> 251
        (10010, Decimal("5"), Decimal("0"), 501),  # 500.5 -> 501, half-up
        (100, Decimal("5"), Decimal("2.00"), 100),  # never above the amount
        (0, Decimal("5"), Decimal("1"), 0),
        (1999, Decimal("0"), Decimal("0.50"), 50),
    ],
)
def test_fee(amount, percent, fixed, fee):
    assert money.fee_for(amount, percent, fixed) == fee
    assert 0 <= amount - money.fee_for(amount, percent, fixed) <= amount
