"""Money conversions: exact, never through float arithmetic."""

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
    [("abc", "number"), ("", "number"), ("1.005", "two decimals"), ("-1.00", "negative")],
)
def test_from_string_refuses(value, reason):
    with pytest.raises(money.MoneyError, match=reason):
        money.from_string(value)


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
