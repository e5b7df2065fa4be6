"""Which ways to pay a deployment offers (``payments.methods``) and the settings that decide them:
the currency's own by default, ``DEALBROKER_PAYMENT_METHODS`` instead, and what refuses to
start (one line each, ``methods.startup_problem``)."""

import pytest
from pydantic import ValidationError

from dealbroker.payments import methods
from dealbroker.payments.methods import Method
from dealbroker.payments.provider import ProviderUnavailable, provider_for, startup_problem
from tests.conftest import make_settings

DB = "sqlite+aiosqlite://"
# Production as it may run: a card provider, a payout rail, a support contact.
PRODUCTION = {
    "environment": "production",
    "secret_key": "p" * 40,
    "simple_signature": True,
    "payment_provider": "stripe",
    "stripe_secret_key": "sk_test_production_test_key",
    "stripe_publishable_key": "pk_test_production_test_key",
    "stripe_webhook_secret": "whsec_production_test_secret",
}


@pytest.mark.parametrize(
    ("currency", "offered"),
    [
        ("NOK", (Method.VIPPS, Method.CARD)),
        ("SEK", (Method.SWISH, Method.CARD)),
        ("DKK", (Method.VIPPS, Method.CARD)),
        ("EUR", (Method.CARD,)),
    ],
)
def test_the_currency_decides_the_methods_and_the_sandbox_simulates_them(currency, offered):
    settings = make_settings(DB, currency=currency)
    assert methods.offered(settings) == offered
    assert methods.startup_problem(settings) is None
    assert {methods.provider_name(settings, m) for m in offered} == {"simulated"}


def test_production_offers_a_wallet_only_once_its_provider_is_configured():
    bare = make_settings(DB, **PRODUCTION, currency="NOK")
    assert methods.offered(bare) == (Method.CARD,)
    assert methods.startup_problem(bare) is None
    vipps = make_settings(
        DB,
        **PRODUCTION,
        currency="NOK",
        vipps_client_id="client-1",
        vipps_client_secret="secret-1",
        vipps_subscription_key="subscription-1",
        vipps_merchant_serial_number="123456",
        vipps_webhook_secret="webhook-secret-1",
    )
    assert methods.offered(vipps) == (Method.VIPPS, Method.CARD)
    assert methods.provider_name(vipps, Method.VIPPS) == "vipps"
    assert methods.provider_name(vipps, Method.CARD) == "stripe"
    swish = make_settings(DB, **PRODUCTION, currency="SEK", swish_merchant_number="1231181189")
    assert methods.offered(swish) == (Method.SWISH, Method.CARD)
    assert methods.provider_name(swish, Method.SWISH) == "swish"


def test_the_listed_methods_replace_the_currency_s_in_their_order():
    settings = make_settings(DB, payment_methods=" card , vipps ")
    assert settings.payment_methods == "card,vipps"
    assert methods.offered(settings) == (Method.CARD, Method.VIPPS)
    assert methods.offered(make_settings(DB, payment_methods="card")) == (Method.CARD,)
    # Empty (or only separators' spaces): the currency's own.
    assert methods.offered(make_settings(DB, payment_methods="")) == (Method.VIPPS, Method.CARD)


@pytest.mark.parametrize(
    ("listed", "reason"),
    [
        ("paypal", "unknown payment method 'paypal'"),
        ("card,Vipps", "unknown payment method 'Vipps'"),
        ("vipps,card,vipps", "listed twice"),
        (",", "name at least one payment method"),
    ],
)
def test_a_wrong_list_of_methods_is_refused(listed, reason):
    with pytest.raises(ValidationError, match=reason):
        make_settings(DB, payment_methods=listed)


@pytest.mark.parametrize(
    ("currency", "listed", "line"),
    [
        ("SEK", "vipps,card", "vipps cannot take SEK (it takes DKK, EUR, NOK)"),
        ("NOK", "swish,card", "swish cannot take NOK (it takes SEK)"),
        ("EUR", "card,swish", "swish cannot take EUR (it takes SEK)"),
    ],
)
def test_a_method_that_cannot_take_the_currency_is_refused_at_start(currency, listed, line):
    settings = make_settings(DB, currency=currency, payment_methods=listed)
    problem = methods.startup_problem(settings)
    assert problem is not None
    assert problem.startswith(line)
    assert "DEALBROKER_PAYMENT_METHODS" in problem
    assert "\n" not in problem
    assert startup_problem(settings) == problem  # what serve and worker print
    with pytest.raises(ProviderUnavailable, match="cannot take"):
        provider_for(settings, Method.CARD)  # nor taken by an app built without the CLI


@pytest.mark.parametrize(("currency", "method"), [("NOK", "vipps"), ("SEK", "swish")])
def test_production_refuses_a_listed_method_whose_provider_is_not_configured(currency, method):
    settings = make_settings(DB, **PRODUCTION, currency=currency, payment_methods=f"{method},card")
    problem = methods.startup_problem(settings)
    assert problem is not None
    assert problem.startswith(f"{method} is offered (DEALBROKER_PAYMENT_METHODS)")
    assert "production does not simulate it" in problem
    # The sandbox simulates the same list.
    sandbox = make_settings(DB, currency=currency, payment_methods=f"{method},card")
    assert methods.startup_problem(sandbox) is None
    assert methods.provider_name(sandbox, Method(method)) == "simulated"


@pytest.mark.parametrize(
    ("offered", "posted", "chosen"),
    [
        ("vipps,card", "vipps", Method.VIPPS),
        ("vipps,card", None, Method.CARD),  # a form from before the methods: a card
        ("vipps", None, Method.VIPPS),  # no cards here: the first offered
        ("vipps,card", "swish", None),  # not offered
        ("vipps,card", "VIPPS", None),
    ],
)
def test_the_method_a_form_names(offered, posted, chosen):
    assert methods.chosen(make_settings(DB, payment_methods=offered), posted) is chosen
