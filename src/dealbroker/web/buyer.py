"""The buyer's page, behind the offer link ``/o/<token>?offer=<reference>``.

Routes parse the form, call the buyer's entry point in ``parties`` and render; the rules
live there.
"""

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from dealbroker import parties
from dealbroker.conversations import service as conversations
from dealbroker.core import clock, i18n, money
from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest, FieldError, NotFound
from dealbroker.core.i18n import N_, _
from dealbroker.deals import shipments
from dealbroker.deals.actions import takes_offers
from dealbroker.deals.lifecycle import Trigger
from dealbroker.deals.models import Deal
from dealbroker.deals.next_step import Party, next_step, where_the_money_is
from dealbroker.evidence import service as evidence
from dealbroker.offers import service as offers
from dealbroker.offers.models import OfferLink, OfferStatus
from dealbroker.payments import methods
from dealbroker.payments import service as payments
from dealbroker.web import conversation
from dealbroker.web import eid as eid_pages
from dealbroker.web import evidence as evidence_page
from dealbroker.web.forms import (
    NOTHING_KEPT,
    Confirmation,
    Kept,
    act,
    checked,
    confirmed,
    field,
    price,
    uuid_of,
)
from dealbroker.web.render import carrier_log, form_ends, label_pdf, not_found, page, qr_code

router = APIRouter(include_in_schema=False)
# An action gets the session, the link, the locked deal, the form, the settings, the page's
# path and its locale (how the form's numbers are written).
BuyerAction = Callable[[Any, OfferLink, Deal, FormData, Any, str, str], Awaitable[str]]


async def _view(
    request: Request,
    session: Any,
    link: OfferLink,
    deal: Deal,
    error: str | None = None,
    status: int = 200,
    kept: Kept = NOTHING_KEPT,
) -> Response:
    path = request.url.path.split("/-/")[0]
    mine = await offers.offers_from_link(session, link)
    latest = mine[0] if mine else None
    approved = await parties.is_winner(session, link, deal)
    payment = await payments.current(session, deal) if approved else None
    suspended = await parties.suspended(session, deal)
    settings = request.app.state.settings
    not_received_from = (
        await parties.not_received_from(session, deal, settings) if approved else None
    )
    can_offer = (
        takes_offers(deal)
        and not suspended
        and (
            latest is None
            or latest.status in (OfferStatus.DENIED, OfferStatus.WITHDRAWN, OfferStatus.LAPSED)
        )
    )
    # What the buyer pays and the seller is paid: fixed on the payment once there is one.
    fixed = payment.escrowed if payment else payments.amounts(deal, settings)
    news = carrier_log(shipments.events_of(deal)) if approved else []
    return_parcel = await parties.return_parcel(session, link, deal) if approved else None
    context = {
        "deal": deal,
        "suspended": suspended,
        "link": link,
        "page": path,
        "query": f"?offer={link.id}",
        "csrf": request.app.state.links.form_token(path),
        "error": error,
        "offer": latest,
        "approved": approved,
        "can_offer": can_offer,
        # The Carrier option's price before offering (None: no carrier, as before).
        "carrier_shipping": await parties.carrier_shipping(settings, deal) if can_offer else None,
        "fixed": fixed,
        "shipping_paid_by": settings.shipping_paid_by,
        "payment": payment,
        # The ways to pay, in the deployment's order: one button each on the Signed page.
        "pay_methods": [m.value for m in methods.offered(settings)],
        "contacts": approved and parties.contacts_shared(deal),
        "money_at": where_the_money_is(deal, None, Party.BUYER) if approved else None,
        "next": await next_step(
            session,
            deal,
            Party.BUYER,
            approved_buyer=approved or deal.buyer_user_id is None,
            books_parcel=parties.books_parcel(deal, request.app.state.settings),
        ),
        "seller": deal.seller or {},
        # Shown before paying: who the seller is, as their eID signature verified it.
        "seller_verified": (await parties.verified_names(session, deal)).get("Seller"),
        # Photos over https only: the page's policy loads no image from a plain-http address.
        "images": [url for url in deal.images or [] if url.startswith("https://")],
        # The buyer's own mailbox, at the email of their latest offer: none before an offer.
        "mailbox": request.app.state.links.mailbox_url(deal.id, latest.id)
        if settings.is_sandbox and latest is not None
        else None,
        "not_received_from": not_received_from,
        "carrier_log": news,
        # Where the parcel waits for the buyer (the carrier's latest word on it).
        "pickup_point": next((n.pickup_point for n in reversed(news) if n.pickup_point), None),
        # The carrier reported damage: the buyer's 24 hours after arrival to report it.
        "damaged_window": any(n.type == "damaged" for n in news)
        and deal.status in DAMAGE_REPORTABLE,
        # A return then refund's parcel we booked (and pay for): the buyer's label.
        "return_parcel": return_parcel,
        "return_qr": qr_code(return_parcel),
        "not_received_open": not_received_from is not None and not_received_from <= clock.now(),
        "typed": kept.typed,
        "invalid": kept.invalid,
        # Every deal ends: who opened the dispute, and its reason as this page reads it.
        "seller_opened_dispute": parties.seller_opened_dispute(
            await parties.history(session, deal)
        ),
        "dispute_reason": parties.reason_read(deal.dispute_reason),
        # The approved buyer's side of a dispute; other offerers see none of it.
        "evidence": await evidence_page.section(session, deal, evidence.Party.BUYER)
        if approved
        else None,
        # Disputes decided on evidence: a return then refund under way.
        "returning": await parties.dispute_return(session, deal) if approved else None,
        # The conversation with the seller.
        "talk": await parties.buyer_talk(session, link, deal),
        "message_max": settings.message_max_chars,
        "message_warning": conversation.warning,
    }
    form_ends(request, [link.buyer_redirect_url])  # where an offer sent from it ends
    return page(request, "buyer.html", context, status)


@router.get("/o/{token}", response_class=HTMLResponse)
async def offer_page(token: str, request: Request, session: Session) -> Response:
    found = await offers.resolve(session, token, request.query_params.get("offer"))
    if found is None:
        return not_found(request)
    link, deal = found
    return await _view(request, session, link, deal)


@router.post("/o/{token}/-/{action}", response_class=HTMLResponse)
async def buyer_action(token: str, action: str, request: Request, session: Session) -> Response:
    found = await offers.resolve(session, token, None)
    if found is None or (
        action not in ACTIONS and action not in MESSAGE_ACTIONS and action != "evidence-photo"
    ):
        return not_found(request)
    link, shown = found
    if action in MESSAGE_ACTIONS:
        return _back_to_page(
            link, f"/o/{token}", await _message_action(request, session, token, action, link, shown)
        )
    settings = request.app.state.settings
    path = f"/o/{token}"
    # A photo is checked before its body is read (the approved buyer's only), and decoded
    # before the deal is locked.
    upload = (
        evidence_page.PhotoUpload(request, session, evidence.Party.BUYER)
        if action == "evidence-photo"
        else None
    )

    async def render(message: str | None, status: int, kept: Kept) -> Response:
        fresh = await parties.shown(session, link.deal_id)
        return await _view(request, session, link, fresh or shown, message, status, kept)

    async def run(form: FormData) -> str | None:
        deal = await parties.locked(session, link.deal_id, form.get("version"))  # type: ignore[arg-type]
        form_ends(request, [link.buyer_redirect_url])  # the page that asks again, if any
        confirmed(form, CONFIRM.get(action))
        locale = i18n.current()  # the page's (PageLocaleMiddleware)
        await parties.buyer_reads(session, link, locale)
        if upload is not None:
            await _approved(session, link, deal)
            await upload.add(deal)
            return "evidence-photo"
        return await ACTIONS[action](session, link, deal, form, settings, path, locale)

    async def admit() -> None:
        assert upload is not None
        await upload.admit(shown, lambda: _approved(session, link, shown))

    async def prepare(form: FormData) -> None:
        assert upload is not None
        await upload.prepare(shown, form)

    response = await act(
        request,
        session,
        path,
        run,
        render,
        CONFIRM.get(action),
        admit=admit if upload else None,
        prepare=prepare if upload else None,
    )
    return _back_to_page(link, path, response)


async def _message_action(
    request: Request, session: Any, token: str, action: str, link: OfferLink, shown: Deal
) -> Response:
    """Write or report a message: the CSRF token and the deal's suspension are checked, not
    the page's version (a message is no deal action: an offer or a status change since the
    page was shown must not throw away what was typed); a refusal keeps what was typed."""
    settings = request.app.state.settings

    async def render(message: str | None, status: int, kept: Kept) -> Response:
        fresh = await parties.shown(session, link.deal_id)
        return await _view(request, session, link, fresh or shown, message, status, kept)

    async def run(form: FormData) -> str:
        deal = await parties.messaging(session, link.deal_id)
        await parties.buyer_reads(session, link, i18n.current())
        if action == "message":
            text = str(form.get("message", ""))
            await parties.buyer_writes(session, link, deal, text, settings, i18n.current())
            return "message-sent#conversation"
        reason = field(form, "reason", conversations.MAX_REPORT_REASON)
        message = await parties.buyer_reports_message(
            session, link, deal, uuid_of(form, "messageId"), reason
        )
        return f"message-reported#message-{message.id}"

    return await act(request, session, f"/o/{token}", run, render, keeps_typed=True)


def _back_to_page(link: OfferLink, path: str, response: Response) -> Response:
    """``response``, its redirect back to the page keeping the offer reference."""
    if isinstance(response, RedirectResponse) and response.headers["location"].startswith(path):
        # Keep the offer reference on the way back to the page.
        location = (
            response.headers["location"]
            .replace(path, f"{path}?offer={link.id}&", 1)
            .replace("&?", "&")
        )
        return RedirectResponse(location, status_code=303)
    return response


async def _offer(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, path: str, locale: str
) -> str:
    data = parties.OfferInput(
        price_minor=price(form, locale),
        shipping_type=str(form.get("shippingType", "")),
        buyer_name=field(form, "name"),
        buyer_email=field(form, "email", 254),
    )
    # The amount as we read it, before anything is sent: "1.500" must not become 1,50 unseen.
    price_minor, _email = parties.check_offer(deal, data)
    shipping = await parties.offer_shipping(settings, deal, data.shipping_type)
    amount = money.to_text(price_minor, deal.currency, locale)
    values = {"amount": amount, "delivery": _(DELIVERY[data.shipping_type])}
    question = N_("You offer %(amount)s, %(delivery)s. Send the offer?")
    if shipping is not None and shipping.price_minor is not None:
        values["shipping"] = money.to_text(shipping.price_minor, deal.currency, locale)
        values["total"] = money.to_text(shipping.total(price_minor), deal.currency, locale)
        question = (
            N_(
                "You offer %(amount)s, %(delivery)s for %(shipping)s more: you pay %(total)s in "
                "all. Send the offer?"
            )
            if shipping.paid_by == "buyer"
            else N_(
                "You offer %(amount)s, %(delivery)s (the seller pays the shipping of "
                "%(shipping)s). Send the offer?"
            )
        )
    confirmed(form, Confirmation(question, N_("Yes, send the offer"), values=values))
    await parties.send_offer(session, link, deal, data, locale, shipping)
    return link.buyer_redirect_url or "offer"


# Where a parcel the carrier reported damaged can still be reported by the buyer.
DAMAGE_REPORTABLE = ("Shipping_Pending", "Shipping_In_Progress", "Shipping_Arrived")
# How the confirmation names the delivery the buyer chose.
DELIVERY = {"Carrier": N_("sent with a carrier"), "Pickup": N_("with pickup")}


async def _withdraw(
    session: Any,
    link: OfferLink,
    deal: Deal,
    form: FormData,
    settings: Any,
    path: str,
    locale: str,
) -> str:
    await parties.withdraw_offer(session, link, deal)
    return "withdrawn"


async def _sign(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, path: str, locale: str
) -> str:
    consent = checked(form, "consent")
    contact = parties.Contact(
        phone=field(form, "phone", 40),
        address=field(form, "address"),
        postcode=field(form, "postcode", 20),
        town=field(form, "town"),
    )
    name = field(form, "full_name")
    flow = await parties.buyer_signs(session, link, deal, name, consent, contact, settings)
    if flow is None:
        return "signed"
    return eid_pages.start_url(settings.base_url, flow, f"{path}?offer={link.id}")


async def _pay(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, path: str, locale: str
) -> str:
    method = methods.chosen(settings, field(form, "method"))
    if method is None:
        raise FieldError("method", _("Choose one of the ways to pay shown on the page."))
    return await parties.start_payment(
        session, link, deal, f"{path}?offer={link.id}", settings, method
    )


def _step(trigger: Trigger, outcome: str) -> BuyerAction:
    async def step(
        session: Any,
        link: OfferLink,
        deal: Deal,
        form: FormData,
        settings: Any,
        path: str,
        locale: str,
    ) -> str:
        await parties.buyer_fires(session, link, deal, trigger, settings)
        return outcome

    return step


async def _dispute(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, path: str, locale: str
) -> str:
    await parties.buyer_disputes(session, link, deal, field(form, "reason", 2000), settings)
    return "item-denied"


async def _not_received(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, path: str, locale: str
) -> str:
    await parties.buyer_not_received(session, link, deal, settings)
    return "not-received"


@router.get("/o/{token}/parcels/{parcel_id}/label.pdf")
async def return_label(token: str, parcel_id: str, request: Request, session: Session) -> Response:
    """The return label we booked for the approved buyer; anything else is 404."""
    found = await offers.resolve(session, token, None)
    try:
        wanted = uuid.UUID(parcel_id)
        if found is None:
            raise NotFound("No such offer link.")
        parcel = await parties.return_label(session, found[0], found[1], wanted)
    except (ValueError, NotFound):
        return not_found(request)
    return label_pdf(parcel)


@router.get("/o/{token}/evidence/{photo}")
async def evidence_photo(token: str, photo: str, request: Request, session: Session) -> Response:
    """One photo of this deal's dispute evidence (either party's), for the approved buyer."""
    found = await offers.resolve(session, token, None)
    if found is None or not await parties.is_winner(session, found[0], found[1]):
        return not_found(request)
    settings = request.app.state.settings
    served = await evidence_page.photo_response(session, found[1].id, photo, settings)
    return served if served is not None else not_found(request)


async def _approved(session: Any, link: OfferLink, deal: Deal) -> None:
    if not await parties.is_winner(session, link, deal):
        raise BadRequest(_("Only the buyer whose offer was approved can do this."))


async def _statement(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, path: str, locale: str
) -> str:
    await _approved(session, link, deal)
    text = field(form, "statement", evidence.MAX_STATEMENT_CHARS)
    await evidence.add_statement(session, deal, evidence.Party.BUYER, text)
    return "evidence-statement"


async def _return_sent(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, path: str, locale: str
) -> str:
    carrier, tracking = field(form, "carrier", 100), field(form, "tracking", 100)
    await parties.buyer_returns(session, link, deal, carrier, tracking, settings)
    return "return-sent"


# The buyer's actions that cannot be undone are asked again before they are taken.
CONFIRM = {
    "approve": Confirmation(
        N_(
            "Approve the item? The money held for it is then paid to the seller; you cannot "
            "undo this."
        ),
        N_("Yes, the item is as agreed"),
    ),
    "deny": Confirmation(
        N_(
            "Report a problem with the item? The money stays held while we look into it with "
            "you and the seller, and then either refund you or pay the seller."
        ),
        N_("Report the problem"),
        field="reason",
        field_label=N_("What is wrong with the item?"),
    ),
    "withdraw": Confirmation(
        N_("Withdraw your offer? The seller can no longer approve it; you can make a new offer."),
        N_("Yes, withdraw the offer"),
    ),
    "not-received": Confirmation(
        N_(
            "Report that the parcel has not arrived? The money stays held while we look into it "
            "with you, the seller and the carrier, and then either refund you or pay the seller."
        ),
        N_("Yes, it has not arrived"),
    ),
}
# Writing and reporting messages: no deal action (``_message_action``).
MESSAGE_ACTIONS = ("message", "report-message")
ACTIONS: dict[str, BuyerAction] = {
    "offer": _offer,
    "withdraw": _withdraw,
    "sign": _sign,
    "pay": _pay,
    "arrived": _step(Trigger.CARRIER_DELIVERED, "arrived"),
    "approve": _step(Trigger.BUYER_APPROVED, "item-approved"),
    "deny": _dispute,
    "not-received": _not_received,
    "evidence": _statement,
    "return-sent": _return_sent,  # disputes decided on evidence
}
