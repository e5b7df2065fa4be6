"""What each party is told on their page: what happened, who must act now, by when, and what
happens if nobody does. Derived from the deal's status, its last change and its deadlines,
so the pages never guess.
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.deals import repository
from dealbroker.deals.lifecycle import DealStatus, Trigger
from dealbroker.deals.models import Deal

S = DealStatus


class Party(StrEnum):
    SELLER = "seller"
    BUYER = "buyer"


@dataclass(frozen=True)
class NextStep:
    happened: str
    who: str | None  # "you", "the buyer", "the seller", "us", or None when nothing is left
    action: str | None
    due: datetime | None = None
    otherwise: str | None = None


# Why a deal ended up where it is when no person moved it (a deadline, the carrier, a dispute).
BECAUSE: dict[str, str] = {
    Trigger.REVIEW_PERIOD_ENDED: "The 24 hours to check the item passed without a report, so it "
    "counted as approved.",
    Trigger.SHIPPING_EXPIRED: "The item was not handed to the carrier within 7 days of payment.",
    Trigger.PICKUP_EXPIRED: "The handover was not confirmed within 7 days of payment.",
    Trigger.CARRIER_RETURNED: "The carrier sent the item back to the seller.",
    Trigger.DISPUTE_REFUNDED: "We looked into the problem and decided to refund the buyer.",
    Trigger.DISPUTE_RELEASED: "We looked into the problem and decided to pay the seller.",
}


async def next_step(
    session: AsyncSession, deal: Deal, party: Party, *, approved_buyer: bool = True
) -> NextStep:
    """The card for ``party``; ``approved_buyer`` is False for a buyer whose offer was not the
    one approved (they learn only that the item went to someone else)."""
    timer = await repository.next_deadline(session, deal.id)
    due = timer.due_at if timer is not None else None
    history = await repository.history(session, deal.id)
    # The change that explains the status: an expiry or a return is followed by its refund.
    causes = [h.trigger for h in history if h.trigger != Trigger.REFUND.value]
    why = BECAUSE.get(causes[-1], "") if causes else ""
    if party is Party.BUYER and not approved_buyer:
        return _losing_buyer(deal)
    seller = party is Party.SELLER
    status = DealStatus(deal.status)
    if status is S.DRAFT or status is S.AD:
        return _before_signing(deal, seller)
    if status is S.SIGNED:
        return NextStep(
            "Both of you have signed.",
            "the buyer" if seller else "you",
            "Pay. The money is held safely until the item has changed hands.",
        )
    if status is S.SHIPPING_PENDING:
        return NextStep(
            "The buyer has paid; the money is held.",
            "you" if seller else "the seller",
            "Hand the package to the carrier and enter its tracking number.",
            due,
            "The buyer is refunded in full and the deal ends.",
        )
    if status is S.SHIPPING_IN_PROGRESS:
        return NextStep(
            "The item is with the carrier.",
            "the buyer" if seller else "you",
            "Confirm the arrival when the item comes.",
        )
    if status is S.SHIPPING_ARRIVED:
        return NextStep(
            "The item has arrived.",
            "the buyer" if seller else "you",
            "Check the item: approve it, or report a problem.",
            due,
            "The item counts as approved and the seller is paid.",
        )
    if status is S.PICKUP_PENDING:
        return NextStep(
            "The buyer has paid; the money is held.",
            "both of you",
            "Meet for the handover. "
            + (
                "Enter the buyer's handover code here when they take the item."
                if seller
                else "Give the seller your handover code once you have the item."
            ),
            due,
            "The buyer is refunded in full and the deal ends.",
        )
    if status in (S.SHIPPING_REVIEW_DENIED, S.PICKUP_DENIED):
        return NextStep(
            "The buyer reported a problem with the item; the money stays held.",
            "us",
            "We look into it with you both, then refund the buyer or pay the seller.",
        )
    if status in (S.SHIPPING_EXPIRED, S.SHIPPING_RETURNED, S.PICKUP_EXPIRED, S.REFUNDED):
        return NextStep(
            f"{why} The buyer's payment is refunded in full.".strip(),
            None,
            None,
        )
    if status is S.COMPLETED:
        return _completed(deal, seller, why)
    return NextStep("The deal was cancelled before payment. No money was taken.", None, None)


def _losing_buyer(deal: Deal) -> NextStep:
    if deal.buyer_user_id is not None or deal.status not in (S.DRAFT, S.AD):
        return NextStep("The item went to another buyer. Nothing more happens here.", None, None)
    return NextStep("The deal is open for offers.", "the seller", "Answer the offers.")


def _before_signing(deal: Deal, seller: bool) -> NextStep:
    if deal.buyer_user_id is None:
        if seller and deal.status == S.DRAFT:
            return NextStep(
                "Your deal is a draft.",
                "you",
                "Complete the details and sign the deal to publish it; then answer offers.",
            )
        return NextStep(
            "The deal is open for offers.",
            "you" if seller else "the seller",
            "Approve or decline the offers.",
        )
    if deal.status == S.DRAFT:
        return NextStep(
            "An offer was approved.",
            "you" if seller else "the seller",
            "Sign the deal.",
        )
    return NextStep(
        "An offer was approved and the seller signed.",
        "the buyer" if seller else "you",
        "Sign the deal, then pay.",
    )


def _completed(deal: Deal, seller: bool, why: str) -> NextStep:
    happened = f"{why} The deal is complete.".strip()
    if deal.payment_status in ("PendingPayOut", "PayoutFailed"):
        return NextStep(
            happened,
            "you" if seller else "the seller",
            "Add the payout account the money is to be paid to."
            if deal.payment_status == "PendingPayOut"
            else "The payout failed: check the payout account and save it again.",
        )
    return NextStep(f"{happened} The seller is paid.", None, None)


def where_the_money_is(deal: Deal, account_last4: str | None, party: Party) -> str:
    """One sentence for the page: where the buyer's money is now, as the party reads it."""
    status = deal.payment_status
    seller = party is Party.SELLER
    yours = "your" if seller else "the seller's"
    if status is None or status in ("PaymentFailed", "PaymentCancelled"):
        return "Not paid yet: no money has moved."
    if status in ("Created", "Processing"):
        return "The buyer is paying." if seller else "Your payment is being processed."
    if status == "Paid":
        if deal.status == S.REFUNDED:
            return "Being refunded to the buyer." if seller else "Being refunded to you."
        return "Held safely by dealbroker until the item has changed hands."
    if status == "Refunded":
        return (
            "Refunded to the buyer: you receive nothing for this deal."
            if seller
            else "Refunded to you in full."
        )
    if status in ("PendingPayOut", "PayoutFailed"):
        if account_last4 is None or status == "PayoutFailed":
            return (
                f"Held for the seller until {'you add your' if seller else 'they add a'} "
                "payout account."
                if status == "PendingPayOut"
                else f"The payout failed: {'check your' if seller else 'the seller checks the'} "
                "payout account."
            )
        return f"On its way to {yours} account ending {account_last4}."
    if status == "PaidOut":
        return f"Paid out to {yours} account" + (
            f" ending {account_last4} (arrives within 5 bank days)." if account_last4 else "."
        )
    return "Cancelled: no money moved."
