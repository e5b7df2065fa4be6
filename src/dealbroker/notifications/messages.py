"""The words of every message to a seller or a buyer, in one place.

``notifications.service`` decides who is told what and when; this module only words it, from
plain values (the deal's title, amounts already formatted, the reader's link, the deadline), so
the texts can be translated here without touching the rules. Deadlines are absolute dates in the
deployment's time zone, named, e.g. "30 November 2026 14:05 (Europe/Oslo)".
"""

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from babel.dates import format_datetime

from dealbroker.core import money

LOCALE = "en"


@dataclass(frozen=True)
class Text:
    subject: str
    body: str


def when(moment: datetime, zone: ZoneInfo) -> str:
    """A deadline as a reader should see it: local date and time, and the zone's name."""
    return f"{format_datetime(moment, 'd MMMM y HH:mm', tzinfo=zone, locale=LOCALE)} ({zone.key})"


def amount(minor: int, currency: str) -> str:
    return f"{money.to_string(minor)} {currency}"


def title(name: str | None) -> str:
    return name or "your deal"


def _first_up(text: str) -> str:
    """``text`` to open a sentence: first letter capital, the rest as the seller wrote it."""
    return text[:1].upper() + text[1:]


def _seller_page(url: str) -> str:
    return f"Your deal page: {url}"


def _buyer_page(url: str | None) -> str:
    # An offer made without a link of ours (the sandbox's dealOffer), or on a link issued before
    # links could be rebuilt, has no page we can point to.
    if url is None:
        return "Open the offer link you were given to follow the deal."
    return f"Your offer page: {url}"


def _body(*paragraphs: str) -> str:
    return "\n\n".join(p for p in paragraphs if p)


# --- offers -----------------------------------------------------------------------------------


def offer_received(deal: str, buyer: str, price: str, url: str) -> Text:
    return Text(
        f"New offer on {deal}",
        _body(
            f"{buyer} offers {price}. Open your deal page to approve or decline it.",
            _seller_page(url),
        ),
    )


def offer_approved(deal: str, price: str, url: str | None) -> Text:
    return Text(
        f"Your offer on {deal} was approved",
        _body(
            f"The seller approved your offer of {price}. Sign the deal on your offer page; once "
            "you both have signed, you pay, and we hold the money until you approve the item.",
            _buyer_page(url),
        ),
    )


def offer_declined(deal: str, price: str, url: str | None) -> Text:
    return Text(
        f"Your offer on {deal} was declined",
        _body(
            f"The seller did not accept your offer of {price}. Nothing was paid. Your offer page "
            "shows whether the deal still takes offers.",
            _buyer_page(url),
        ),
    )


def offer_withdrawn(deal: str, buyer: str, price: str, still_open: bool, url: str) -> Text:
    return Text(
        f"An offer on {deal} was withdrawn",
        _body(
            f"{buyer} withdrew their offer of {price}; it can no longer be approved.",
            "Your deal still takes offers." if still_open else "Your deal takes no more offers.",
            _seller_page(url),
        ),
    )


# --- signing and paying -----------------------------------------------------------------------


def please_pay(deal: str, price: str, url: str | None) -> Text:
    return Text(
        f"Please pay for {deal}",
        _body(
            f"Both of you have signed. Pay {price} on your offer page; the money is held until "
            "you approve the item.",
            _buyer_page(url),
        ),
    )


def paid_seller(deal: str, price: str, pickup: bool, deadline: str, url: str) -> Text:
    if pickup:
        return Text(
            f"{_first_up(deal)} is paid: hand it over by {deadline}",
            _body(
                f"The buyer has paid {price}. We hold the money until the buyer approves the item.",
                f"Meet the buyer and hand the item over by {deadline}; the buyer checks it and "
                "approves it on their page. If the buyer has not approved it by then, the buyer "
                "gets the money back.",
                _seller_page(url),
            ),
        )
    return Text(
        f"{_first_up(deal)} is paid: send it by {deadline}",
        _body(
            f"The buyer has paid {price}. We hold the money until the buyer approves the item.",
            f"Hand the item to the carrier by {deadline} and mark it as handed over on your deal "
            "page. If it is not handed over by then, the buyer gets the money back.",
            _seller_page(url),
        ),
    )


def paid_buyer(deal: str, price: str, pickup: bool, deadline: str, url: str | None) -> Text:
    if pickup:
        return Text(
            f"Payment received for {deal}",
            _body(
                f"We hold your {price} until you approve the item.",
                f"Meet the seller, check the item and approve it on your offer page by {deadline}. "
                "If it is not approved by then, you get your money back.",
                _buyer_page(url),
            ),
        )
    return Text(
        f"Payment received for {deal}",
        _body(
            f"We hold your {price} until you approve the item.",
            f"The seller must hand the item to the carrier by {deadline}; if not, you get your "
            "money back.",
            _buyer_page(url),
        ),
    )


# --- the item on its way ----------------------------------------------------------------------


def item_shipped(deal: str, url: str | None) -> Text:
    return Text(
        f"{_first_up(deal)} is on its way",
        _body(
            "The seller has handed the item to the carrier. When it arrives, check it and approve "
            "it (or report a problem) on your offer page.",
            _buyer_page(url),
        ),
    )


def item_arrived_buyer(deal: str, deadline: str, url: str | None) -> Text:
    return Text(
        f"{_first_up(deal)} has arrived",
        _body(
            f"Check the item and approve it on your offer page by {deadline}, or report a problem "
            "there. After that it counts as approved and the seller is paid.",
            _buyer_page(url),
        ),
    )


def item_arrived_seller(deal: str, deadline: str, url: str) -> Text:
    return Text(
        f"{_first_up(deal)} has arrived at the buyer",
        _body(
            f"The buyer has until {deadline} to approve the item or report a problem; without an "
            "answer by then it counts as approved and you are paid.",
            _seller_page(url),
        ),
    )


# --- the end of a deal ------------------------------------------------------------------------

COMPLETED_BECAUSE = {
    "buyer_approved": "The buyer approved the item.",
    "review_period_ended": "The buyer's time to review the item ended without a complaint, so "
    "the item counts as approved.",
    "dispute_released": "We looked into the problem the buyer reported and released the money "
    "to the seller.",
}


def completed_buyer(deal: str, reason: str, url: str | None) -> Text:
    return Text(
        f"{_first_up(deal)}: the deal is completed",
        _body(
            COMPLETED_BECAUSE.get(reason, ""),
            "The deal is completed and the payment has been released to the seller.",
            _buyer_page(url),
        ),
    )


def completed_seller(
    deal: str, reason: str, payout: str | None, account_last4: str | None, url: str
) -> Text:
    if account_last4 is None:
        next_step = (
            f"Add your payout account on your deal page, and we pay you {payout or 'the amount'}."
        )
    else:
        next_step = (
            f"We pay {payout or 'the amount'} to your payout account ending {account_last4}; "
            "we tell you when it is sent."
        )
    return Text(
        f"{_first_up(deal)}: the deal is completed",
        _body(COMPLETED_BECAUSE.get(reason, ""), next_step, _seller_page(url)),
    )


def cancelled(deal: str, url: str | None, seller: bool) -> Text:
    return Text(
        f"{_first_up(deal)} was cancelled",
        _body(
            "The deal was cancelled. No money was taken, and no offer on it can be accepted "
            "any more.",
            _seller_page(url) if seller and url else _buyer_page(url),
        ),
    )


DISPUTE_NEXT = (
    "We hold the money while we look into it; nobody is paid until we have decided. We may "
    "contact you at this address. The deal ends either with the money released to the seller "
    "or with a full refund to the buyer, and we tell you both which."
)


def disputed_buyer(deal: str, url: str | None) -> Text:
    return Text(
        f"{_first_up(deal)}: we are looking into the problem you reported",
        _body("You reported a problem with the item.", DISPUTE_NEXT, _buyer_page(url)),
    )


def disputed_seller(deal: str, url: str) -> Text:
    return Text(
        f"{_first_up(deal)}: the buyer reported a problem",
        _body(
            "The buyer did not approve the item and reported a problem.",
            DISPUTE_NEXT,
            _seller_page(url),
        ),
    )


REFUNDED_BECAUSE = {
    "Shipping_Expired": "The item was not handed to the carrier in time.",
    "Shipping_Returned": "The item was sent back to the seller.",
    "Pickup_Expired": "The item was not handed over and approved in time.",
    "Shipping_Review_Denied": "We looked into the problem the buyer reported and decided to "
    "refund the buyer.",
    "Pickup_Denied": "We looked into the problem the buyer reported and decided to refund the "
    "buyer.",
}


def refunded_buyer(deal: str, reason: str, price: str | None, url: str | None) -> Text:
    return Text(
        f"{_first_up(deal)}: your money is being returned",
        _body(
            REFUNDED_BECAUSE.get(reason, ""),
            f"We are returning {price or 'your payment'} to you, the whole amount; it reaches "
            "you within a few bank days.",
            _buyer_page(url),
        ),
    )


def refunded_seller(deal: str, reason: str, url: str) -> Text:
    return Text(
        f"{_first_up(deal)}: the buyer has been refunded",
        _body(
            REFUNDED_BECAUSE.get(reason, ""),
            "The buyer gets the whole amount back; nothing is paid out for this deal.",
            _seller_page(url),
        ),
    )


# --- payouts ----------------------------------------------------------------------------------


def payout_sent(deal: str, payout: str, url: str) -> Text:
    return Text(
        f"You have been paid for {deal}",
        _body(
            f"{payout} is on its way to your payout account (within 5 bank days).",
            _seller_page(url),
        ),
    )


def payout_failed(deal: str, payout: str, url: str) -> Text:
    return Text(
        f"We could not pay you for {deal}",
        _body(
            f"The payout of {payout} to your payout account did not go through. Check the "
            "account on your deal page and save it again; we then try once more.",
            _seller_page(url),
        ),
    )


def confirm_payout_account(deal: str, last4: str, deadline: str, confirm_url: str) -> Text:
    return Text(
        f"Confirm the new payout account for {deal}",
        _body(
            f"Someone asked to pay this deal's money to a new account ending {last4}. If it was "
            f"you, confirm it by {deadline}: {confirm_url}",
            "If not, ignore this message: nothing changes without your confirmation.",
        ),
    )


def payout_account_changed(deal: str, last4: str, url: str) -> Text:
    return Text(
        f"The payout account for {deal} was changed",
        _body(
            f"The money of this deal now goes to the account ending {last4}. If you did not "
            "confirm this change, contact the marketplace at once.",
            _seller_page(url),
        ),
    )
