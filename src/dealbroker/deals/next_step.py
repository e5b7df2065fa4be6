"""What each party is told on their page: what happened, who must act now, by when, and what
happens if nobody does. Derived from the deal's status, its last change and its deadlines,
so the pages never guess.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core.i18n import N_, _
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle, repository
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.payments import service as payments
from dealbroker.payments.models import PayoutAccount

S = DealStatus


class Party(StrEnum):
    SELLER = "seller"
    BUYER = "buyer"


# Who must act, as the card names them (the key is the card's ``data-who``).
WHO = {
    "you": N_("You"),
    "the buyer": N_("The buyer"),
    "the seller": N_("The seller"),
    "both of you": N_("Both of you"),
    "us": N_("We (dealbroker)"),
}


@dataclass(frozen=True)
class NextStep:
    """The card's words, in the page's language; ``who`` is a key of ``WHO``, or None when
    nothing is left to do."""

    happened: str
    who: str | None
    action: str | None
    due: datetime | None = None
    otherwise: str | None = None

    @property
    def who_text(self) -> str:
        return _(WHO[self.who]) if self.who else ""


# Why a deal ended up where it is when no person moved it (a deadline, the carrier, a dispute).
BECAUSE: dict[str, str] = {
    Trigger.REVIEW_PERIOD_ENDED: N_(
        "The 24 hours to check the item passed without a report, so it counted as approved."
    ),
    Trigger.SHIPPING_EXPIRED: N_(
        "The item was not handed to the carrier within 7 days of payment."
    ),
    Trigger.PICKUP_EXPIRED: N_("The handover was not confirmed within 7 days of payment."),
    Trigger.HANDOVER_CONFIRMED: N_("The seller confirmed the handover with the buyer's code."),
    Trigger.CARRIER_RETURNED: N_("The carrier sent the item back to the seller."),
    Trigger.DISPUTE_REFUNDED: N_("We looked into the problem and decided to refund the buyer."),
    Trigger.DISPUTE_RELEASED: N_("We looked into the problem and decided to pay the seller."),
    # Every deal ends.
    Trigger.APPROVAL_LAPSED: N_(
        "The approved offer lapsed: it was not signed and paid in time, so the deal takes "
        "offers again."
    ),
    # Disputes decided on evidence: the end of a return then refund.
    Trigger.RETURN_RECEIVED: N_("The seller confirmed that the item sent back has come."),
    Trigger.RETURN_CONFIRM_EXPIRED: N_(
        "The item was sent back, and the seller did not confirm its receipt in time."
    ),
    Trigger.RETURN_NOT_SENT: N_(
        "The item was not sent back in time, so the money was released to the seller."
    ),
}
# The same, as the seller reads it on their own page: spoken to, never of as "the seller".
BECAUSE_SELLER: dict[str, str] = {
    Trigger.HANDOVER_CONFIRMED: N_("You confirmed the handover with the buyer's code."),
    Trigger.CARRIER_RETURNED: N_("The carrier sent the item back to you."),
    Trigger.DISPUTE_RELEASED: N_("We looked into the problem and decided to pay you."),
    Trigger.RETURN_RECEIVED: N_("You confirmed that the item sent back has come."),
    Trigger.RETURN_CONFIRM_EXPIRED: N_(
        "The item was sent back, and you did not confirm its receipt in time."
    ),
    Trigger.RETURN_NOT_SENT: N_(
        "The item was not sent back in time, so the money was released to you."
    ),
}
# Every deal ends: what happens when the approved buyer does not sign and pay in time.
LAPSES = N_("The approval lapses and the deal takes offers again.")


@dataclass(frozen=True)
class Said:
    """A text as the seller reads it on their page, and as the buyer reads it on theirs."""

    seller: str
    buyer: str

    def to(self, seller: bool) -> str:
        return self.seller if seller else self.buyer


def same(text: str) -> Said:
    """A text both parties read alike."""
    return Said(text, text)


@dataclass(frozen=True)
class Card:
    """One row's card: texts marked with ``N_`` (translated when shown), and ``who`` as keys
    of ``WHO``."""

    happened: Said
    who: Said | None = None
    action: Said | None = None
    # The deal's next deadline is this card's "by when", and ``otherwise`` what happens after.
    due: bool = False
    otherwise: Said | None = None
    # Why the deal is where it is (``BECAUSE``) comes first; ``also`` is a sentence after.
    explained: bool = False
    also: Said | None = None

    def shown(self, seller: bool, why: str, due: datetime | None) -> NextStep:
        return NextStep(
            _sentences(
                why if self.explained else "",
                _(self.happened.to(seller)),
                _(self.also.to(seller)) if self.also else "",
            ),
            self.who.to(seller) if self.who else None,
            _(self.action.to(seller)) if self.action else None,
            due if self.due else None,
            _(self.otherwise.to(seller)) if self.otherwise else None,
        )


@dataclass(frozen=True)
class Facts:
    """What a row's condition may look at besides the deal's status."""

    deal: Deal
    # The changes that explain the status, oldest first: an expiry or a return is followed by
    # its refund, which is left out.
    causes: list[str]
    # The seller's payout account, read for a completed deal only.
    account: PayoutAccount | None
    # Whether we book the deal's parcel at the deployment's carrier (the seller types no
    # carrier or tracking number).
    books_parcel: bool = False

    @property
    def cause(self) -> str | None:
        return self.causes[-1] if self.causes else None


def _always(facts: Facts) -> bool:
    return True


def _not_collected(facts: Facts) -> bool:
    """A parcel that came back to the seller uncollected, whose buyer paid a carrier's price:
    the refund keeps the shipping (``core.money.Escrowed``)."""
    return facts.cause == Trigger.CARRIER_RETURNED.value and facts.deal.shipping_minor is not None


def _buyer_approved(facts: Facts) -> bool:
    return facts.deal.buyer_user_id is not None


def _approval_lapsed(facts: Facts) -> bool:
    return facts.cause == Trigger.APPROVAL_LAPSED


def _parcel_booked_here(facts: Facts) -> bool:
    return facts.books_parcel


def _return_to_send(facts: Facts) -> bool:
    """Disputes decided on evidence: a return then refund, the item not sent back yet."""
    return facts.deal.dispute_return is not None and not facts.deal.dispute_return.get("sentAt")


def _return_sent(facts: Facts) -> bool:
    return facts.deal.dispute_return is not None and bool(facts.deal.dispute_return.get("sentAt"))


def _transit_expired(facts: Facts) -> bool:
    """A parcel in transit always resolves: its deadline passed."""
    return facts.cause == Trigger.TRANSIT_EXPIRED


def _carrier_lost(facts: Facts) -> bool:
    """The carrier reported the parcel lost: neither party reported anything."""
    return facts.cause == Trigger.CARRIER_LOST


def _buyer_not_received(facts: Facts) -> bool:
    return facts.cause == Trigger.BUYER_NOT_RECEIVED


def _seller_reported(facts: Facts) -> bool:
    """Every deal ends: the seller reported a problem with the handover."""
    return Trigger.SELLER_REPORTED_PROBLEM in facts.causes


def _payout_on_its_way(facts: Facts) -> bool:
    """A payout pending to the seller's account (a bank file not yet confirmed by the bank)
    asks nothing of anyone."""
    return facts.deal.payment_status == "PendingPayOut" and facts.account is not None


def _payout_without_account(facts: Facts) -> bool:
    return facts.deal.payment_status == "PendingPayOut" and facts.account is None


def _payout_failed(facts: Facts) -> bool:
    return facts.deal.payment_status == "PayoutFailed"


@dataclass(frozen=True)
class Case:
    """A row of ``CASES``: for a deal in one of ``statuses`` of which ``when`` holds, ``card``."""

    statuses: frozenset[DealStatus]
    when: Callable[[Facts], bool]
    card: Card


def _case(statuses: set[DealStatus], when: Callable[[Facts], bool], card: Card) -> Case:
    return Case(frozenset(statuses), when, card)


# Who acts, as each party reads it (keys of ``WHO``).
SELLER_ACTS = Said("you", "the seller")
BUYER_ACTS = Said("the buyer", "you")
HAS_PAID = Said(
    N_("The buyer has paid; the money is held."), N_("You have paid; the money is held.")
)
REFUNDED = Said(
    N_("The buyer is refunded in full and the deal ends."),
    N_("You are refunded in full and the deal ends."),
)
DECIDES = Said(
    N_("We look into it with you both, then refund the buyer or pay you."),
    N_("We look into it with you both, then refund you or pay the seller."),
)
OPEN = same(N_("The deal is open for offers."))
ANSWER_OFFERS = same(N_("Approve or decline the offers."))
COMPLETE = same(N_("The deal is complete."))
CARRIER_DECIDES = Said(
    N_("We look into it with you both and the carrier, then refund the buyer or pay you."),
    N_("We look into it with you both and the carrier, then refund you or pay the seller."),
)
# A draft no buyer is approved on: the seller completes it, a buyer waits for the offers' answer.
DRAFT = Card(
    Said(N_("Your deal is a draft."), OPEN.buyer),
    SELLER_ACTS,
    Said(
        N_("Complete the details and sign the deal to publish it; then answer offers."),
        ANSWER_OFFERS.buyer,
    ),
)

# What each party reads for the deal's status: the first row whose statuses hold the deal's
# and whose condition holds. The buyer sees "you" where the seller sees "the buyer".
CASES: tuple[Case, ...] = (
    # Before signing. Every deal ends: the approved buyer signs and pays by the deadline.
    _case(
        {S.DRAFT},
        _buyer_approved,
        Card(
            Said(N_("You approved an offer."), N_("The seller approved your offer.")),
            SELLER_ACTS,
            same(N_("Sign the deal.")),
            due=True,
            otherwise=same(LAPSES),
        ),
    ),
    _case(
        {S.AD},
        _buyer_approved,
        Card(
            Said(
                N_("You approved an offer and signed the deal."),
                N_("The seller approved your offer and signed the deal."),
            ),
            BUYER_ACTS,
            same(N_("Sign the deal, then pay.")),
            due=True,
            otherwise=same(LAPSES),
        ),
    ),
    _case(
        {S.DRAFT},
        _approval_lapsed,
        replace(DRAFT, explained=True),
    ),
    _case(
        {S.AD},
        _approval_lapsed,
        Card(
            OPEN,
            SELLER_ACTS,
            # There may be no offer to answer yet.
            Said(
                N_(
                    "Answer the offers as they come: the buyers who offered before have been "
                    "told they may offer again."
                ),
                ANSWER_OFFERS.buyer,
            ),
            explained=True,
        ),
    ),
    _case(
        {S.DRAFT},
        _always,
        DRAFT,
    ),
    _case({S.AD}, _always, Card(OPEN, SELLER_ACTS, ANSWER_OFFERS)),
    # Signed and paid: the item changes hands.
    _case(
        {S.SIGNED},
        _always,
        Card(
            same(N_("Both of you have signed.")),
            BUYER_ACTS,
            same(N_("Pay. The money is held safely until the item has changed hands.")),
            due=True,
            otherwise=same(LAPSES),
        ),
    ),
    # A parcel we book at the deployment's carrier: the seller books it on their page.
    _case(
        {S.SHIPPING_PENDING},
        _parcel_booked_here,
        Card(
            HAS_PAID,
            SELLER_ACTS,
            Said(
                N_(
                    "Book the shipping on this page and hand the parcel in with its label or QR code."
                ),
                N_("Book the shipping and hand the parcel in; you can follow it here."),
            ),
            due=True,
            otherwise=REFUNDED,
        ),
    ),
    _case(
        {S.SHIPPING_PENDING},
        _always,
        Card(
            HAS_PAID,
            SELLER_ACTS,
            same(N_("Hand the package to the carrier and enter its tracking number.")),
            due=True,
            otherwise=REFUNDED,
        ),
    ),
    _case(
        {S.SHIPPING_IN_PROGRESS},
        _always,
        Card(
            same(N_("The item is with the carrier.")),
            BUYER_ACTS,
            same(N_("Confirm the arrival when the item comes.")),
            due=True,
            otherwise=same(
                N_(
                    "If it has not arrived by then, we look into it with you both; the money "
                    "stays held."
                )
            ),
        ),
    ),
    _case(
        {S.SHIPPING_ARRIVED},
        _always,
        Card(
            same(N_("The item has arrived.")),
            BUYER_ACTS,
            same(N_("Check the item: approve it, or report a problem.")),
            due=True,
            otherwise=Said(
                N_("The item counts as approved and you are paid."),
                N_("The item counts as approved and the seller is paid."),
            ),
        ),
    ),
    _case(
        {S.PICKUP_PENDING},
        _always,
        Card(
            HAS_PAID,
            same("both of you"),
            Said(
                N_(
                    "Meet for the handover. Enter the buyer's handover code here when they take "
                    "the item."
                ),
                N_(
                    "Meet for the handover. Give the seller your handover code once you have the "
                    "item."
                ),
            ),
            due=True,
            otherwise=REFUNDED,
        ),
    ),
    # Disputes decided on evidence: a return then refund under way.
    _case(
        lifecycle.DISPUTES,
        _return_to_send,
        Card(
            Said(
                N_(
                    "We decided: the buyer sends the item back to you, and is refunded once it "
                    "is back."
                ),
                N_(
                    "We decided: you send the item back to the seller, and are refunded once it "
                    "is back."
                ),
            ),
            BUYER_ACTS,
            Said(
                N_("Send the item back to your return address and enter its tracking number."),
                N_(
                    "Send the item back to the seller's return address and enter its tracking "
                    "number."
                ),
            ),
            due=True,
            otherwise=Said(
                N_("The money is released to you."), N_("The money is released to the seller.")
            ),
        ),
    ),
    _case(
        lifecycle.DISPUTES,
        _return_sent,
        Card(
            Said(N_("The buyer sent the item back."), N_("You sent the item back.")),
            SELLER_ACTS,
            same(N_("Confirm that the item is back once it has come.")),
            due=True,
            otherwise=Said(
                N_("The buyer is refunded all the same."), N_("You are refunded all the same.")
            ),
        ),
    ),
    # A parcel in transit always resolves.
    _case(
        {S.SHIPPING_REVIEW_DENIED},
        _transit_expired,
        Card(
            same(N_("The parcel did not arrive by the deadline; the money stays held.")),
            same("us"),
            CARRIER_DECIDES,
        ),
    ),
    _case(
        {S.SHIPPING_REVIEW_DENIED},
        _carrier_lost,
        Card(
            same(N_("The carrier lost the parcel; the money stays held.")),
            same("us"),
            CARRIER_DECIDES,
        ),
    ),
    _case(
        {S.SHIPPING_REVIEW_DENIED},
        _buyer_not_received,
        Card(
            Said(
                N_("The buyer reported that the parcel has not arrived; the money stays held."),
                N_("You reported that the parcel has not arrived; the money stays held."),
            ),
            same("us"),
            CARRIER_DECIDES,
        ),
    ),
    _case(
        {S.PICKUP_DENIED},
        _seller_reported,
        Card(
            Said(
                N_("You reported a problem with the handover; the money stays held."),
                N_("The seller reported a problem with the handover; the money stays held."),
            ),
            same("us"),
            DECIDES,
        ),
    ),
    _case(
        {S.SHIPPING_REVIEW_DENIED, S.PICKUP_DENIED},
        _always,
        Card(
            Said(
                N_("The buyer reported a problem with the item; the money stays held."),
                N_("You reported a problem with the item; the money stays held."),
            ),
            same("us"),
            DECIDES,
        ),
    ),
    # The deal's end. A parcel not collected went both ways at the buyer's cost.
    _case(
        set(lifecycle.REFUNDING),
        _not_collected,
        Card(
            Said(
                N_(
                    "The buyer's payment is refunded, less the shipping: the parcel was not collected."
                ),
                N_("Your payment is refunded, less the shipping: the parcel was not collected."),
            ),
            explained=True,
        ),
    ),
    _case(
        set(lifecycle.REFUNDING),
        _always,
        Card(
            Said(
                N_("The buyer's payment is refunded in full."),
                N_("Your payment is refunded in full."),
            ),
            explained=True,
        ),
    ),
    _case(
        {S.COMPLETED},
        _payout_on_its_way,
        Card(
            COMPLETE,
            explained=True,
            also=Said(N_("Your payout is on its way."), N_("The seller's payout is on its way.")),
        ),
    ),
    _case(
        {S.COMPLETED},
        _payout_without_account,
        Card(
            COMPLETE,
            SELLER_ACTS,
            same(N_("Add the payout account the money is to be paid to.")),
            explained=True,
        ),
    ),
    _case(
        {S.COMPLETED},
        _payout_failed,
        Card(
            COMPLETE,
            SELLER_ACTS,
            same(N_("The payout failed: check the payout account and save it again.")),
            explained=True,
        ),
    ),
    _case(
        {S.COMPLETED},
        _always,
        Card(COMPLETE, explained=True, also=Said(N_("You are paid."), N_("The seller is paid."))),
    ),
)
CANCELLED = Card(same(N_("The deal was cancelled before payment. No money was taken.")))
# What a buyer whose offer was not the one approved learns: only that the item went elsewhere.
WENT_ELSEWHERE = Card(same(N_("The item went to another buyer. Nothing more happens here.")))
STILL_OPEN = Card(OPEN, same("the seller"), same(N_("Answer the offers.")))


async def next_step(
    session: AsyncSession,
    deal: Deal,
    party: Party,
    *,
    approved_buyer: bool = True,
    books_parcel: bool = False,
) -> NextStep:
    """The card for ``party``; ``approved_buyer`` is False for a buyer whose offer was not the
    one approved (they learn only that the item went to someone else); ``books_parcel`` when
    the deal's parcel is booked here, at the deployment's carrier."""
    seller = party is Party.SELLER
    status = DealStatus(deal.status)
    if not seller and not approved_buyer:
        open_for_offers = deal.buyer_user_id is None and status in (S.DRAFT, S.AD)
        return (STILL_OPEN if open_for_offers else WENT_ELSEWHERE).shown(seller, "", None)
    history = await repository.history(session, deal.id)
    causes = [h.trigger for h in history if h.trigger != Trigger.REFUND.value]
    account = await payments.payout_account_of(session, deal) if status is S.COMPLETED else None
    facts = Facts(deal, causes, account, books_parcel)
    because = {**BECAUSE, **BECAUSE_SELLER} if seller else BECAUSE
    why = _(because[facts.cause]) if facts.cause in because else ""
    card = next(
        (c.card for c in CASES if status in c.statuses and c.when(facts)),
        CANCELLED,
    )
    return card.shown(seller, why, await _due(session, deal) if card.due else None)


async def _due(session: AsyncSession, deal: Deal) -> datetime | None:
    """The deal's next deadline that can still fire from its status: a deadline left from an
    earlier status (the transit deadline once the parcel has arrived) is no one's to meet."""
    status = DealStatus(deal.status)
    pending = [
        t.due_at
        for t in await repository.timers_of(session, deal.id)
        if t.fired_at is None
        and lifecycle.transition_for(status, Trigger(t.trigger), Actor.TIMER) is not None
    ]
    return min(pending, default=None)


def _sentences(*sentences: str) -> str:
    return " ".join(s for s in sentences if s)


@dataclass(frozen=True)
class Money:
    """Where the buyer's money is, for the payment's statuses ``payments`` (and, when given,
    the deal's statuses ``deals``); ``named`` instead when the seller's payout account is
    known, its last four digits in the text as ``%(last4)s``."""

    payments: frozenset[str | None]
    said: Said
    deals: frozenset[DealStatus] | None = None
    named: Said | None = None


def _money(
    payments: set[str | None],
    said: Said,
    deals: set[DealStatus] | None = None,
    named: Said | None = None,
) -> Money:
    return Money(frozenset(payments), said, None if deals is None else frozenset(deals), named)


# The first row that fits the deal answers; a payment status in none of them was cancelled.
MONEY: tuple[Money, ...] = (
    _money(
        {None, "PaymentFailed", "PaymentCancelled"}, same(N_("Not paid yet: no money has moved."))
    ),
    _money(
        {"Created", "Processing"},
        Said(N_("The buyer is paying."), N_("Your payment is being processed.")),
    ),
    _money(
        {"Paid"},
        Said(N_("Being refunded to the buyer."), N_("Being refunded to you.")),
        deals={S.REFUNDED},
    ),
    # In a dispute the item may well have changed hands: the money waits for our decision.
    _money(
        {"Paid"},
        Said(
            N_(
                "Held safely by dealbroker while we look into it; then paid to you or "
                "refunded to the buyer."
            ),
            N_(
                "Held safely by dealbroker while we look into it; then refunded to you or "
                "paid to the seller."
            ),
        ),
        deals=set(lifecycle.DISPUTES),
    ),
    _money({"Paid"}, same(N_("Held safely by dealbroker until the item has changed hands."))),
    _money(
        {"Refunded"},
        Said(
            N_("Refunded to the buyer: you receive nothing for this deal."),
            N_("Refunded to you in full."),
        ),
    ),
    _money(
        {"PayoutFailed"},
        Said(
            N_("The payout failed: check your payout account."),
            N_("The payout failed: the seller checks the payout account."),
        ),
    ),
    _money(
        {"PendingPayOut"},
        Said(
            N_("Held for you until you add your payout account."),
            N_("Held for the seller until they add a payout account."),
        ),
        named=Said(
            N_("On its way to your account ending %(last4)s."),
            N_("On its way to the seller's account ending %(last4)s."),
        ),
    ),
    _money(
        {"PaidOut"},
        Said(N_("Paid out to your account."), N_("Paid out to the seller's account.")),
        named=Said(
            N_("Paid out to your account ending %(last4)s (arrives within 5 bank days)."),
            N_("Paid out to the seller's account ending %(last4)s (arrives within 5 bank days)."),
        ),
    ),
)
NO_MONEY_MOVED = Money(frozenset(), same(N_("Cancelled: no money moved.")))


def where_the_money_is(deal: Deal, account_last4: str | None, party: Party) -> str:
    """One sentence for the page: where the buyer's money is now, as the party reads it."""
    row = next(
        (
            m
            for m in MONEY
            if deal.payment_status in m.payments and (m.deals is None or deal.status in m.deals)
        ),
        NO_MONEY_MOVED,
    )
    seller = party is Party.SELLER
    if row.named is not None and account_last4 is not None:
        return _(row.named.to(seller)) % {"last4": account_last4}
    return _(row.said.to(seller))
