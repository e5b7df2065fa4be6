"""The words of every message to a seller or a buyer, in one place.

``notifications.service`` decides who is told what and when, and in which language (the
reader's); this module only words it, from plain values (the deal's title, the reader's link,
the deadline) in the current locale (``core.i18n``): amounts and deadlines are written the way
that locale writes them, deadlines as absolute dates in the deployment's time zone, named as the
reader's language names it, e.g. "30. november 2026, 14:05 (sentraleuropeisk tid)".
"""

from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from dealbroker.core import i18n, money
from dealbroker.core.i18n import N_, _, ngettext


@dataclass(frozen=True)
class Text:
    subject: str
    body: str


def when(moment: datetime, zone: ZoneInfo) -> str:
    """A deadline as a reader should see it: local date and time, and the zone's name."""
    return i18n.when(moment, zone, "long")


def amount(minor: int, currency: str) -> str:
    return money.to_text(minor, currency, i18n.current())


def title(name: str | None) -> str:
    return name or _("your deal")


def _first_up(text: str) -> str:
    """``text`` to open a sentence: first letter capital, the rest as the seller wrote it."""
    return text[:1].upper() + text[1:]


def _seller_page(url: str) -> str:
    return _("Your deal page: %(url)s") % {"url": url}


def _buyer_page(url: str | None) -> str:
    # An offer made without a link of ours (the sandbox's dealOffer), or on a link issued before
    # links could be rebuilt, has no page we can point to.
    if url is None:
        return _("Open the offer link you were given to follow the deal.")
    return _("Your offer page: %(url)s") % {"url": url}


def _body(*paragraphs: str) -> str:
    return "\n\n".join(p for p in paragraphs if p)


def with_support(text: Text, email: str, phone: str) -> Text:
    """``text`` closed by the person to ask: every message ends with the support contact."""
    if phone:
        ask = _("Questions about the deal or your money? Ask us: %(email)s, %(phone)s.")
    else:
        ask = _("Questions about the deal or your money? Ask us: %(email)s.")
    return Text(text.subject, _body(text.body, ask % {"email": email, "phone": phone}))


# --- offers -----------------------------------------------------------------------------------


def offer_received(deal: str, buyer: str, price: str, url: str) -> Text:
    return Text(
        _("New offer on %(deal)s") % {"deal": deal},
        _body(
            _("%(buyer)s offers %(price)s. Open your deal page to approve or decline it.")
            % {"buyer": buyer, "price": price},
            _seller_page(url),
        ),
    )


def offer_approved(deal: str, price: str, deadline: str, url: str | None) -> Text:
    return Text(
        _("Your offer on %(deal)s was approved") % {"deal": deal},
        _body(
            _(
                "The seller approved your offer of %(price)s. Sign the deal on your offer page; "
                "once you both have signed, you pay, and we hold the money until you approve "
                "the item."
            )
            % {"price": price},
            _(
                "Sign and pay by %(deadline)s. If you have not paid by then, the approval "
                "lapses and the seller takes offers again."
            )
            % {"deadline": deadline},
            _buyer_page(url),
        ),
    )


def offer_declined(deal: str, price: str, url: str | None) -> Text:
    return Text(
        _("Your offer on %(deal)s was declined") % {"deal": deal},
        _body(
            _(
                "The seller did not accept your offer of %(price)s. Nothing was paid. Your offer "
                "page shows whether the deal still takes offers."
            )
            % {"price": price},
            _buyer_page(url),
        ),
    )


def offer_withdrawn(deal: str, buyer: str, price: str, still_open: bool, url: str) -> Text:
    return Text(
        _("An offer on %(deal)s was withdrawn") % {"deal": deal},
        _body(
            _("%(buyer)s withdrew their offer of %(price)s; it can no longer be approved.")
            % {"buyer": buyer, "price": price},
            _("Your deal still takes offers.")
            if still_open
            else _("Your deal takes no more offers."),
            _seller_page(url),
        ),
    )


# --- signing and paying -----------------------------------------------------------------------


def please_pay(deal: str, price: str, url: str | None, shipping: str = "") -> Text:
    return Text(
        _("Please pay for %(deal)s") % {"deal": deal},
        _body(
            _(
                "Both of you have signed. Pay %(price)s on your offer page; the money is held "
                "until you approve the item."
            )
            % {"price": price},
            shipping,
            _buyer_page(url),
        ),
    )


def shipping_note(shipping: str, paid_by: str, seller: bool) -> str:
    """What the parcel costs and who pays it, in the words of the party told (``seller``)."""
    values = {"shipping": shipping}
    if paid_by == "buyer" and seller:
        return _("The buyer pays the shipping of %(shipping)s on top of the price.") % values
    if paid_by == "buyer":
        return _("The shipping of %(shipping)s is included: you pay it on top of the price.") % (
            values
        )
    if seller:
        return _("You pay the shipping of %(shipping)s: it comes off your payout.") % values
    return _("The seller pays the shipping of %(shipping)s.") % values


def paid_seller(
    deal: str, price: str, pickup: bool, deadline: str, url: str, shipping: str = ""
) -> Text:
    values = {"deal": _first_up(deal), "price": price, "deadline": deadline}
    held = (
        _("The buyer has paid %(price)s. We hold the money until the buyer approves the item.")
        % values
    )
    if pickup:
        return Text(
            _("%(deal)s is paid: hand it over by %(deadline)s") % values,
            _body(
                held,
                _(
                    "Meet the buyer and hand the item over by %(deadline)s. When the buyer has "
                    "the item, they show you their handover code: enter it on your deal page to "
                    "confirm the handover, and you are paid. If the handover is not confirmed "
                    "by then, the buyer gets the money back."
                )
                % values,
                _seller_page(url),
            ),
        )
    return Text(
        _("%(deal)s is paid: send it by %(deadline)s") % values,
        _body(
            held,
            _(
                "Hand the item to the carrier by %(deadline)s and enter the tracking number on "
                "your deal page. If it is not handed over by then, the buyer gets the money back."
            )
            % values,
            shipping,
            _seller_page(url),
        ),
    )


def paid_buyer(
    deal: str, price: str, pickup: bool, deadline: str, url: str | None, shipping: str = ""
) -> Text:
    """The buyer's receipt: what they paid (and the shipping in it), and what happens next."""
    values = {"deal": deal, "price": price, "deadline": deadline}
    held = _("We hold your %(price)s until you approve the item.") % values
    if pickup:
        next_step = (
            _(
                "Meet the seller and check the item by %(deadline)s. When you have it and it is "
                "as described, give the seller the handover code on your offer page (or approve "
                "the item there). If the handover is not confirmed by then, you get your money "
                "back."
            )
            % values
        )
    else:
        next_step = (
            _(
                "The seller must hand the item to the carrier by %(deadline)s; if not, you get "
                "your money back."
            )
            % values
        )
    return Text(
        _("Payment received for %(deal)s") % values,
        _body(held, shipping, next_step, _buyer_page(url)),
    )


# --- the item on its way ----------------------------------------------------------------------


def item_shipped(deal: str, url: str | None, deadline: str | None = None) -> Text:
    return Text(
        _("%(deal)s is on its way") % {"deal": _first_up(deal)},
        _body(
            _(
                "The seller has handed the item to the carrier; the tracking number is on your "
                "offer page. When it arrives, check it and approve it (or report a problem) "
                "there."
            ),
            _transit_deadline(deadline, seller=False),
            _buyer_page(url),
        ),
    )


# --- a parcel in transit always resolves ------------------------------------------------------


def _transit_deadline(deadline: str | None, *, seller: bool) -> str:
    if deadline is None:
        return ""
    if seller:
        return _(
            "If the parcel has not arrived by %(deadline)s, we look into it with you both and "
            "the carrier; until then the money stays held."
        ) % {"deadline": deadline}
    return _(
        "If the parcel is late, you can report it on your offer page after a few days. If it "
        "has not arrived by %(deadline)s, we look into it with you both and the carrier; until "
        "then the money stays held."
    ) % {"deadline": deadline}


def item_shipped_seller(deal: str, deadline: str | None, url: str) -> Text:
    return Text(
        _("%(deal)s is with the carrier") % {"deal": _first_up(deal)},
        _body(
            _(
                "The parcel is on its way to the buyer. When it arrives, the buyer has 24 hours "
                "to check it; then you are paid."
            ),
            _transit_deadline(deadline, seller=True),
            _seller_page(url),
        ),
    )


def not_received_buyer(deal: str, expired: bool, url: str | None) -> Text:
    return Text(
        _("%(deal)s: we are looking into the parcel that did not arrive")
        % {"deal": _first_up(deal)},
        _body(
            _("The parcel did not arrive by the deadline.")
            if expired
            else _("You reported that the parcel has not arrived."),
            _(DISPUTE_NEXT),
            _buyer_page(url),
        ),
    )


def not_received_seller(deal: str, expired: bool, url: str) -> Text:
    return Text(
        _("%(deal)s: the parcel has not arrived") % {"deal": _first_up(deal)},
        _body(
            _("The parcel did not arrive by the deadline.")
            if expired
            else _("The buyer reported that the parcel has not arrived."),
            _(DISPUTE_NEXT),
            _seller_page(url),
        ),
    )


def item_arrived_buyer(deal: str, deadline: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s has arrived") % {"deal": _first_up(deal)},
        _body(
            _(
                "Check the item and approve it on your offer page by %(deadline)s, or report a "
                "problem there. After that it counts as approved and the seller is paid."
            )
            % {"deadline": deadline},
            _buyer_page(url),
        ),
    )


def item_arrived_seller(deal: str, deadline: str, url: str) -> Text:
    return Text(
        _("%(deal)s has arrived at the buyer") % {"deal": _first_up(deal)},
        _body(
            _(
                "The buyer has until %(deadline)s to approve the item or report a problem; "
                "without an answer by then it counts as approved and you are paid."
            )
            % {"deadline": deadline},
            _seller_page(url),
        ),
    )


# --- the end of a deal ------------------------------------------------------------------------

# Why a deal completed, as each party reads it: to its reader in the second person, of the
# other party in the third.
COMPLETED_BECAUSE_BUYER = {
    "buyer_approved": N_("You approved the item."),
    "handover_confirmed": N_("The seller confirmed the handover with your handover code."),
    "review_period_ended": N_(
        "Your time to review the item ended without a complaint, so the item counts as approved."
    ),
    "dispute_released": N_(
        "We looked into the problem you reported and released the money to the seller."
    ),
    # Every deal ends: a dispute the pickup seller opened.
    "seller_dispute_released": N_(
        "We looked into the problem the seller reported and released the money to the seller."
    ),
    # Disputes decided on evidence: a return the buyer did not send.
    "return_not_sent": N_(
        "You did not send the item back by the deadline, so the money is released to the seller."
    ),
}
COMPLETED_BECAUSE_SELLER = {
    "buyer_approved": N_("The buyer approved the item."),
    "handover_confirmed": N_("You confirmed the handover with the buyer's handover code."),
    "review_period_ended": N_(
        "The buyer's time to review the item ended without a complaint, so the item counts as "
        "approved."
    ),
    "dispute_released": N_(
        "We looked into the problem the buyer reported and released the money to you."
    ),
    "seller_dispute_released": N_(
        "We looked into the problem you reported and released the money to you."
    ),
    "return_not_sent": N_(
        "The buyer did not send the item back by the deadline, so the money is released to you."
    ),
}
SELLER_DISPUTE_RELEASED = "seller_dispute_released"
SELLER_DISPUTE_REFUNDED = "seller_dispute_refunded"


def _because(reasons: dict[str, str], reason: str) -> str:
    return _(reasons[reason]) if reason in reasons else ""


def completed_buyer(deal: str, reason: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: the deal is completed") % {"deal": _first_up(deal)},
        _body(
            _because(COMPLETED_BECAUSE_BUYER, reason),
            _("The deal is completed and the payment has been released to the seller."),
            _buyer_page(url),
        ),
    )


def completed_seller(
    deal: str,
    reason: str,
    payout: str | None,
    account_last4: str | None,
    url: str,
    shipping: str = "",
) -> Text:
    values = {"payout": payout or _("the amount"), "last4": account_last4}
    if account_last4 is None:
        next_step = _("Add your payout account on your deal page, and we pay you %(payout)s.")
    else:
        next_step = _(
            "We pay %(payout)s to your payout account ending %(last4)s; we tell you when it is "
            "sent."
        )
    return Text(
        _("%(deal)s: the deal is completed") % {"deal": _first_up(deal)},
        _body(
            _because(COMPLETED_BECAUSE_SELLER, reason),
            next_step % values,
            shipping,
            _seller_page(url),
        ),
    )


def cancelled(deal: str, url: str | None, seller: bool) -> Text:
    return Text(
        _("%(deal)s was cancelled") % {"deal": _first_up(deal)},
        _body(
            _(
                "The deal was cancelled. No money was taken, and no offer on it can be accepted "
                "any more."
            ),
            _seller_page(url) if seller and url else _buyer_page(url),
        ),
    )


DISPUTE_NEXT = N_(
    "We hold the money while we look into it; nobody is paid until we have decided. We may "
    "contact you at this address. The deal ends either with the money released to the seller "
    "or with a full refund to the buyer, and we tell you both which."
)


def disputed_buyer(deal: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: we are looking into the problem you reported") % {"deal": _first_up(deal)},
        _body(_("You reported a problem with the item."), _(DISPUTE_NEXT), _buyer_page(url)),
    )


def disputed_seller(deal: str, url: str) -> Text:
    return Text(
        _("%(deal)s: the buyer reported a problem") % {"deal": _first_up(deal)},
        _body(
            _("The buyer did not approve the item and reported a problem."),
            _(DISPUTE_NEXT),
            _seller_page(url),
        ),
    )


# --- disputes decided on evidence ---------------------------------------------------------------


def with_decision_date(text: Text, deadline: str) -> Text:
    """A dispute's opening message, with the date by which we decide it."""
    decide = _("We decide by %(deadline)s at the latest.") % {"deadline": deadline}
    return Text(text.subject, _body(text.body, decide))


def with_decision_reason(text: Text, reason: str) -> Text:
    """A dispute's decision, with the operator's reason for it."""
    return Text(text.subject, _body(text.body, _("Our reasons: %(reason)s") % {"reason": reason}))


# Who pays for sending a returned item back: the buyer. The refund is the whole amount held, the
# only money there is; nothing pays the postage back (docs/decisions/0023-dispute-decisions.md).
# Said with the decision, on both pages and in both mails, in the same words.
RETURN_POSTAGE_BUYER = N_(
    "You pay the postage for sending it back: the refund is the price you paid, without the "
    "postage."
)
RETURN_POSTAGE_SELLER = N_(
    "The buyer pays the postage for sending it back; you pay nothing for the return."
)


def return_requested_buyer(deal: str, address: str, deadline: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: send the item back to the seller") % {"deal": _first_up(deal)},
        _body(
            _(
                "We looked into the problem and decided: you send the item back to the seller, "
                "and you are refunded in full once it is back."
            ),
            _(
                "Send it to %(address)s by %(deadline)s, with a carrier that gives a tracking "
                "number, and enter the carrier and the tracking number on your offer page."
            )
            % {"address": address, "deadline": deadline},
            _(RETURN_POSTAGE_BUYER),
            _(
                "You are refunded when the seller confirms that they have it back, or when their "
                "time to confirm it has passed: we tell you that date once you have sent it. If "
                "it is not sent by the deadline, the money is released to the seller."
            ),
            _buyer_page(url),
        ),
    )


def return_requested_seller(deal: str, address: str, deadline: str, url: str) -> Text:
    return Text(
        _("%(deal)s: the buyer sends the item back to you") % {"deal": _first_up(deal)},
        _body(
            _(
                "We looked into the problem and decided: the buyer sends the item back to you, "
                "and is refunded in full once it is back."
            ),
            _(
                "They send it to %(address)s by %(deadline)s, with a tracking number, which "
                "your deal page then shows. If they do not send it by then, the money is "
                "released to you."
            )
            % {"address": address, "deadline": deadline},
            _(RETURN_POSTAGE_SELLER),
            _seller_page(url),
        ),
    )


def return_sent_buyer(
    deal: str, carrier: str, tracking: str, deadline: str, url: str | None
) -> Text:
    return Text(
        _("%(deal)s: you sent the item back") % {"deal": _first_up(deal)},
        _body(
            _("You sent the item back with %(carrier)s, tracking number %(tracking)s.")
            % {"carrier": carrier, "tracking": tracking},
            _(
                "You are refunded in full when the seller confirms that they have it back, or "
                "on %(deadline)s at the latest."
            )
            % {"deadline": deadline},
            _buyer_page(url),
        ),
    )


def return_sent_seller(deal: str, carrier: str, tracking: str, deadline: str, url: str) -> Text:
    return Text(
        _("%(deal)s: the buyer sent the item back") % {"deal": _first_up(deal)},
        _body(
            _("The buyer sent the item back with %(carrier)s, tracking number %(tracking)s.")
            % {"carrier": carrier, "tracking": tracking},
            _(
                "When it has come, confirm on your deal page that you have it back; the buyer "
                "is then refunded. If you do not confirm by %(deadline)s, the buyer is refunded "
                "all the same."
            )
            % {"deadline": deadline},
            _seller_page(url),
        ),
    )


# --- dispute evidence --------------------------------------------------------------------------


def evidence_added_buyer(deal: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: the seller added a statement to the dispute") % {"deal": _first_up(deal)},
        _body(
            _(
                "The seller added a statement about the problem. You can read it, and add your "
                "own statements and photos, on your page until we decide."
            ),
            _buyer_page(url),
        ),
    )


def evidence_added_seller(deal: str, url: str) -> Text:
    return Text(
        _("%(deal)s: the buyer added a statement to the dispute") % {"deal": _first_up(deal)},
        _body(
            _(
                "The buyer added a statement about the problem. You can read it, and add your "
                "own statements and photos, on your page until we decide."
            ),
            _seller_page(url),
        ),
    )


# --- every deal ends: an approval that lapses -------------------------------------------------


def approval_lapsed_buyer(deal: str, url: str | None) -> Text:
    return Text(
        _("Your approved offer on %(deal)s has lapsed") % {"deal": deal},
        _body(
            _(
                "You did not sign and pay in time, so the seller's approval of your offer has "
                "lapsed: you are no longer the buyer, and the deal takes offers again. Nothing "
                "was paid. You may make a new offer on your offer page."
            ),
            _buyer_page(url),
        ),
    )


def approval_lapsed_seller(deal: str, url: str) -> Text:
    return Text(
        _("%(deal)s takes offers again") % {"deal": _first_up(deal)},
        _body(
            _(
                "The buyer whose offer you approved did not sign and pay in time, so the "
                "approval has lapsed. Your deal takes offers again at your asking price; every "
                "buyer who offered before is told they may offer again."
            ),
            _seller_page(url),
        ),
    )


def offers_again(deal: str, price: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s takes offers again") % {"deal": _first_up(deal)},
        _body(
            _(
                "The offer the seller approved has lapsed, so the deal takes offers again, at "
                "the asking price of %(price)s. You may make a new offer on your offer page."
            )
            % {"price": price},
            _buyer_page(url),
        ),
    )


# --- every deal ends: the seller's recourse at a pickup ---------------------------------------


def _reason(reason: str) -> str:
    """The seller's reason: one of their fixed reasons (``parties.PICKUP_PROBLEMS``, kept
    as its English text) in the reader's language, their own words as written."""
    return _(reason) if reason else reason


def seller_reported_buyer(deal: str, reason: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: the seller reported a problem with the handover") % {"deal": _first_up(deal)},
        _body(
            _("The seller reported a problem with the handover: “%(reason)s”.")
            % {"reason": _reason(reason)},
            _(DISPUTE_NEXT),
            _buyer_page(url),
        ),
    )


def seller_reported_seller(deal: str, reason: str, url: str) -> Text:
    return Text(
        _("%(deal)s: we are looking into the problem you reported") % {"deal": _first_up(deal)},
        _body(
            _("You reported a problem with the handover: “%(reason)s”.")
            % {"reason": _reason(reason)},
            _(DISPUTE_NEXT),
            _seller_page(url),
        ),
    )


# Why the buyer is refunded, as each party reads it.
REFUNDED_BECAUSE_BUYER = {
    "Shipping_Expired": N_("The seller did not hand the item to the carrier in time."),
    "Shipping_Returned": N_("The item was sent back to the seller."),
    "Pickup_Expired": N_("The item was not handed over and approved in time."),
    "Shipping_Review_Denied": N_(
        "We looked into the problem you reported and decided to refund you."
    ),
    "Pickup_Denied": N_("We looked into the problem you reported and decided to refund you."),
    # Every deal ends: a dispute the pickup seller opened.
    "seller_dispute_refunded": N_(
        "We looked into the problem the seller reported and decided to refund you."
    ),
    # Disputes decided on evidence: the end of a return then refund.
    "return_received": N_("The seller confirmed that they have the item back."),
    "return_confirm_expired": N_(
        "You sent the item back, and the seller did not confirm its receipt in time."
    ),
}
REFUNDED_BECAUSE_SELLER = {
    "Shipping_Expired": N_("You did not hand the item to the carrier in time."),
    "Shipping_Returned": N_("The item was sent back to you."),
    "Pickup_Expired": N_("The item was not handed over and approved in time."),
    "Shipping_Review_Denied": N_(
        "We looked into the problem the buyer reported and decided to refund the buyer."
    ),
    "Pickup_Denied": N_(
        "We looked into the problem the buyer reported and decided to refund the buyer."
    ),
    "seller_dispute_refunded": N_(
        "We looked into the problem you reported and decided to refund the buyer."
    ),
    "return_received": N_("You confirmed that you have the item back."),
    "return_confirm_expired": N_(
        "The buyer sent the item back, and you did not confirm its receipt in time."
    ),
}


def refunded_buyer(
    deal: str,
    reason: str,
    price: str | None,
    url: str | None,
    shipping: str | None = None,
    shipping_refunded: bool = True,
) -> Text:
    """``shipping``: the deal's shipping price, if it had one; ``shipping_refunded``: whether
    the refund includes it (not for a parcel the buyer did not collect)."""
    values = {"price": price or _("your payment"), "shipping": shipping}
    if shipping is None:
        returned = _(
            "We are returning %(price)s to you, the whole amount; it reaches you within a "
            "few bank days."
        )
    elif shipping_refunded:
        returned = _(
            "We are returning %(price)s to you, the whole amount with the shipping of "
            "%(shipping)s; it reaches you within a few bank days."
        )
    else:
        returned = _(
            "We are returning %(price)s to you: the amount less the shipping of %(shipping)s, "
            "which is not refunded because the parcel was not collected and travelled at your "
            "cost. It reaches you within a few bank days."
        )
    return Text(
        _("%(deal)s: your money is being returned") % {"deal": _first_up(deal)},
        _body(_because(REFUNDED_BECAUSE_BUYER, reason), returned % values, _buyer_page(url)),
    )


def refunded_seller(
    deal: str, reason: str, url: str, shipping: str | None = None, shipping_refunded: bool = True
) -> Text:
    values = {"shipping": shipping}
    if shipping is None:
        returned = _("The buyer gets the whole amount back; nothing is paid out for this deal.")
    elif shipping_refunded:
        returned = _(
            "The buyer gets the whole amount back, the shipping of %(shipping)s included; "
            "nothing is paid out for this deal."
        )
    else:
        returned = _(
            "The buyer gets the amount back less the shipping of %(shipping)s, which is not "
            "refunded (the parcel was not collected); nothing is paid out for this deal."
        )
    return Text(
        _("%(deal)s: the buyer has been refunded") % {"deal": _first_up(deal)},
        _body(_because(REFUNDED_BECAUSE_SELLER, reason), returned % values, _seller_page(url)),
    )


def late_payment_refunded_buyer(deal: str, price: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: your payment is being returned") % {"deal": _first_up(deal)},
        _body(
            _(
                "Your payment of %(price)s reached us after the deal could no longer take it "
                "(it was cancelled, or no longer waited for a payment)."
            )
            % {"price": price},
            _(
                "We are returning %(price)s to you, the whole amount; it reaches you within a "
                "few bank days."
            )
            % {"price": price},
            _buyer_page(url),
        ),
    )


def late_payment_refunded_seller(deal: str, price: str, url: str) -> Text:
    return Text(
        _("%(deal)s: a late payment is returned to the buyer") % {"deal": _first_up(deal)},
        _body(
            _(
                "A payment of %(price)s from the buyer reached us after the deal could no "
                "longer take it. The buyer gets it back in full; nothing is paid out for it."
            )
            % {"price": price},
            _seller_page(url),
        ),
    )


def reservation_lapsed_buyer(deal: str, price: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: your payment was not taken") % {"deal": _first_up(deal)},
        _body(
            _(
                "The %(price)s reserved for this deal could not be taken when the item was "
                "handed over: the reservation had lapsed. Nothing was charged. Our support will "
                "contact you to settle the deal."
            )
            % {"price": price},
            _buyer_page(url),
        ),
    )


def reservation_lapsed_seller(deal: str, price: str, url: str) -> Text:
    return Text(
        _("%(deal)s: the buyer's payment could not be taken") % {"deal": _first_up(deal)},
        _body(
            _(
                "The buyer's reservation of %(price)s had lapsed when the item was handed over, "
                "so the money could not be taken and nothing can be paid out yet. Our support "
                "is handling it and will contact you."
            )
            % {"price": price},
            _seller_page(url),
        ),
    )


# --- payouts ----------------------------------------------------------------------------------


def payout_sent(deal: str, payout: str, url: str) -> Text:
    return Text(
        _("You have been paid for %(deal)s") % {"deal": deal},
        _body(
            _("%(payout)s is on its way to your payout account (within 5 bank days).")
            % {"payout": payout},
            _seller_page(url),
        ),
    )


def payout_failed(deal: str, payout: str, url: str) -> Text:
    return Text(
        _("We could not pay you for %(deal)s") % {"deal": deal},
        _body(
            _(
                "The payout of %(payout)s to your payout account did not go through. Check the "
                "account on your deal page and save it again; we then try once more."
            )
            % {"payout": payout},
            _seller_page(url),
        ),
    )


def confirm_payout_account(deal: str, last4: str, deadline: str, confirm_url: str) -> Text:
    return Text(
        _("Confirm the new payout account for %(deal)s") % {"deal": deal},
        _body(
            _(
                "Someone asked to pay this deal's money to a new account ending %(last4)s. If it "
                "was you, confirm it by %(deadline)s: %(url)s"
            )
            % {"last4": last4, "deadline": deadline, "url": confirm_url},
            _("If not, ignore this message: nothing changes without your confirmation."),
        ),
    )


def payout_account_changed(deal: str, last4: str, url: str) -> Text:
    return Text(
        _("The payout account for %(deal)s was changed") % {"deal": deal},
        _body(
            _(
                "The money of this deal now goes to the account ending %(last4)s. If you did not "
                "confirm this change, contact the marketplace at once."
            )
            % {"last4": last4},
            _seller_page(url),
        ),
    )


# --- reminders before a deadline (notifications.service.REMINDERS) ------------------------------


def _reminder_subject(deal: str, deadline: str) -> str:
    return _("Reminder: %(deal)s, by %(deadline)s") % {"deal": deal, "deadline": deadline}


def remind_ship(deal: str, deadline: str, url: str | None) -> Text:
    """To the seller of a paid carrier deal: hand the item to the carrier."""
    return Text(
        _reminder_subject(deal, deadline),
        _body(
            _(
                "You have until %(deadline)s to hand the item to the carrier and enter the "
                "tracking number on your deal page. If it is not handed over by then, the deal "
                "ends and the buyer gets the money back."
            )
            % {"deadline": deadline},
            _seller_page(url or ""),
        ),
    )


def remind_pickup_seller(deal: str, deadline: str, url: str | None) -> Text:
    """To the seller of a paid pickup deal: meet the buyer and confirm the handover."""
    return Text(
        _reminder_subject(deal, deadline),
        _body(
            _(
                "You have until %(deadline)s to meet the buyer, hand the item over and enter "
                "the buyer's handover code on your deal page. If the handover is not confirmed "
                "by then, the deal ends and the buyer gets the money back."
            )
            % {"deadline": deadline},
            _seller_page(url or ""),
        ),
    )


def remind_pickup_buyer(deal: str, deadline: str, url: str | None) -> Text:
    """To the buyer of a paid pickup deal: meet the seller and confirm the handover."""
    return Text(
        _reminder_subject(deal, deadline),
        _body(
            _(
                "You have until %(deadline)s to meet the seller and check the item. When you "
                "have it and it is as described, give the seller the handover code on your "
                "offer page (or approve the item there). If the handover is not confirmed by "
                "then, the deal ends and you get your money back."
            )
            % {"deadline": deadline},
            _buyer_page(url),
        ),
    )


def remind_review(deal: str, deadline: str, url: str | None) -> Text:
    """To the buyer of an arrived item: approve it or report a problem."""
    return Text(
        _reminder_subject(deal, deadline),
        _body(
            _(
                "You have until %(deadline)s to approve the item on your offer page or report "
                "a problem there. After that it counts as approved and the seller is paid."
            )
            % {"deadline": deadline},
            _buyer_page(url),
        ),
    )


def remind_transit(deal: str, deadline: str, url: str | None) -> Text:
    """To the buyer of a parcel in transit: confirm its arrival, or it counts as not received."""
    return Text(
        _reminder_subject(deal, deadline),
        _body(
            _(
                "Has the parcel arrived? Confirm its arrival on your offer page. If it has not "
                "arrived by %(deadline)s, we open a case as not received and look into it with "
                "you and the seller; the money stays held meanwhile."
            )
            % {"deadline": deadline},
            _buyer_page(url),
        ),
    )


def remind_sign_and_pay(deal: str, deadline: str, url: str | None) -> Text:
    """To the approved buyer who has not paid: sign and pay, or the approval lapses."""
    return Text(
        _reminder_subject(deal, deadline),
        _body(
            _(
                "Your offer was approved. Sign the deal and pay on your offer page by "
                "%(deadline)s; after that the approval lapses and the seller may sell the item "
                "to someone else."
            )
            % {"deadline": deadline},
            _buyer_page(url),
        ),
    )


def remind_return_send(deal: str, deadline: str, url: str | None) -> Text:
    """To the buyer asked to send the item back: send it, or the seller is paid."""
    return Text(
        _reminder_subject(deal, deadline),
        _body(
            _(
                "You have until %(deadline)s to send the item back to the seller and enter the "
                "carrier and the tracking number on your offer page. If it is not sent by then, "
                "the money is released to the seller."
            )
            % {"deadline": deadline},
            _buyer_page(url),
        ),
    )


def remind_return_confirm(deal: str, deadline: str, url: str | None) -> Text:
    """To the seller the item is sent back to: confirm its receipt."""
    return Text(
        _reminder_subject(deal, deadline),
        _body(
            _(
                "Has the item the buyer sent back come? Confirm on your deal page that you have "
                "it back. If you do not confirm by %(deadline)s, the buyer is refunded all the "
                "same."
            )
            % {"deadline": deadline},
            _seller_page(url or ""),
        ),
    )


# --- a deal's conversation (``notifications.service.conversation_news``) -------------------


# What a conversation's e-mail quotes: so many messages, each cut at so many characters; the
# rest waits on the reader's page.
QUOTED_MESSAGES = 5
QUOTED_CHARS = 500


@dataclass(frozen=True)
class Quoted:
    """A message as a conversation's e-mail shows it: when it was written (as the reader reads
    times), its words, and whether it carries a warning (then its words stay on the page)."""

    when: str
    body: str
    warned: bool


def _quote(message: Quoted) -> str:
    if message.warned:
        return _(
            "%(when)s: a message we show only on your page, because it holds contact details, "
            "a link or words about paying. Never pay outside dealbroker: your money is only "
            "safe in the deal."
        ) % {"when": message.when}
    words = message.body
    if len(words) > QUOTED_CHARS:
        words = words[:QUOTED_CHARS].rstrip() + "…"
    quoted = "\n".join("> " + line for line in words.split("\n"))
    return f"{message.when}:\n{quoted}"


def conversation_news(deal: str, said: list[Quoted], seller: bool, url: str | None) -> Text:
    """To the seller (``seller``) or a buyer: what the other party wrote since the last such
    e-mail, the first ``QUOTED_MESSAGES`` of it quoted as plain text (a message with a warning
    only named, since a mail client would make its link clickable), the rest left to the page."""
    values = {"deal": deal, "count": len(said)}
    shown, more = said[:QUOTED_MESSAGES], len(said) - QUOTED_MESSAGES
    who = (
        ngettext(
            "A buyer wrote to you about %(deal)s:",
            "A buyer wrote to you about %(deal)s (%(count)s messages):",
            len(said),
        )
        if seller
        else ngettext(
            "The seller wrote to you about %(deal)s:",
            "The seller wrote to you about %(deal)s (%(count)s messages):",
            len(said),
        )
    ) % values
    rest = (
        ngettext(
            "And %(count)s more message on your page.",
            "And %(count)s more messages on your page.",
            more,
        )
        % {"count": more}
        if more > 0
        else ""
    )
    return Text(
        ngettext("New message about %(deal)s", "New messages about %(deal)s", len(said)) % values,
        _body(
            who,
            *(_quote(m) for m in shown),
            rest,
            _("Answer on your page: a reply to this e-mail does not reach them."),
            _seller_page(url or "") if seller else _buyer_page(url),
        ),
    )


def waiting_answer(count: int, seller: bool) -> str:
    """A reminder's line about the conversations that wait for the reader's answer."""
    if seller:
        return ngettext(
            "A buyer waits for your answer to a message on your deal page.",
            "%(count)s buyers wait for your answer to their messages on your deal page.",
            count,
        ) % {"count": count}
    return _("The seller waits for your answer to a message on your offer page.")


def with_waiting(text: Text, count: int, seller: bool) -> Text:
    """``text`` (a reminder) with a line about unanswered messages, when some wait."""
    if count <= 0:
        return text
    return Text(text.subject, _body(waiting_answer(count, seller), text.body))


# --- the developer portal ---------------------------------------------------------------------


def portal_login_link(url: str, deadline: str) -> Text:
    """A one-time link to log in to the developer portal, asked for on its login page."""
    return Text(
        _("Your login link to the dealbroker developer portal"),
        _body(
            _("Someone asked to log in to the developer portal with this e-mail address."),
            _("Log in: %(url)s") % {"url": url},
            _("The link works once, until %(deadline)s.") % {"deadline": deadline},
            _("If it was not you, ignore this message: nothing happens without the link."),
        ),
    )


# --- a parcel dealbroker books at the carrier (``parcels``) -----------------------------------


def parcel_booked_seller(deal: str, carrier: str, qr: bool, deadline: str | None, url: str) -> Text:
    return Text(
        _("%(deal)s: your shipping label is ready") % {"deal": _first_up(deal)},
        _body(
            _(
                "We have booked the parcel with %(carrier)s. Print the label from your deal "
                "page and tape it to the parcel, then hand it in at a %(carrier)s counter or "
                "parcel locker."
            )
            % {"carrier": carrier},
            _("Instead of printing, you can show the QR code on your deal page at the counter.")
            if qr
            else "",
            _("Hand it in by %(deadline)s, or the buyer is refunded.") % {"deadline": deadline}
            if deadline
            else "",
            _seller_page(url),
        ),
    )


def parcel_booked_buyer(deal: str, carrier: str, tracking_url: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: the seller has booked the parcel") % {"deal": _first_up(deal)},
        _body(
            _(
                "The parcel is booked with %(carrier)s, and the seller now hands it in. You can "
                "follow it here: %(tracking)s"
            )
            % {"carrier": carrier, "tracking": tracking_url},
            _("Your money stays held until you have the item and approve it."),
            _buyer_page(url),
        ),
    )


def parcel_delayed(deal: str, carrier: str, deadline: str | None, url: str) -> Text:
    return Text(
        _("%(deal)s: your shipping label is delayed") % {"deal": _first_up(deal)},
        _body(
            _(
                "%(carrier)s is not answering right now, so your label is not ready yet. You do "
                "not need to do anything: we keep trying and e-mail you as soon as the label is "
                "ready."
            )
            % {"carrier": carrier},
            _("Your deadline to hand the parcel in stays %(deadline)s.") % {"deadline": deadline}
            if deadline
            else "",
            _seller_page(url),
        ),
    )


def parcel_refused(deal: str, carrier: str, reason: str, url: str) -> Text:
    return Text(
        _("%(deal)s: the parcel could not be booked") % {"deal": _first_up(deal)},
        _body(
            _("%(carrier)s could not book the parcel: %(reason)s")
            % {
                "carrier": carrier,
                "reason": reason,
            },
            _(
                "Choose another delivery option on your deal page and book again, or ask us "
                "for help. Nothing has been charged."
            ),
            _seller_page(url),
        ),
    )


def drop_off_reminder(deal: str, carrier: str, deadline: str | None, url: str) -> Text:
    return Text(
        _("%(deal)s: remember to hand in the parcel") % {"deal": _first_up(deal)},
        _body(
            _("%(carrier)s has not scanned the parcel yet.") % {"carrier": carrier},
            _(
                "Hand it in by %(deadline)s with the label or the QR code on your deal page; "
                "if it is not handed in by then, the buyer is refunded and the booking cancelled."
            )
            % {"deadline": deadline}
            if deadline
            else "",
            _seller_page(url),
        ),
    )


def parcel_damaged_buyer(deal: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: the carrier reports the parcel damaged") % {"deal": _first_up(deal)},
        _body(
            _(
                "Check the parcel and the item carefully when you get them. If the item is "
                "damaged, report it on your offer page with photos of the packaging and the "
                "item within 24 hours of its arrival; your money stays held until then."
            ),
            _buyer_page(url),
        ),
    )


def parcel_damaged_seller(deal: str, url: str) -> Text:
    return Text(
        _("%(deal)s: the carrier reports the parcel damaged") % {"deal": _first_up(deal)},
        _body(
            _(
                "The buyer may report damage with photos within 24 hours of the parcel's "
                "arrival; we then look into it with you both and the carrier."
            ),
            _seller_page(url),
        ),
    )


def return_label_buyer(deal: str, carrier: str, deadline: str | None, url: str | None) -> Text:
    return Text(
        _("%(deal)s: your return label is ready") % {"deal": _first_up(deal)},
        _body(
            _(
                "We have booked the return with %(carrier)s; you pay nothing for it. Print the "
                "label from your offer page, or show its QR code at the counter."
            )
            % {"carrier": carrier},
            _("Hand the parcel in by %(deadline)s.") % {"deadline": deadline} if deadline else "",
            _buyer_page(url),
        ),
    )


def lost_buyer(deal: str, carrier: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: the parcel is lost") % {"deal": _first_up(deal)},
        _body(
            _(
                "%(carrier)s has lost the parcel. We claim the loss from %(carrier)s and look "
                "into it with you both; your money stays held until we decide."
            )
            % {"carrier": carrier},
            _buyer_page(url),
        ),
    )


def lost_seller(deal: str, carrier: str, url: str) -> Text:
    return Text(
        _("%(deal)s: the parcel is lost") % {"deal": _first_up(deal)},
        _body(
            _(
                "%(carrier)s has lost the parcel. We claim the loss from %(carrier)s and look "
                "into it with you both; the money stays held until we decide."
            )
            % {"carrier": carrier},
            _seller_page(url),
        ),
    )


def parcel_ready_buyer(deal: str, carrier: str, point: str, url: str | None) -> Text:
    return Text(
        _("%(deal)s: your parcel is ready to be collected") % {"deal": _first_up(deal)},
        _body(
            _("%(carrier)s has the parcel ready for you at %(point)s.")
            % {"carrier": carrier, "point": point},
            _(
                "Collect it soon: a parcel not collected goes back to the seller, and you are "
                "refunded less the shipping. Once you have it, you have 24 hours to check it."
            ),
            _buyer_page(url),
        ),
    )
