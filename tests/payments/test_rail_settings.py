"""Which payout rail may run where: never the simulated one in production, never the bank-file
one without a valid client-funds account."""

import pytest

from dealbroker.core.settings import Settings
from dealbroker.payments.provider import (
    PayoutOutcome,
    ProviderUnavailable,
    SimulatedProvider,
    WithPayoutRail,
    provider_for,
    startup_problem,
)
from tests.payments.bank import BANK_SETTINGS

PRODUCTION = {
    "database_url": "sqlite://",
    "environment": "production",
    "secret_key": "p" * 40,
    "support_email": "support@market.example.com",
}


def test_the_sandbox_runs_either_rail():
    simulated = Settings(database_url="sqlite://", environment="sandbox")
    assert startup_problem(simulated) is None
    assert isinstance(provider_for(simulated), SimulatedProvider)
    assert startup_problem(BANK_SETTINGS) is None
    provider = provider_for(BANK_SETTINGS)
    assert isinstance(provider, WithPayoutRail)
    assert provider.name == "simulated"  # pay-in is still the sandbox's


def test_production_refuses_the_simulated_rail():
    settings = Settings(**PRODUCTION)  # type: ignore[arg-type]
    assert "simulated payment provider" in (startup_problem(settings) or "")
    # As if a real pay-in provider were configured (none is built in yet): the rail is judged.
    real_pay_in = settings.model_copy(update={"payment_provider": "real"})
    assert "simulated payout rail" in (startup_problem(real_pay_in) or "")
    bank = BANK_SETTINGS.model_copy(update={**PRODUCTION, "payment_provider": "real"})
    assert startup_problem(bank) is None


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"payout_debtor_name": " "}, "DEALBROKER_PAYOUT_DEBTOR_NAME"),
        ({"payout_debtor_account": "15030000003"}, "DEALBROKER_PAYOUT_DEBTOR_ACCOUNT"),
        ({"payout_debtor_account": ""}, "DEALBROKER_PAYOUT_DEBTOR_ACCOUNT"),
        ({"payout_debtor_bic": "DNB"}, "DEALBROKER_PAYOUT_DEBTOR_BIC"),
        ({"payout_debtor_org_number": "923609017"}, "DEALBROKER_PAYOUT_DEBTOR_ORG_NUMBER"),
    ],
)
def test_the_bank_file_rail_needs_a_valid_client_funds_account(override, named):
    settings = BANK_SETTINGS.model_copy(update=override)
    assert named in (startup_problem(settings) or "")
    with pytest.raises(ProviderUnavailable, match="Payouts are not available"):
        provider_for(settings)


async def test_the_simulated_rail_still_pays_at_once():
    outcome = await SimulatedProvider().pay_out(None, None, idempotency_key="k")  # type: ignore[arg-type]
    assert outcome is PayoutOutcome.PAID
