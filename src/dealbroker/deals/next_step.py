"""What each party is told on their page: what happened, who must act now, by when, and what
happens if nobody does. Derived from the deal's status, its last change and its deadlines,
so the pages never guess.
"""

from dataclasses import dataclass
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


async def next_step(
    session: AsyncSession, deal: Deal, party: Party, *, approved_buyer: bool = True
) -> NextStep:
    """The card for ``party``; ``approved_buyer`` is False for a buyer whose offer was not the
    one approved (they learn only that the item went to someone else)."""
    due = await _due(session, deal)
    history = await repository.history(session, deal.id)
    # The change that explains the status: an expiry or a return is followed by its refund.
    causes = [h.trigger for h in history if h.trigger != Trigger.REFUND.value]
    seller = party is Party.SELLER
    because = {**BECAUSE, **BECAUSE_SELLER} if seller else BECAUSE
    why = _(because[causes[-1]]) if causes and causes[-1] in because else ""
    if party is Party.BUYER and not approved_buyer:
        return _losing_buyer(deal)
    status = DealStatus(deal.status)
    refunded = (
        _("The buyer is refunded in full and the deal ends.")
        if seller
        else _("You are refunded in full and the deal ends.")
    )
    if status is S.DRAFT or status is S.AD:
        step = _before_signing(deal, seller)
        if deal.buyer_user_id is not None:  # every deal ends: the approval's deadline
            return NextStep(step.happened, step.who, step.action, due, _(LAPSES))
        if causes and causes[-1] == Trigger.APPROVAL_LAPSED.value:
            action = step.action
            if seller and status is S.AD:  # there may be no offer to answer yet
                action = _(
                    "Answer the offers as they come: the buyers who offered before have been "
                    "told they may offer again."
                )
            return NextStep(_sentences(why, step.happened), step.who, action)
        return step
    if status is S.SIGNED:
        return NextStep(
            _("Both of you have signed."),
            "the buyer" if seller else "you",
            _("Pay. The money is held safely until the item has changed hands."),
            due,
            _(LAPSES),
        )
    if status is S.SHIPPING_PENDING:
        return NextStep(
            _("The buyer has paid; the money is held.")
            if seller
            else _("You have paid; the money is held."),
            "you" if seller else "the seller",
            _("Hand the package to the carrier and enter its tracking number."),
            due,
            refunded,
        )
    if status is S.SHIPPING_IN_PROGRESS:
        return NextStep(
            _("The item is with the carrier."),
            "the buyer" if seller else "you",
            _("Confirm the arrival when the item comes."),
            due,
            _(
                "If it has not arrived by then, we look into it with you both; the money stays held."
            ),
        )
    if status is S.SHIPPING_ARRIVED:
        return NextStep(
            _("The item has arrived."),
            "the buyer" if seller else "you",
            _("Check the item: approve it, or report a problem."),
            due,
            _("The item counts as approved and you are paid.")
            if seller
            else _("The item counts as approved and the seller is paid."),
        )
    if status is S.PICKUP_PENDING:
        return NextStep(
            _("The buyer has paid; the money is held.")
            if seller
            else _("You have paid; the money is held."),
            "both of you",
            _(
                "Meet for the handover. Enter the buyer's handover code here when they take the item."
            )
            if seller
            else _(
                "Meet for the handover. Give the seller your handover code once you have the item."
            ),
            due,
            refunded,
        )
    if status in lifecycle.DISPUTES and deal.dispute_return is not None:
        return _returning(deal, seller, due)
    if status is S.SHIPPING_REVIEW_DENIED and causes and causes[-1] in NOT_RECEIVED:
        return _not_received(Trigger(causes[-1]), seller)
    if status is S.PICKUP_DENIED and Trigger.SELLER_REPORTED_PROBLEM.value in causes:
        # Every deal ends: the seller reported a problem with the handover.
        return NextStep(
            _("You reported a problem with the handover; the money stays held.")
            if seller
            else _("The seller reported a problem with the handover; the money stays held."),
            "us",
            _decides(seller),
        )
    if status in (S.SHIPPING_REVIEW_DENIED, S.PICKUP_DENIED):
        return NextStep(
            _("The buyer reported a problem with the item; the money stays held.")
            if seller
            else _("You reported a problem with the item; the money stays held."),
            "us",
            _decides(seller),
        )
    if status in (S.SHIPPING_EXPIRED, S.SHIPPING_RETURNED, S.PICKUP_EXPIRED, S.REFUNDED):
        refund = (
            _("The buyer's payment is refunded in full.")
            if seller
            else _("Your payment is refunded in full.")
        )
        return NextStep(_sentences(why, refund), None, None)
    if status is S.COMPLETED:
        return _completed(deal, seller, why, await payments.payout_account_of(session, deal))
    return NextStep(_("The deal was cancelled before payment. No money was taken."), None, None)


# --- a parcel in transit always resolves ---
NOT_RECEIVED = frozenset({Trigger.BUYER_NOT_RECEIVED.value, Trigger.TRANSIT_EXPIRED.value})


def _not_received(trigger: Trigger, seller: bool) -> NextStep:
    if trigger is Trigger.TRANSIT_EXPIRED:
        happened = _("The parcel did not arrive by the deadline; the money stays held.")
    elif seller:
        happened = _("The buyer reported that the parcel has not arrived; the money stays held.")
    else:
        happened = _("You reported that the parcel has not arrived; the money stays held.")
    return NextStep(
        happened,
        "us",
        _("We look into it with you both and the carrier, then refund the buyer or pay you.")
        if seller
        else _("We look into it with you both and the carrier, then refund you or pay the seller."),
    )


def _decides(seller: bool) -> str:
    """What we do about a dispute, as each party reads it (the buyer is the one refunded)."""
    return (
        _("We look into it with you both, then refund the buyer or pay you.")
        if seller
        else _("We look into it with you both, then refund you or pay the seller.")
    )


def _returning(deal: Deal, seller: bool, due: datetime | None) -> NextStep:
    """Disputes decided on evidence: a return then refund under way."""
    if not (deal.dispute_return or {}).get("sentAt"):
        return NextStep(
            _("We decided: the buyer sends the item back to you, and is refunded once it is back.")
            if seller
            else _(
                "We decided: you send the item back to the seller, and are refunded once it is back."
            ),
            "the buyer" if seller else "you",
            _("Send the item back to your return address and enter its tracking number.")
            if seller
            else _(
                "Send the item back to the seller's return address and enter its tracking number."
            ),
            due,
            _("The money is released to you.")
            if seller
            else _("The money is released to the seller."),
        )
    return NextStep(
        _("The buyer sent the item back.") if seller else _("You sent the item back."),
        "you" if seller else "the seller",
        _("Confirm that the item is back once it has come."),
        due,
        _("The buyer is refunded all the same.") if seller else _("You are refunded all the same."),
    )


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


def _losing_buyer(deal: Deal) -> NextStep:
    if deal.buyer_user_id is not None or deal.status not in (S.DRAFT, S.AD):
        return NextStep(_("The item went to another buyer. Nothing more happens here."), None, None)
    return NextStep(_("The deal is open for offers."), "the seller", _("Answer the offers."))


def _before_signing(deal: Deal, seller: bool) -> NextStep:
    if deal.buyer_user_id is None:
        if seller and deal.status == S.DRAFT:
            return NextStep(
                _("Your deal is a draft."),
                "you",
                _("Complete the details and sign the deal to publish it; then answer offers."),
            )
        return NextStep(
            _("The deal is open for offers."),
            "you" if seller else "the seller",
            _("Approve or decline the offers."),
        )
    if deal.status == S.DRAFT:
        return NextStep(
            _("You approved an offer.") if seller else _("The seller approved your offer."),
            "you" if seller else "the seller",
            _("Sign the deal."),
        )
    return NextStep(
        _("You approved an offer and signed the deal.")
        if seller
        else _("The seller approved your offer and signed the deal."),
        "the buyer" if seller else "you",
        _("Sign the deal, then pay."),
    )


def _completed(deal: Deal, seller: bool, why: str, account: PayoutAccount | None) -> NextStep:
    """A completed deal's card; ``account`` is the seller's payout account, if they added one:
    a payout pending to it (a bank file not yet confirmed by the bank) asks nothing of anyone."""
    happened = _sentences(why, _("The deal is complete."))
    if deal.payment_status == "PendingPayOut" and account is not None:
        on_its_way = (
            _("Your payout is on its way.") if seller else _("The seller's payout is on its way.")
        )
        return NextStep(_sentences(happened, on_its_way), None, None)
    if deal.payment_status in ("PendingPayOut", "PayoutFailed"):
        return NextStep(
            happened,
            "you" if seller else "the seller",
            _("Add the payout account the money is to be paid to.")
            if deal.payment_status == "PendingPayOut"
            else _("The payout failed: check the payout account and save it again."),
        )
    paid = _("You are paid.") if seller else _("The seller is paid.")
    return NextStep(_sentences(happened, paid), None, None)


def where_the_money_is(deal: Deal, account_last4: str | None, party: Party) -> str:
    """One sentence for the page: where the buyer's money is now, as the party reads it."""
    status = deal.payment_status
    seller = party is Party.SELLER
    if status is None or status in ("PaymentFailed", "PaymentCancelled"):
        return _("Not paid yet: no money has moved.")
    if status in ("Created", "Processing"):
        return _("The buyer is paying.") if seller else _("Your payment is being processed.")
    if status == "Paid":
        if deal.status == S.REFUNDED:
            return _("Being refunded to the buyer.") if seller else _("Being refunded to you.")
        if deal.status in (S.SHIPPING_REVIEW_DENIED, S.PICKUP_DENIED):
            # In a dispute the item may well have changed hands: the money waits for our decision.
            return (
                _(
                    "Held safely by dealbroker while we look into it; then paid to you or "
                    "refunded to the buyer."
                )
                if seller
                else _(
                    "Held safely by dealbroker while we look into it; then refunded to you or "
                    "paid to the seller."
                )
            )
        return _("Held safely by dealbroker until the item has changed hands.")
    if status == "Refunded":
        return (
            _("Refunded to the buyer: you receive nothing for this deal.")
            if seller
            else _("Refunded to you in full.")
        )
    if status == "PayoutFailed":
        return (
            _("The payout failed: check your payout account.")
            if seller
            else _("The payout failed: the seller checks the payout account.")
        )
    if status == "PendingPayOut":
        if account_last4 is None:
            return (
                _("Held for you until you add your payout account.")
                if seller
                else _("Held for the seller until they add a payout account.")
            )
        return (
            _("On its way to your account ending %(last4)s.")
            if seller
            else _("On its way to the seller's account ending %(last4)s.")
        ) % {"last4": account_last4}
    if status == "PaidOut":
        if account_last4 is None:
            return (
                _("Paid out to your account.") if seller else _("Paid out to the seller's account.")
            )
        return (
            _("Paid out to your account ending %(last4)s (arrives within 5 bank days).")
            if seller
            else _(
                "Paid out to the seller's account ending %(last4)s (arrives within 5 bank days)."
            )
        ) % {"last4": account_last4}
    return _("Cancelled: no money moved.")
