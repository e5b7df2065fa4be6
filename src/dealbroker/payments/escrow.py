"""What payments needs of a deal, and the one way the provider's answers reach it.

Payments knows no deal rules. A deal is an ``EscrowDeal`` to it: the few values a payment is
made of (amount, currency, the parties), the mirror of the payment's status it keeps, and the
``Escrow`` stage the deal is in, which the deal decides (``deals.lifecycle.escrow``): whether
it waits for the buyer's money, releases it to the seller or gives it back.

What a payment's outcome means for its deal (a deal paid for moves on to shipping or pickup,
the parties are told of a payout, of money refunded, of their payout account) is decided by one
application-level handler, a ``DealSide``: ``dealbroker.settlement``, which every process
registers at startup.
The provider's events (Stripe's webhook, the provider-call job, the bank's status report, the
operator's late refunds) reach the deal through it, and payments never imports the deals.
"""

import uuid
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.settings import Settings


class Escrow(StrEnum):
    """Where a deal stands, for the money it holds in escrow."""

    AWAITING_PAYMENT = "awaiting_payment"  # it waits for the buyer's money: it may be paid
    HELD = "held"  # no money leaves escrow now (none taken yet, or it is held)
    RELEASE = "release"  # the deal is done: the money goes to the seller
    REFUND = "refund"  # the deal is being refunded: the money goes back to the buyer


class Outcome(StrEnum):
    """The provider's final answer for a payment the buyer made."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class EscrowDeal(Protocol):
    """The deal as payments sees it (a ``deals.models.Deal`` is one)."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def integration_id(self) -> uuid.UUID: ...
    @property
    def seller_user_id(self) -> uuid.UUID | None: ...
    @property
    def buyer_user_id(self) -> uuid.UUID | None: ...
    @property
    def price_minor(self) -> int | None: ...
    @property
    def shipping_minor(self) -> int | None: ...
    @property
    def currency(self) -> str: ...
    @property
    def status(self) -> str: ...  # for messages: the rules read ``escrow``
    @property
    def escrow(self) -> Escrow: ...

    # The deal's mirror of its latest payment's status, kept by ``payments.service.move``.
    payment_status: str | None
    updated_at: datetime


class DealSide(Protocol):
    """The application's handler of what payments does to a deal (``dealbroker.settlement``)."""

    async def lock(self, session: AsyncSession, deal_id: uuid.UUID) -> EscrowDeal | None:
        """The deal, its row locked: a payment change locks the deal first, then the payment."""
        ...

    async def settle(
        self, session: AsyncSession, deal: EscrowDeal, outcome: Outcome, settings: Settings
    ) -> None:
        """The provider's final answer for the deal's open payment, applied to the payment and
        the deal; ``DomainError`` (nothing changed) if the deal no longer waits for it."""
        ...

    async def paid_out(self, session: AsyncSession, deal: EscrowDeal, amount_minor: int) -> None:
        """The seller's payout of ``amount_minor`` was made."""
        ...

    async def payout_failed(
        self, session: AsyncSession, deal: EscrowDeal, amount_minor: int
    ) -> None:
        """The seller's payout of ``amount_minor`` was refused."""
        ...

    async def refunded_late(
        self, session: AsyncSession, deal: EscrowDeal, amount_minor: int
    ) -> None:
        """Money taken for a payment that does not pay for the deal is being given back."""
        ...

    async def capture_failed(
        self, session: AsyncSession, deal: EscrowDeal, amount_minor: int
    ) -> None:
        """The reservation of ``amount_minor`` could not be captured (it lapsed): nothing was
        taken, nothing is paid out."""
        ...

    async def confirm_account_change(
        self,
        session: AsyncSession,
        deal: EscrowDeal,
        last4: str,
        token: str,
        lifetime: timedelta,
    ) -> None:
        """Ask the seller to confirm the change to the account ending in ``last4`` with the
        one-time ``token``, valid for ``lifetime``."""
        ...

    async def account_changed(self, session: AsyncSession, deal: EscrowDeal, last4: str) -> None:
        """The deal's payout goes to the account ending in ``last4`` from now on."""
        ...


_side: DealSide | None = None


def register(side: DealSide) -> None:
    """Connect payments to the deals (at startup, by ``dealbroker.settlement.install``)."""
    global _side
    _side = side


def deal_side() -> DealSide:
    if _side is None:
        raise RuntimeError(
            "payments is not connected to the deals: the process must call "
            "dealbroker.settlement.install() at startup"
        )
    return _side
