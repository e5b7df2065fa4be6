"""The payment tests' fixtures. The Stripe provider's: localstripe (the emulator) and a real
``dealbroker serve`` taking payments through it, on the test database of each backend. The bank
rail's: deals whose payouts go into bank files.

The server runs without its embedded worker: the tests make the provider calls (refunds,
payouts) themselves with the same settings, as the worker would, so each step's outcome is
there when the test looks.
"""

from collections.abc import Iterator

import pytest

from dealbroker.core.settings import Settings
from tests import lifecycle_helpers
from tests.payments.bank import BANK_SETTINGS
from tests.payments.emulator import LocalStripe
from tests.processes import Server


@pytest.fixture(scope="session")
def localstripe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStripe]:
    emulator = LocalStripe(tmp_path_factory.mktemp("localstripe"))
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="module")
def stripe_server(
    db_url: str, localstripe: LocalStripe, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    server = Server(
        db_url,
        tmp_path_factory.mktemp("stripe-server"),
        DEALBROKER_EMBEDDED_WORKER="off",
        **localstripe.settings(),
    )
    localstripe.send_webhooks_to(f"{server.base}/payments/v1/stripe/webhook")
    try:
        yield server
    finally:
        server.stop()
        (tmp_path_factory.getbasetemp() / "stripe-server.log").write_text(server.output())


@pytest.fixture
def stripe_settings(db_url: str, localstripe: LocalStripe, stripe_server: Server) -> Settings:
    """The server's settings, for the provider calls the tests make as its worker would."""
    localstripe.flush()  # every test starts with an empty Stripe account
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in localstripe.settings().items()}
    return Settings(
        database_url=db_url,
        base_url=stripe_server.base,
        environment="sandbox",
        **values,  # type: ignore[arg-type]
    )


@pytest.fixture
def bank_rail(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Deals driven in this test pay out by bank file: the provider-call job, as the deal
    driver runs it after each step, hands their payouts to the bank-file rail."""
    monkeypatch.setattr(lifecycle_helpers, "SETTINGS", BANK_SETTINGS)
    return BANK_SETTINGS
