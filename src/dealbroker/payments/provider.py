"""The payment provider: where the buyer pays, and who moves money back and out.

A provider plugs in behind ``PaymentProvider``, chosen by ``DEALBROKER_PAYMENT_PROVIDER``.
``stripe`` (``payments.stripe_provider``) takes real money. The built-in ``SimulatedProvider``
is the sandbox's: its checkout is the test page at ``/pay/<token>`` (succeed, fail, cancel), and
its refunds and payouts succeed at once. It moves no money, so it exists only in the sandbox:
elsewhere ``provider_for`` refuses it and ``startup_problem`` keeps ``serve`` and ``worker``
from starting with it.

Payouts may go by another rail than the pay-in provider's (``DEALBROKER_PAYOUT_RAIL``): with
``bank_file`` they are credit transfers in a file for the operator's bank (``payments.bank_file``),
whose answer comes days later in the bank's status report, so ``pay_out`` says ``SUBMITTED``
rather than ``PAID``. A seller who gave a Swish number is paid by Swish payouts instead
(``payments.swish_payouts``, ``DEALBROKER_SWISH_PAYOUTS``), whatever the bank rail:
``RailByAccount`` picks the rail by the account's kind.
"""

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable
from urllib.parse import quote

from stdnum import bic, iban
from stdnum.exceptions import ValidationError
from stdnum.no import kontonr, orgnr

from dealbroker.core.errors import Unavailable
from dealbroker.core.settings import Settings
from dealbroker.payments import methods
from dealbroker.payments.methods import Method
from dealbroker.payments.models import Payment, PayoutAccount


class ProviderError(Exception):
    """The provider refused or failed a refund or payout; the payment's status is not changed."""


class CardDeclined(ProviderError):
    """The provider answered our server that the buyer's card was declined: that attempt to
    pay is over (the message is the provider's, for the buyer)."""


class ReservationLapsed(ProviderError):
    """A capture refused because the provider's own record shows the reservation gone (lapsed,
    cancelled, or less than the amount): nothing can be taken, and the parties are told. Any
    other refusal of a capture is the operator's alone."""


class ProviderUnavailable(Unavailable):
    """No provider that may move money in this environment is configured."""


class PayoutOutcome(StrEnum):
    """What ``pay_out`` did: the money is sent (``PaidOut`` now), or the payout is handed on and
    its result comes later (the call stays open, the payment ``PendingPayOut``)."""

    PAID = "paid"
    SUBMITTED = "submitted"


class PaymentProvider(Protocol):
    name: str

    def checkout_url(self, base_url: str, token: str, return_path: str) -> str:
        """Where the buyer pays; the provider's outcome reaches the deal through the settlement
        handler (``payments.escrow.DealSide``)."""
        ...

    async def refund(self, payment: Payment, *, idempotency_key: str) -> str | None:
        """Return ``payment.refund_minor`` to the buyer (the whole amount, or less the shipping
        for a parcel the buyer did not collect), or raise ``ProviderError``; the provider's id
        of the refund, if it has one. A call repeated with the same ``idempotency_key`` (after
        a crash) must not refund twice."""
        ...

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        """Send ``payment.payout_minor`` (amount less fee and shipping) to the seller's account,
        or raise ``ProviderError``. A call
        repeated with the same ``idempotency_key`` must not pay twice."""
        ...

    async def cancel(self, payment: Payment, *, idempotency_key: str) -> bool:
        """Cancel the provider's side of a payment closed unpaid (its checkout), so the buyer
        can no longer pay it; raise ``ProviderError`` if the provider refuses. True when it
        cannot be cancelled because the buyer's money has come in already (to be refunded)."""
        ...


@runtime_checkable
class Capturing(Protocol):
    """A provider that only reserves the buyer's money when they pay (Vipps MobilePay): the
    money is taken by ``capture`` once the item is handed over (``Payment.reserved_until``)."""

    async def capture(self, payment: Payment, *, idempotency_key: str) -> None:
        """Take the reserved amount, or raise ``ProviderError`` (the reservation is gone). A
        call repeated with the same ``idempotency_key`` must not take it twice."""
        ...


class SimulatedProvider:
    name = "simulated"

    def checkout_url(self, base_url: str, token: str, return_path: str) -> str:
        return f"{base_url}/pay/{token}?return={quote(return_path, safe='')}"

    async def refund(self, payment: Payment, *, idempotency_key: str) -> str | None:
        return None  # simulated: the money is back at once

    async def cancel(self, payment: Payment, *, idempotency_key: str) -> bool:
        return False  # simulated: its test page charges open payments only

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        return PayoutOutcome.PAID  # simulated: sent at once (a bank takes up to 5 days)


class PayoutRail(Protocol):
    """How the seller's money leaves escrow, whoever took it in."""

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome: ...


class BankFilePayouts:
    """Payouts as credit transfers from the operator's client-funds account, in the ISO 20022
    file ``dealbroker payouts export`` writes. ``pay_out`` moves no money itself: the call is
    left ``submitted`` for the next file (its id is the transfer's end-to-end id, so it can be
    in one file only), and the bank's status report settles it."""

    name = "bank_file"

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        if account.kind not in ("iban", "account"):
            raise ProviderError(f"a bank transfer cannot pay to an account of kind {account.kind}")
        return PayoutOutcome.SUBMITTED


@dataclass
class RailByAccount:
    """Each payout by the rail of its account's kind: a Swish number by Swish payouts (when
    this deployment pays by Swish), a bank account by the configured bank rail."""

    bank: PayoutRail
    swish: PayoutRail | None

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        if account.kind == "swish":
            if self.swish is None:
                raise ProviderError("Swish payouts are not enabled here (DEALBROKER_SWISH_PAYOUTS)")
            return await self.swish.pay_out(payment, account, idempotency_key=idempotency_key)
        return await self.bank.pay_out(payment, account, idempotency_key=idempotency_key)


def rail_name(settings: Settings, account: PayoutAccount) -> str:
    """The rail that pays ``account`` here (``ProviderCall.rail``)."""
    if account.kind == "swish":
        return "swish"
    return settings.payout_rail


@dataclass
class WithPayoutRail:
    """The pay-in provider, its payouts made by another rail."""

    inner: PaymentProvider
    rail: PayoutRail
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.inner.name

    def checkout_url(self, base_url: str, token: str, return_path: str) -> str:
        return self.inner.checkout_url(base_url, token, return_path)

    async def refund(self, payment: Payment, *, idempotency_key: str) -> str | None:
        return await self.inner.refund(payment, idempotency_key=idempotency_key)

    async def cancel(self, payment: Payment, *, idempotency_key: str) -> bool:
        return await self.inner.cancel(payment, idempotency_key=idempotency_key)

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        return await self.rail.pay_out(payment, account, idempotency_key=idempotency_key)


def debtor_problem(settings: Settings) -> str | None:
    """What is missing or wrong in the client-funds account settings of the bank-file rail."""
    if not settings.payout_debtor_name.strip():
        return "DEALBROKER_PAYOUT_DEBTOR_NAME (the client-funds account's holder) is not set"
    checks = [
        ("DEALBROKER_PAYOUT_DEBTOR_ACCOUNT", settings.payout_debtor_account, _account),
        ("DEALBROKER_PAYOUT_DEBTOR_BIC", settings.payout_debtor_bic, bic.validate),
        ("DEALBROKER_PAYOUT_DEBTOR_ORG_NUMBER", settings.payout_debtor_org_number, orgnr.validate),
    ]
    for name, value, validate in checks:
        try:
            validate(value.replace(" ", ""))
        except ValidationError as exc:
            return f"{name} is not valid ({exc})"
    return None


def _account(number: str) -> str:
    compact = number.replace(".", "").upper()
    return iban.validate(compact) if compact[:2].isalpha() else kontonr.validate(compact)


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
    problem = methods.startup_problem(settings)
    if problem is not None:
        return problem
    if "swish" in methods.provider_names(settings):
        from dealbroker.payments import swish

        if (problem := swish.startup_problem(settings)) is not None:
            return problem
    if settings.payout_rail == "simulated" and not settings.is_sandbox:
        return (
            "the simulated payout rail pays nobody and runs only in the sandbox; "
            "production needs DEALBROKER_PAYOUT_RAIL=bank_file"
        )
    if settings.payout_rail == "bank_file" and (problem := debtor_problem(settings)):
        return problem
    if settings.swish_payouts:
        from dealbroker.payments import swish_payouts

        return swish_payouts.startup_problem(settings)
    return None


def provider_for(settings: Settings, method: Method = Method.CARD) -> PaymentProvider:
    """The provider that takes ``method``'s payments; ``ProviderUnavailable`` if it may not run
    here.

    Checked on every use, not only at start-up, so an app built without the CLI can never take
    or move simulated money in production either.
    """
    return provider_named(settings, methods.provider_name(settings, method))


def provider_of(settings: Settings, payment: Payment) -> PaymentProvider:
    """The provider that took ``payment`` (its refunds, captures and cancels go back to it)."""
    return provider_named(settings, payment.provider)


def provider_named(settings: Settings, name: str) -> PaymentProvider:
    """The provider called ``name`` (``Payment.provider``), with this deployment's payout rail;
    ``ProviderUnavailable`` if it may not run here."""
    if name == "sandbox":  # a payment the sandbox's trigger made: simulated
        name = "simulated"
    if name == "simulated" and not settings.is_sandbox:
        raise ProviderUnavailable(
            "Payments are not available: no payment provider is configured for production."
        )
    if (problem := methods.startup_problem(settings)) is not None:
        raise ProviderUnavailable(f"Payments are not available: {problem}.")
    if (problem := startup_problem(settings)) is not None:
        raise ProviderUnavailable(f"Payouts are not available: {problem}.")
    # Payouts are bank transfers or Swish payouts, never Stripe's; simulated ones are the
    # sandbox's only. The account's kind chooses between them.
    bank: PayoutRail = (
        BankFilePayouts() if settings.payout_rail == "bank_file" else SimulatedProvider()
    )
    rail: PayoutRail = bank
    if settings.swish_payouts:
        from dealbroker.payments.swish_payouts import SwishPayouts

        rail = RailByAccount(bank, SwishPayouts(settings))
    if name == "stripe":
        from dealbroker.payments.stripe_provider import StripeProvider

        return StripeProvider(settings, rail)
    if name == "vipps":
        from dealbroker.payments.vipps import VippsProvider

        return VippsProvider(settings, rail)
    if name == "swish":
        from dealbroker.payments.swish import SwishProvider

        return SwishProvider(settings, rail)
    if name != "simulated":
        raise ProviderUnavailable(f"Payments are not available: no provider {name} here.")
    if rail is bank and settings.payout_rail != "bank_file":
        return SimulatedProvider()
    return WithPayoutRail(SimulatedProvider(), rail)
