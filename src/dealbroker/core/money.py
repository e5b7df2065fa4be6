"""Money: integer minor units inside, the API's numbers and the events' strings outside.

Every conversion between representations happens here, never with float arithmetic (the
API's number for an amount with cents is a float, the double nearest the exact amount:
``to_number``). One currency per deployment, with two decimals (every currency the settings
accept uses two).
"""

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Final

from babel.numbers import (
    NumberFormatError,
    format_currency,
    format_decimal,
    get_decimal_symbol,
    get_group_symbol,
    parse_decimal,
)

from dealbroker.core.i18n import _

MINOR_DIGITS: Final = 2
MINOR_PER_MAJOR = 10**MINOR_DIGITS
# The largest price a deal may carry: 10 million in major units.
MAX_AMOUNT_MINOR = 10_000_000 * MINOR_PER_MAJOR
MAX_AMOUNT_MAJOR = MAX_AMOUNT_MINOR // MINOR_PER_MAJOR
# The power of ten of the largest price's leading digit: any amount whose leading digit sits
# higher is over the bound, whatever its digits.
MAX_ADJUSTED_EXPONENT = Decimal(MAX_AMOUNT_MAJOR).adjusted()
# What a person may type as an amount, checked before any parsing: "10 000 000,00" is 13.
MAX_TYPED_LENGTH = 32
MAX_TYPED_DIGITS = 20
# Every kind of space a person or a copied text may group digits with (Babel's own set).
_SPACES = re.compile(r"[\s\u00a0\u2007\u202f]")


class MoneyError(ValueError):
    """A value that is not a valid amount of money."""


def to_minor(value: float | int | Decimal) -> int:
    """Convert an API number (e.g. ``1499.5``) to minor units, refusing sub-cent precision.

    A float is read through its shortest decimal representation, so ``0.1`` is 10 minor units.
    An int is whole, so only its bounds apply; it is checked as an int because turning a huge
    one into a Decimal takes time quadratic in its length.
    """
    if isinstance(value, bool):
        raise MoneyError(_("must be a number"))
    if isinstance(value, int):
        if value < 0:
            raise MoneyError(_("must not be negative"))
        if value > MAX_AMOUNT_MAJOR:
            raise MoneyError(_("must not exceed %(max)s") % {"max": MAX_AMOUNT_MAJOR})
        return value * MINOR_PER_MAJOR
    try:
        amount = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as exc:
        raise MoneyError(_("must be a number")) from exc
    return _decimal_to_minor(amount)


def _decimal_to_minor(amount: Decimal) -> int:
    """``amount`` in minor units, every bound checked on its digits and exponent first.

    A short text such as ``1e999990`` is a Decimal with a huge exponent: scaling it, or turning
    it into an int, would build a number of a million digits and hold the server for seconds.
    So nothing is computed until the amount is known to be at most the largest price, to the
    cent; the checks cost time in the number of digits written, never in the exponent.
    """
    if not amount.is_finite():
        raise MoneyError(_("must be a finite number"))
    if amount < 0:
        raise MoneyError(_("must not be negative"))
    if amount.is_zero():
        return 0  # "-0" and "0e999990" included
    significant = "".join(map(str, amount.as_tuple().digits)).rstrip("0")
    # The power of ten of the last nonzero digit (trailing zeros are no precision: 1.500 is 1.5).
    if amount.adjusted() - len(significant) + 1 < -MINOR_DIGITS:
        raise MoneyError(_("must have at most two decimals"))
    if amount.adjusted() > MAX_ADJUSTED_EXPONENT:
        raise MoneyError(_("must not exceed %(max)s") % {"max": MAX_AMOUNT_MAJOR})
    minor = int(amount.scaleb(MINOR_DIGITS))  # exact: at most ten significant digits
    if minor > MAX_AMOUNT_MINOR:
        raise MoneyError(_("must not exceed %(max)s") % {"max": MAX_AMOUNT_MAJOR})
    return minor


# Below this, an int is exactly a double, and so ``minor / MINOR_PER_MAJOR`` is one IEEE
# division of exact operands.
_EXACT_DOUBLE = 2**53


def to_number(minor: int) -> float | int:
    """Minor units as the API's JSON number: an integer when whole, else a float.

    The float is the double nearest the exact quotient: what ``float(Decimal(minor) / 100)``
    gives (the Decimal quotient is exact, and ``float`` of a Decimal rounds correctly), and
    what the division of two ints gives while both are exactly doubles (one IEEE division,
    correctly rounded), much cheaper (a list page has a price in each deal).
    ``test_money`` holds the two equal."""
    if minor % MINOR_PER_MAJOR == 0:
        return minor // MINOR_PER_MAJOR
    if -_EXACT_DOUBLE < minor < _EXACT_DOUBLE:
        return minor / MINOR_PER_MAJOR
    return float(Decimal(minor) / MINOR_PER_MAJOR)


def to_string(minor: int) -> str:
    """Minor units as the events' string with two decimals, e.g. ``"1499.50"``."""
    return f"{Decimal(minor) / MINOR_PER_MAJOR:.2f}"


def from_string(value: str) -> int:
    """A decimal text (an events' amount such as ``"1499.50"``, a form's price) as minor
    units, with ``to_minor``'s checks."""
    try:
        amount = Decimal(value)
    except InvalidOperation as exc:
        raise MoneyError(_("must be a number")) from exc
    return _decimal_to_minor(amount)


def parse(text: str, locale: str) -> int:
    """An amount a person typed on a page in ``locale`` (e.g. ``"1 500"`` or ``"1500,50"`` in
    Norwegian) as minor units, with ``to_minor``'s checks.

    Read by Babel, strictly: a grouping separator in the wrong place (``"1 50"``) is refused,
    and so is a separator the locale does not use (``"1.500"`` in Norwegian, which a person may
    mean as 1500 or as 1,5), as is a decimal separator followed by three digits. Any space
    groups digits where the locale groups with a space. The
    length and the digits are bounded first, and the bounds of the amount checked before Babel's
    strict check formats it, so no input costs more than its few characters.
    """
    text = text.strip()
    if len(text) > MAX_TYPED_LENGTH:
        raise MoneyError(_("is too long (at most %(n)s characters)") % {"n": MAX_TYPED_LENGTH})
    if sum(ch.isdigit() for ch in text) > MAX_TYPED_DIGITS:
        raise MoneyError(_("has too many digits (at most %(n)s)") % {"n": MAX_TYPED_DIGITS})
    group, decimal = get_group_symbol(locale), get_decimal_symbol(locale)
    if _SPACES.match(group):
        text = _SPACES.sub(group, text)
    foreign = any(ch in ".," and ch not in (group, decimal) for ch in text)
    # Three digits after the decimal separator are a group to many readers: "1,500" is 1,5 to a
    # Norwegian and 1500 to an English reader, and no amount has three decimals anyway.
    if foreign or re.search(rf"{re.escape(decimal)}\d{{3}}$", text):
        raise MoneyError(writing_hint(locale))
    try:
        # Not strict, this is only Decimal on the text without its separators: the amount's
        # bounds are checked on it before the strict check formats it again.
        _decimal_to_minor(parse_decimal(text, locale))
        return _decimal_to_minor(parse_decimal(text, locale, strict=True))
    except NumberFormatError as exc:
        reason = _("must be a number") if not exc.suggestions else _("is not written right")
        raise MoneyError(f"{reason}; {writing_hint(locale)}") from exc


def writing_hint(locale: str) -> str:
    """How to write an amount in ``locale`` (in the words of the current locale): "write it
    like 1 500 or 1500,50" for Norwegian."""
    grouped = format_decimal(1500, locale=locale)
    plain = format_decimal(Decimal("1500.50"), format="0.00", locale=locale)
    return _("write it like %(grouped)s or %(plain)s") % {"grouped": grouped, "plain": plain}


# CLDR's currency spacing, which Babel's ``format_currency`` does not apply: a currency sign
# that ends (or starts) with a letter is kept apart from the digits it touches by a no-break
# space, so English writes "NOK 4,500.00" (as ICU does), never "NOK4,500.00"; a symbol such as
# "€" stays against its digits ("€4,500.00").
_SIGN_TOUCHES_DIGIT = re.compile(r"(?<=[^\W\d_])(?=\d)|(?<=\d)(?=[^\W\d_])")


def to_text(minor: int, currency: str, locale: str) -> str:
    """Minor units as ``locale`` writes an amount of ``currency``: "4 500,00 kr" in Norwegian,
    "4 500,00 kr" for SEK in Swedish, "NOK 4,500.00" in English (the spaces no-break)."""
    written = format_currency(Decimal(minor) / MINOR_PER_MAJOR, currency, locale=locale)
    return _SIGN_TOUCHES_DIGIT.sub("\u00a0", written)


def to_input(minor: int, locale: str) -> str:
    """Minor units to prefill a form's amount field in ``locale`` ("4500,00"); ``parse`` reads it
    back unchanged."""
    return format_decimal(Decimal(minor) / MINOR_PER_MAJOR, format="0.00", locale=locale)


def fee_for(amount_minor: int, percent: Decimal, fixed: Decimal) -> int:
    """The service fee: ``percent`` of the amount plus ``fixed``, rounded half-up to minor units,
    never above the amount itself."""
    fixed_minor = to_minor(fixed)
    fee = (Decimal(amount_minor) * percent / 100).quantize(Decimal(1), rounding=ROUND_HALF_UP)
    return min(int(fee) + fixed_minor, amount_minor)


@dataclass(frozen=True)
class Escrowed:
    """What a payment holds and where it goes: the one place of the shipping arithmetic.

    ``amount`` is what the buyer pays in, ``fee`` the service's (on the item price only) and
    ``shipping`` what the parcel costs, which pays the carrier and never reaches the seller.
    Whichever way the money leaves, it is conserved: ``amount = paid out + fee + shipping`` on a
    payout, ``amount = refunded + shipping kept`` on a refund (the fee is given back with it).
    """

    amount: int
    fee: int
    shipping: int = 0

    @classmethod
    def for_price(
        cls,
        price_minor: int,
        shipping_minor: int | None,
        shipping_paid_by: str,
        percent: Decimal,
        fixed: Decimal,
    ) -> "Escrowed":
        """A new payment's amounts for an item of ``price_minor`` sent for ``shipping_minor``
        (None: no shipping price). ``shipping_paid_by`` ``buyer``: the amount is the price plus
        the shipping; ``seller``: the amount is the price, and the shipping comes off the
        payout. The payout is never negative: shipping above what the seller's price holds is
        the service's to bear (the payment keeps at most the amount), and the fee gives way
        before the shipping does."""
        amount = cls.charged(price_minor, shipping_minor, shipping_paid_by)
        shipping = min(shipping_minor or 0, amount)
        fee = min(fee_for(price_minor, percent, fixed), amount - shipping)
        return cls(amount, fee, shipping)

    @staticmethod
    def charged(price_minor: int, shipping_minor: int | None, shipping_paid_by: str) -> int:
        """What the buyer pays for an item of ``price_minor`` sent for ``shipping_minor``: the
        price, plus the shipping when the buyer pays it."""
        if shipping_paid_by == "buyer":
            return price_minor + (shipping_minor or 0)
        return price_minor

    @property
    def payout(self) -> int:
        """What the seller is paid: the amount less the fee and the shipping."""
        return self.amount - self.fee - self.shipping

    def refund(self, less_shipping: bool) -> int:
        """What the buyer gets back: the whole amount, or (``less_shipping``: a parcel the
        buyer did not collect, which travelled at their cost) the amount less the shipping."""
        return self.amount - self.shipping if less_shipping else self.amount
