"""The ways a buyer can pay, and which provider takes each.

One currency per deployment decides the methods it offers, in its order: NOK offers Vipps
MobilePay and cards, SEK Swish and cards, DKK MobilePay (the same Vipps MobilePay ePayment API)
and cards, any other currency cards only. ``DEALBROKER_PAYMENT_METHODS`` lists them instead, in
the order the buyer's page shows them (a method switched off is left out).

Each method has one provider at a time: cards ``DEALBROKER_PAYMENT_PROVIDER`` (``stripe`` or the
sandbox's ``simulated``), Vipps the ``vipps`` provider once its client id is set, Swish the
``swish`` provider once its merchant number is set. In the sandbox a method with no provider
configured is simulated (the test checkout page, named after the method); elsewhere it is refused
at start (``startup_problem``), as is a method whose provider cannot take the currency.
"""

from enum import StrEnum

from dealbroker.core.settings import Settings


class Method(StrEnum):
    CARD = "card"
    VIPPS = "vipps"
    SWISH = "swish"


# The currencies a method's provider takes; cards: whatever the card provider takes.
# Vipps MobilePay ePayment: NOK (Vipps), DKK and EUR (MobilePay); Swish: SEK only.
CURRENCIES: dict[Method, frozenset[str]] = {
    Method.VIPPS: frozenset({"NOK", "DKK", "EUR"}),
    Method.SWISH: frozenset({"SEK"}),
}
BY_CURRENCY: dict[str, tuple[Method, ...]] = {
    "NOK": (Method.VIPPS, Method.CARD),
    "DKK": (Method.VIPPS, Method.CARD),
    "SEK": (Method.SWISH, Method.CARD),
}
# A payment form that names no method (an older page): a card payment, if cards are offered.
DEFAULT = Method.CARD


def listed(settings: Settings) -> tuple[Method, ...] | None:
    """The methods ``DEALBROKER_PAYMENT_METHODS`` lists, in its order; None when it is empty."""
    names = [n.strip() for n in settings.payment_methods.split(",") if n.strip()]
    return tuple(Method(n) for n in names) or None


def configured(settings: Settings, method: Method) -> bool:
    """Whether ``method`` has its real provider's settings."""
    if method is Method.VIPPS:
        return bool(settings.vipps_client_id)
    if method is Method.SWISH:
        return bool(settings.swish_merchant_number)
    return settings.payment_provider != "simulated"


def provider_name(settings: Settings, method: Method) -> str:
    """The provider that takes ``method``'s payments here (``Payment.provider``)."""
    if method is Method.CARD:
        return settings.payment_provider
    return method.value if configured(settings, method) else "simulated"


def offered(settings: Settings) -> tuple[Method, ...]:
    """The methods the buyer's page offers, in its order. By default the currency's, each one
    whose provider is configured (in the sandbox, the simulated one stands in)."""
    explicit = listed(settings)
    if explicit is not None:
        return explicit
    return tuple(
        m
        for m in BY_CURRENCY.get(settings.currency, (Method.CARD,))
        if m is Method.CARD or settings.is_sandbox or configured(settings, m)
    )


def chosen(settings: Settings, name: str | None) -> Method | None:
    """The method a payment form names, if it is offered here (``DEFAULT`` for none)."""
    methods = offered(settings)
    if not name:
        return DEFAULT if DEFAULT in methods else methods[0]
    return next((m for m in methods if m.value == name), None)


def provider_names(settings: Settings) -> set[str]:
    """Every provider that takes a payment here."""
    return {provider_name(settings, m) for m in offered(settings)}


def startup_problem(settings: Settings) -> str | None:
    """Why the offered methods cannot run here (one line), or None."""
    for method in offered(settings):
        takes = CURRENCIES.get(method)
        if takes is not None and settings.currency not in takes:
            return (
                f"{method.value} cannot take {settings.currency} (it takes "
                f"{', '.join(sorted(takes))}); leave it out of DEALBROKER_PAYMENT_METHODS"
            )
        if (
            method is not Method.CARD
            and not settings.is_sandbox
            and not configured(settings, method)
        ):
            return (
                f"{method.value} is offered (DEALBROKER_PAYMENT_METHODS) but its provider is not "
                "configured; production does not simulate it"
            )
    return None
