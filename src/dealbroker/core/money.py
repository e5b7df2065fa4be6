"""Money: integer minor units inside, the API's numbers and the events' strings outside.

Every conversion between representations happens here, never with float arithmetic. One
currency per deployment, with two decimals (every currency the settings accept uses two).
"""

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

MINOR_PER_MAJOR = 100
# The largest price a deal may carry: 10 million in major units.
MAX_AMOUNT_MINOR = 10_000_000 * MINOR_PER_MAJOR


class MoneyError(ValueError):
    """A value that is not a valid amount of money."""


def to_minor(value: float | int | Decimal) -> int:
    """Convert an API number (e.g. ``1499.5``) to minor units, refusing sub-cent precision.

    A float is read through its shortest decimal representation, so ``0.1`` is 10 minor units.
    """
    if isinstance(value, bool):
        raise MoneyError("must be a number")
    try:
        amount = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as exc:
        raise MoneyError("must be a number") from exc
    if not amount.is_finite():
        raise MoneyError("must be a finite number")
    if amount < 0:
        raise MoneyError("must not be negative")
    scaled = amount * MINOR_PER_MAJOR
    if scaled != scaled.to_integral_value():
        raise MoneyError("must have at most two decimals")
    minor = int(scaled)
    if minor > MAX_AMOUNT_MINOR:
        raise MoneyError(f"must not exceed {MAX_AMOUNT_MINOR // MINOR_PER_MAJOR}")
    return minor


def to_number(minor: int) -> float | int:
    """Minor units as the API's JSON number: an integer when whole, else a float."""
    if minor % MINOR_PER_MAJOR == 0:
        return minor // MINOR_PER_MAJOR
    return float(Decimal(minor) / MINOR_PER_MAJOR)


def to_string(minor: int) -> str:
    """Minor units as the events' string with two decimals, e.g. ``"1499.50"``."""
    return f"{Decimal(minor) / MINOR_PER_MAJOR:.2f}"


def from_string(value: str) -> int:
    """An events' string (e.g. ``"1499.50"``) as minor units, with ``to_minor``'s checks."""
    try:
        return to_minor(Decimal(value))
    except InvalidOperation as exc:
        raise MoneyError("must be a number") from exc


def fee_for(amount_minor: int, percent: Decimal, fixed: Decimal) -> int:
    """The service fee: ``percent`` of the amount plus ``fixed``, rounded half-up to minor units,
    never above the amount itself."""
    fixed_minor = to_minor(fixed)
    fee = (Decimal(amount_minor) * percent / 100).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return min(int(fee) + fixed_minor, amount_minor)
