"""The payment provider: where the buyer pays, and who moves money back and out.

A real provider (a PSP's checkout, refunds and payouts APIs) plugs in behind ``PaymentProvider``;
the built-in ``SimulatedProvider`` is always used in the sandbox: its checkout is the test page
at ``/pay/<token>`` (succeed, fail, cancel), and its refunds and payouts succeed at once.
"""

from typing import Protocol
from urllib.parse import quote

from dealbroker.core.settings import Settings
from dealbroker.payments.models import Payment, PayoutAccount


class ProviderError(Exception):
    """The provider refused or failed a refund or payout; the payment's status is not changed."""


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


provider: PaymentProvider = SimulatedProvider()


def provider_for(settings: Settings) -> PaymentProvider:
    """The configured payment provider."""
    return provider
