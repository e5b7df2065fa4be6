"""Stripe as the payment provider: the buyer pays on our checkout page with Stripe.js (card data
goes from the browser to Stripe, never through us), Stripe's signed webhook says whether the
money came in, refunds are Stripe Refunds.

The pay-in is a PaymentIntent created from our payment row (its amount and currency, our ids in
its metadata, an idempotency key derived from our payment's id) together with a Customer it
belongs to. The card is taken by a SetupIntent confirmed in the browser (``confirmCardSetup``);
the server then puts that card on the PaymentIntent and confirms it, and the browser completes
3-D Secure when Stripe asks for it (``confirmCardPayment``). Nothing here marks a payment paid:
only the webhook does (``payments.stripe_events``).

Payouts are not Stripe's here: the seller is paid by bank transfer, a rail of its own. Until
that rail exists the sandbox pays out simulated, and elsewhere a payout is refused (the payment
becomes ``PayoutFailed`` and waits; no money is lost or sent twice).

Every call opens its own HTTP client and closes it: the provider is made per use
(``provider_for``), in the web process, the worker and the CLI alike.
"""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from dealbroker.core.settings import Settings
from dealbroker.payments.models import Payment, PayoutAccount
from dealbroker.payments.provider import CardDeclined, PayoutOutcome, PayoutRail, ProviderError

if TYPE_CHECKING:
    import stripe

log = logging.getLogger("dealbroker.payments")

# The stripe library is imported where a call needs it, not with this module: every process
# imports the payments (the checkout, the reconciliation) and most never talk to Stripe.


def _refusals() -> "tuple[type[stripe.StripeError], ...]":
    """The errors in which Stripe refused the request itself: asking again will not help."""
    import stripe

    return (
        stripe.CardError,
        stripe.InvalidRequestError,
        stripe.PermissionError,
        stripe.AuthenticationError,
        stripe.IdempotencyError,
    )


@dataclass(frozen=True)
class Intent:
    """What the checkout needs of a PaymentIntent."""

    id: str
    status: str
    client_secret: str


@dataclass(frozen=True)
class Record:
    """One of the provider's records of money moved, to compare with ours (reconciliation)."""

    kind: str  # "payment" or "refund"
    id: str
    payment_intent_id: str | None
    amount_minor: int
    currency: str  # upper case, as ours
    status: str
    created: datetime


class StripeProvider:
    name = "stripe"

    def __init__(self, settings: Settings, payouts: PayoutRail):
        self._secret_key = settings.stripe_secret_key
        self._api_base = settings.stripe_api_base.rstrip("/")
        self._payouts = payouts

    @asynccontextmanager
    async def _client(self) -> AsyncIterator["stripe.StripeClient"]:
        import stripe

        http = stripe.HTTPXClient(allow_sync_methods=False)
        client = stripe.StripeClient(
            self._secret_key.get_secret_value(),
            base_addresses={"api": self._api_base},
            http_client=http,
            max_network_retries=2,
        )
        try:
            yield client
        finally:
            await http.close_async()

    def checkout_url(self, base_url: str, token: str, return_path: str) -> str:
        return f"{base_url}/pay/stripe/{token}?return={quote(return_path, safe='')}"

    # --- pay-in ---------------------------------------------------------------------------

    async def create_intent(self, payment: Payment) -> tuple[str, str]:
        """``(customer id, PaymentIntent id)`` for ``payment``, created from its row. The
        idempotency keys are the payment's id, so a repeated call gets the same objects."""
        metadata = {"payment_id": str(payment.id), "deal_id": str(payment.deal_id)}
        async with self._client() as client:
            customer = await client.v1.customers.create_async(
                params={"metadata": metadata},
                options={"idempotency_key": f"customer-{payment.id}"},
            )
            intent = await client.v1.payment_intents.create_async(
                params={
                    "amount": payment.amount_minor,
                    "currency": payment.currency.lower(),
                    "customer": customer.id,
                    "metadata": metadata,
                },
                options={"idempotency_key": f"payment-intent-{payment.id}"},
            )
        return customer.id, intent.id

    async def card_setup(self, payment: Payment) -> str:
        """The client secret of a new SetupIntent that the buyer's browser confirms with their
        card (Stripe.js ``confirmCardSetup``)."""
        assert payment.stripe_customer_id is not None
        async with self._client() as client:
            setup = await client.v1.setup_intents.create_async(
                params={
                    "customer": payment.stripe_customer_id,
                    "usage": "on_session",
                    "metadata": {"payment_id": str(payment.id)},
                }
            )
        assert setup.client_secret is not None
        return setup.client_secret

    async def charge_card(self, payment: Payment, setup_intent_id: str) -> Intent:
        """Put the card the browser set up on the payment's PaymentIntent and confirm it.
        Returns the intent as it stands (``requires_action``: the browser completes 3-D
        Secure); a declined card is ``CardDeclined`` with Stripe's message for the buyer.
        Whatever happens, the outcome reaches us by the webhook."""
        import stripe

        assert payment.stripe_payment_intent_id is not None
        intent_id = payment.stripe_payment_intent_id
        async with self._client() as client:
            setup = await client.v1.setup_intents.retrieve_async(setup_intent_id)
            metadata = setup.metadata.to_dict() if setup.metadata else {}
            set_up_for = metadata.get("payment_id")
            if (
                setup.status != "succeeded"
                or set_up_for != str(payment.id)
                or not isinstance(setup.payment_method, str)
            ):
                raise ProviderError("The card was not set up for this payment.")
            try:
                await client.v1.payment_intents.update_async(
                    intent_id, params={"payment_method": setup.payment_method}
                )
                intent = await client.v1.payment_intents.confirm_async(intent_id)
            except stripe.CardError as exc:
                raise CardDeclined(exc.user_message or "The card was declined.") from exc
            except _refusals() as exc:  # the intent cancelled meanwhile (the deal was cancelled)
                raise ProviderError("This payment can no longer be made.") from exc
        assert intent.client_secret is not None
        return Intent(intent.id, intent.status, intent.client_secret)

    # --- refunds and payouts --------------------------------------------------------------

    async def refund(self, payment: Payment, *, idempotency_key: str) -> str | None:
        if payment.stripe_payment_intent_id is None:
            raise ProviderError("the payment has no Stripe PaymentIntent to refund")
        async with self._client() as client:
            try:
                refund = await client.v1.refunds.create_async(
                    params={
                        "payment_intent": payment.stripe_payment_intent_id,
                        "amount": payment.refund_minor,
                        "metadata": {"payment_id": str(payment.id), "call_id": idempotency_key},
                    },
                    options={"idempotency_key": f"refund-{idempotency_key}"},
                )
            except _refusals() as exc:
                raise ProviderError(f"Stripe refused the refund: {exc.user_message}") from exc
        if refund.status in ("failed", "canceled"):
            raise ProviderError(f"Stripe's refund {refund.id} is {refund.status}")
        # "pending" is accepted: Stripe has taken the refund and finishes it itself; a later
        # failure arrives as a refund.failed event for the operator (see stripe_events).
        return refund.id

    async def cancel(self, payment: Payment, *, idempotency_key: str) -> bool:
        """Cancel the payment's PaymentIntent. One already cancelled is left so; one that has
        succeeded cannot be, and says so (True: the money came in first)."""
        if payment.stripe_payment_intent_id is None:
            return False
        intent_id = payment.stripe_payment_intent_id
        async with self._client() as client:
            try:
                await client.v1.payment_intents.cancel_async(
                    intent_id, options={"idempotency_key": f"cancel-{idempotency_key}"}
                )
                return False
            except _refusals() as exc:
                refusal = exc
            # Refused: Stripe cancels only an intent still waiting for its money.
            intent = await client.v1.payment_intents.retrieve_async(intent_id)
        if intent.status == "canceled":
            return False
        if intent.status == "succeeded":
            return True
        raise ProviderError(
            f"Stripe refused to cancel PaymentIntent {intent_id} ({intent.status}): "
            f"{refusal.user_message}"
        ) from refusal

    async def pay_out(
        self, payment: Payment, account: PayoutAccount, *, idempotency_key: str
    ) -> PayoutOutcome:
        return await self._payouts.pay_out(payment, account, idempotency_key=idempotency_key)

    # --- the provider's records, for reconciliation ---------------------------------------

    async def payment_record(self, intent_id: str) -> Record | None:
        """One PaymentIntent as Stripe holds it now; None if Stripe has none by that id."""
        import stripe

        async with self._client() as client:
            try:
                intent = await client.v1.payment_intents.retrieve_async(intent_id)
            except stripe.InvalidRequestError:
                return None
        return _record("payment", intent, intent.id)

    async def refund_record(self, refund_id: str) -> Record | None:
        """One Refund as Stripe holds it now; None if Stripe has none by that id."""
        import stripe

        async with self._client() as client:
            try:
                refund = await client.v1.refunds.retrieve_async(refund_id)
            except stripe.InvalidRequestError:
                return None
        intent_id = refund.payment_intent
        return _record("refund", refund, intent_id if isinstance(intent_id, str) else None)

    async def records(self, since: datetime, until: datetime) -> list[Record]:
        """Every PaymentIntent and Refund created in ``[since, until)``, listed page by page
        and filtered by creation time here. (Stripe's ``created`` filter would list fewer; the
        emulator the tests run against refuses it, so the whole list is read.)"""
        found: list[Record] = []
        async with self._client() as client:
            intents = await client.v1.payment_intents.list_async(params={"limit": 100})
            async for intent in intents.auto_paging_iter():
                found.append(_record("payment", intent, intent.id))
            refunds = await client.v1.refunds.list_async(params={"limit": 100})
            async for refund in refunds.auto_paging_iter():
                intent_id = refund.payment_intent
                found.append(
                    _record("refund", refund, intent_id if isinstance(intent_id, str) else None)
                )
        return [r for r in found if since <= r.created < until]


def _record(kind: str, obj: Any, intent_id: str | None) -> Record:
    return Record(
        kind=kind,
        id=obj.id,
        payment_intent_id=intent_id,
        amount_minor=int(obj.amount),
        currency=str(obj.currency).upper(),
        status=str(obj.status),
        created=datetime.fromtimestamp(int(obj.created), UTC),
    )
