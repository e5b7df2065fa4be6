"""Payments (the buyer's money in escrow, then paid out or refunded) and payout accounts."""

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    false,
    text,
)
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql import ColumnElement

from dealbroker.core import money
from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class Payment(Base):
    """One attempt by the buyer to pay for a deal. Amount, fee and shipping are fixed when it is
    created; what it pays out and refunds is ``core.money``'s arithmetic on them
    (``payout_minor``, ``refund_minor``)."""

    __tablename__ = "payments"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("deals.id", ondelete="CASCADE"), index=True
    )
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    amount_minor: Mapped[int] = mapped_column(BigInteger)
    fee_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    status: Mapped[str] = mapped_column(String(20))
    provider: Mapped[str] = mapped_column(String(20))
    # How the buyer chose to pay (``payments.methods.Method``): card, vipps or swish.
    method: Mapped[str] = mapped_column(String(10), default="card", server_default="card")
    # What the provider calls it; for the simulated provider, the hash of the test page's token.
    provider_ref: Mapped[str] = mapped_column(String(100), unique=True)
    refunded_minor: Mapped[int] = mapped_column(BigInteger)
    paid_out_minor: Mapped[int] = mapped_column(BigInteger)
    # The shipping price the deal carried when the payment was created (0 without one): in the
    # amount when the buyer pays it, and never paid out to the seller (it pays the carrier).
    shipping_minor: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The refund keeps the shipping price: the buyer did not collect the parcel
    # (``Shipping_Returned``), which travelled at their cost. Set when the refund is queued.
    refund_less_shipping: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=false()
    )
    # Stripe's ids beside ours (the stripe provider only): the PaymentIntent that takes this
    # payment's amount, and the Customer it belongs to. Amount and fee stay ours: the intent
    # is created from them, and its events are checked against them.
    stripe_payment_intent_id: Mapped[str | None] = mapped_column(String(255), unique=True)
    stripe_customer_id: Mapped[str | None] = mapped_column(String(255))
    # A payment the provider only reserves when the buyer pays (Vipps MobilePay): until when the
    # reservation is sure to hold, and when it was captured (the money taken). Its payout waits
    # for the capture; its refund before one is the reservation's cancel. Both empty for a
    # payment charged at once (cards, Swish). See docs/decisions/0028-vipps-capture.md.
    reserved_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    captured_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Swish's side (the swish provider only): the payment request's id is ours (the payment's
    # id, 32 upper-case hex digits). Kept: the SHA-256 of the ``callbackIdentifier`` we set on
    # the request (its callbacks must carry it), the request token that opens the Swish app or
    # fills the QR code (M-commerce), and Swish's ``paymentReference`` once paid (a refund
    # names it).
    swish_callback_hash: Mapped[str | None] = mapped_column(String(64))
    swish_request_token: Mapped[str | None] = mapped_column(String(100))
    swish_payment_reference: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    @property
    def escrowed(self) -> money.Escrowed:
        """Its amounts, with what they pay out and refund (``core.money.Escrowed``)."""
        return money.Escrowed(self.amount_minor, self.fee_minor, self.shipping_minor or 0)

    @hybrid_property
    def payout_minor(self) -> int:
        """What the seller is paid: the amount less the fee and the shipping."""
        return self.escrowed.payout

    @payout_minor.inplace.expression
    @classmethod
    def _payout_minor_expression(cls) -> ColumnElement[int]:
        # ``Escrowed.payout`` in SQL, for the queries that compare a payout with the payment's.
        return cls.amount_minor - cls.fee_minor - cls.shipping_minor

    @property
    def refund_minor(self) -> int:
        """What a refund gives the buyer back: the whole amount, or less the shipping for a
        parcel the buyer did not collect (``refund_less_shipping``)."""
        return self.escrowed.refund(self.refund_less_shipping)


class StripeEvent(Base):
    """A Stripe webhook event handled already: Stripe delivers at least once, so an event id
    found here is acknowledged and not applied again. Written in the transaction that applies
    the event, so an event is either applied and recorded, or neither."""

    __tablename__ = "stripe_events"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    type: Mapped[str] = mapped_column(String(100))
    payment_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime)


class PayoutAccount(Base):
    """Where one deal's payout goes: an IBAN or a domestic account number, validated.

    An account belongs to a deal, not to a person: the holder of a deal's capability link has
    proved only that they may act for that one deal, so what they enter can never direct
    another deal's money (see docs/decisions/0013-payout-account.md)."""

    __tablename__ = "payout_accounts"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("deals.id", ondelete="CASCADE"), unique=True
    )
    kind: Mapped[str] = mapped_column(String(10))  # "iban", "account" or "swish"
    # A Swish number: the payee alias (46 and the mobile number without its leading 0).
    number: Mapped[str] = mapped_column(String(40))
    holder: Mapped[str] = mapped_column(String(200))
    # Swish only: the payee's personal identity number, which Swish's Payouts API checks
    # against the number's owner; sealed (``payments.swish_payouts.seal``), never logged, shown
    # by its last digits only.
    payee_ssn_sealed: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class PayoutAccountChange(Base):
    """The audit trail of where a deal's money goes: every account registered, every change
    asked for, confirmed or left to expire. A change to an account already set waits in
    ``pending`` until the seller confirms it through a link sent to their e-mail address (out of
    band: the page's link alone is not enough); only the hash of that link's token is kept."""

    __tablename__ = "payout_account_changes"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("deals.id", ondelete="CASCADE"), index=True
    )
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    # "applied" (in force), "pending" (waits for confirmation), "superseded" (a newer request
    # replaced it, or it expired unconfirmed).
    status: Mapped[str] = mapped_column(String(12))
    kind: Mapped[str] = mapped_column(String(10))
    number: Mapped[str] = mapped_column(String(40))
    holder: Mapped[str] = mapped_column(String(200))
    token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    payee_ssn_sealed: Mapped[str | None] = mapped_column(Text)  # Swish: as on the account
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime)
    applied_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ProviderCall(Base):
    """A call the payment provider must make (a refund, a payout), recorded in the transaction
    that decided it and made afterwards by the worker's ``ProviderCallJob``, outside any row
    lock. Its id is the idempotency key the provider receives, so a call repeated after a crash
    moves money once; its result is applied in a transaction of its own, once (``status``
    leaves ``pending`` there)."""

    __tablename__ = "provider_calls"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    payment_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("payments.id", ondelete="CASCADE"), index=True
    )
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    kind: Mapped[str] = mapped_column(String(10))  # "refund", "payout", "cancel", "capture"
    # "pending", "succeeded" or "failed"; "submitted" while a rail whose answer comes later
    # (a bank file) has the payout (see ``PayoutOutcome``).
    status: Mapped[str] = mapped_column(String(10))
    # The payout account it pays to (payouts only), as it was when the call was decided.
    account_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    attempts: Mapped[int] = mapped_column(Integer)
    # When a worker may take it next: now when queued, a lease ahead while one works on it.
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(String(500))
    # What the provider calls the refund or payout it made (a Stripe refund's id), if it says.
    provider_ref: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The bank file this payout went out in (bank-file rail): set once, in the export's
    # transaction, so a payout is in one file only.
    payout_file_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, index=True)
    # The rail that holds a submitted payout: "bank_file" or "swish" (None before: the bank
    # file's). A Swish payout's instruction id is the call's id; it is never in a bank file.
    rail: Mapped[str | None] = mapped_column(String(10))

    __table_args__ = (
        Index(
            "ix_provider_calls_due",
            "next_attempt_at",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
    )


class PayoutFile(Base):
    """One ISO 20022 credit transfer file (pain.001) for the operator's bank, kept whole: the
    file can be written again if writing it failed after the export committed, and the bank
    refuses a second file with the same message id."""

    __tablename__ = "payout_files"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    message_id: Mapped[str] = mapped_column(String(35), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    transfers: Mapped[int] = mapped_column(Integer)
    total_minor: Mapped[int] = mapped_column(BigInteger)
    document: Mapped[str] = mapped_column(Text)


class PayoutTransfer(Base):
    """One payout in a bank file, as it was sent: the amount and the account, copied, so that
    what the bank was asked to pay stays known when the deal's account changes later. Its
    end-to-end id is the payout call's id (unique: one file per payout)."""

    __tablename__ = "payout_transfers"

    end_to_end_id: Mapped[str] = mapped_column(String(35), primary_key=True)
    file_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("payout_files.id", ondelete="CASCADE"), index=True
    )
    call_id: Mapped[uuid.UUID] = mapped_column(Uuid, unique=True)
    payment_id: Mapped[uuid.UUID] = mapped_column(Uuid, index=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    amount_minor: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    creditor_kind: Mapped[str] = mapped_column(String(10))
    creditor_account: Mapped[str] = mapped_column(String(40))
    creditor_name: Mapped[str] = mapped_column(String(140))


class PayoutStatusEntry(Base):
    """One transaction status read from a bank's payment status report (pain.002), kept as
    the bank's word: ``outcome`` says what importing it did (``paid``, ``failed``, ``noted``
    for a status that settles nothing yet, ``unchanged`` for a payout settled already,
    ``conflict`` for a status that contradicts its settled payout, ``unknown`` for an id that
    is not ours). A report is imported once: its message id and end-to-end ids are unique."""

    __tablename__ = "payout_status_entries"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    report_message_id: Mapped[str] = mapped_column(String(35))
    end_to_end_id: Mapped[str] = mapped_column(String(35), index=True)
    status: Mapped[str] = mapped_column(String(4))
    reason: Mapped[str | None] = mapped_column(String(500))
    amount_minor: Mapped[int | None] = mapped_column(BigInteger)
    currency: Mapped[str | None] = mapped_column(String(3))
    outcome: Mapped[str] = mapped_column(String(10))
    imported_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)

    __table_args__ = (UniqueConstraint("report_message_id", "end_to_end_id"),)
