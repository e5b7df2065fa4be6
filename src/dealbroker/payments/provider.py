"""The payment provider: where the buyer pays, and who moves money back and out.

A real provider (a PSP's checkout, refunds and payouts APIs) plugs in behind ``PaymentProvider``;
the built-in ``SimulatedProvider`` is the sandbox's: its checkout is the test page at
``/pay/<token>`` (succeed, fail, cancel), and its refunds and payouts succeed at once. It moves
no money, so it exists only in the sandbox: elsewhere ``provider_for`` refuses it and
``startup_problem`` keeps ``serve`` and ``worker`` from starting with it.
"""

from typing import Protocol
from urllib.parse import quote

from dealbroker.core.errors import Unavailable
from dealbroker.core.settings import Settings
from dealbroker.payments.models import Payment, PayoutAccount


class ProviderError(Exception):
    """The provider refused or failed a refund or payout; the payment's status is not changed."""


class ProviderUnavailable(Unavailable):
    """No provider that may move money in this environment is configured."""


class PaymentProvider(Protocol):
    name: str

    def checkout_url(self, base_url: str, token: str, return_path: str) -> str:
        """Where the buyer pays; the provider reports the outcome to ``settle_payment``."""
        ...

    async def refund(self, payment: Payment, *, idempotency_key: str) -> None:
        """Return the whole amount to the buyer, or raise ``ProviderError``. A call repeated
        with the same ``idempotency_key`` (after a crash) must not refund twice."""
        ...

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> None:
        """Send amount minus fee to the seller's account, or raise ``ProviderError``. A call
        repeated with the same ``idempotency_key`` must not pay twice."""
        ...


class SimulatedProvider:
    name = "simulated"

    def checkout_url(self, base_url: str, token: str, return_path: str) -> str:
        return f"{base_url}/pay/{token}?return={quote(return_path, safe='')}"

    async def refund(self, payment: Payment, *, idempotency_key: str) -> None:
        return None  # simulated: the money is back at once

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> None:
        return None  # simulated: sent at once (a bank takes up to 5 days)


def startup_problem(settings: Settings) -> str | None:
    """Why a process may not run with this configuration (one line), or None.

    Outside the sandbox the simulated provider would let deals be paid, completed and paid out
    with no money moved, so production must not start until a real provider is configured.
    """
    if settings.payment_provider == "simulated" and not settings.is_sandbox:
        return (
            "the simulated payment provider moves no money and runs only in the sandbox; "
            "production needs a real one (DEALBROKER_PAYMENT_PROVIDER)"
        )
    return None


def provider_for(settings: Settings) -> PaymentProvider:
    """The configured provider; ``ProviderUnavailable`` if it may not run here.

    Checked on every use, not only at start-up, so an app built without the CLI can never take
    or move simulated money in production either.
    """
    if startup_problem(settings) is not None:
        raise ProviderUnavailable(
            "Payments are not available: no payment provider is configured for production."
        )
    return SimulatedProvider()
