"""The seller's page, behind the deal's signed link ``/d/<deal id>/<signature>``.

Routes parse the form, call the seller's entry point in ``parties`` and render; the
rules live there.
"""

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from dealbroker import parties
from dealbroker.conversations import service as conversations
from dealbroker.core import i18n
from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest, FieldError, NotFound
from dealbroker.core.i18n import N_, _
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle, shipments
from dealbroker.deals.actions import takes_offers
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.deals.next_step import Party, next_step, where_the_money_is
from dealbroker.evidence import service as evidence
from dealbroker.offers import service as offers
from dealbroker.payments import service as payments
from dealbroker.payments import swish_payouts
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
# The simulated carrier's buttons: ``create_app`` mounts this router only in the sandbox, and
# before ``router``, so this path wins over the generic seller action there and is a 404
# everywhere else.
sandbox_router = APIRouter(include_in_schema=False)
# An action gets the session, the locked deal, the form, the app's state (settings, links) and
# the page's locale (how the form's numbers are written).
SellerAction = Callable[[Any, Deal, FormData, Any, str], Awaitable[str | None]]


def _deal_id(request: Request, deal_id: str, signature: str) -> uuid.UUID | None:
    try:
        parsed = uuid.UUID(deal_id)
    except ValueError:
        return None
    return parsed if request.app.state.links.deal_signature_valid(parsed, signature) else None


async def _view(
    request: Request,
    session: Any,
    deal: Deal,
    error: str | None = None,
    status: int = 200,
    kept: Kept = NOTHING_KEPT,
) -> Response:
    settings = request.app.state.settings
    path = request.url.path.split("/-/")[0]
    payment = await payments.current(session, deal)
    if payment is not None and takes_offers(deal):
        payment = None  # every deal ends: the closed payment of an approval that lapsed
    account = await payments.payout_account_of(session, deal)
    pending = await parties.pending_account_change(session, deal)
    fixed = payment.escrowed if payment else payments.amounts(deal, settings)
    status_now = DealStatus(deal.status)
    refunded = status_now is DealStatus.REFUNDED or deal.payment_status == "Refunded"
    listed = await offers.offers_of(session, deal)
    changes = await parties.history(session, deal)
    form_ends(request, [offer.seller_redirect_url for offer in listed])  # approving one
    ship_it = await parties.shipping(session, deal, settings)
    talks = await parties.seller_talks(session, deal)
    context = {
        "deal": deal,
        "suspended": await parties.suspended(session, deal),
        "page": path,
        "csrf": request.app.state.links.form_token(path),
        "error": error,
        "history": changes,
        "offers": listed,
        "takes_offers": takes_offers(deal),
        "payment": payment,
        "amount": fixed.amount,
        "fee": fixed.fee,
        "shipping": fixed.shipping,
        "shipping_paid_by": settings.shipping_paid_by,
        "payout": fixed.payout,
        "refund": payment.refund_minor if payment else fixed.amount,
        "account": account,
        "pending_account": pending,
        # Payouts to a Swish number, where this deployment pays them and the deal is in SEK.
        "swish_payouts": payments.swish_offered(settings, deal.currency),
        "ssn_ending": swish_payouts.ssn_ending(settings, account.payee_ssn_sealed)
        if account
        else None,
        "payout_failure": swish_payouts.seller_reason(await payments.payout_failure(session, deal)),
        "package_types": parties.PACKAGE_TYPES,
        "can_cancel": lifecycle.transition_for(status_now, Trigger.CANCEL, Actor.SELLER)
        is not None,
        "sandbox": settings.is_sandbox,
        "mailbox": request.app.state.links.mailbox_url(deal.id, None)
        if settings.is_sandbox
        else None,
        "seller": deal.seller or {},
        "buyer_verified": (await parties.verified_names(session, deal)).get("Buyer"),
        "contacts": parties.contacts_shared(deal),
        "next": await next_step(session, deal, Party.SELLER, books_parcel=ship_it is not None),
        "money_at": where_the_money_is(
            deal, account.number[-4:] if account else None, Party.SELLER
        ),
        # Fee and payout follow the agreed price: none before an offer is approved.
        "agreed": payment is not None or deal.buyer_user_id is not None,
        # No payout ahead once the money went back to the buyer, or the deal ended unpaid.
        "refunded": refunded,
        "payout_ahead": not refunded and status_now is not DealStatus.CANCELLED,
        "signed": status_now not in (DealStatus.DRAFT, DealStatus.CANCELLED),
        "buyer": deal.buyer_contact or {},
        "code_attempts_left": parties.MAX_CODE_ATTEMPTS - deal.handover_attempts,
        "carrier_log": carrier_log(shipments.events_of(deal)),
        # The parcel we book at the deployment's carrier (None: the seller ships it themselves).
        "ship_it": ship_it,
        "qr": qr_code(ship_it.parcel if ship_it else None),
        "return_parcel": ship_it.return_parcel if ship_it else None,
        "simulated_events": [e.value for e in parties.SIMULATED_EVENTS]
        if settings.is_sandbox and settings.carrier == "simulated"
        else [],
        "typed": kept.typed,
        "invalid": kept.invalid,
        # Every deal ends: who opened the dispute, and its reason as this page reads it.
        "seller_opened_dispute": parties.seller_opened_dispute(changes),
        "dispute_reason": parties.reason_read(deal.dispute_reason),
        "evidence": await evidence_page.section(session, deal, evidence.Party.SELLER),
        # Disputes decided on evidence: a return then refund under way.
        "returning": await parties.dispute_return(session, deal),
        # The conversations with the buyers, and the offers' buyers the seller may write to
        # first (by offer link).
        "talks": talks,
        "unanswered": await parties.unanswered(session, deal),
        "write_first": await parties.seller_may_write_first(session, deal, talks),
        "message_max": settings.message_max_chars,
        "message_warning": conversation.warning,
    }
    return page(request, "seller.html", context, status)


@router.get("/d/{deal_id}/{signature}", response_class=HTMLResponse)
async def seller_page(deal_id: str, signature: str, request: Request, session: Session) -> Response:
    parsed = _deal_id(request, deal_id, signature)
    deal = None if parsed is None else await parties.shown(session, parsed)
    if deal is None:
        return not_found(request)
    return await _view(request, session, deal)


@router.post("/d/{deal_id}/{signature}/-/{action}", response_class=HTMLResponse)
async def seller_action(
    deal_id: str, signature: str, action: str, request: Request, session: Session
) -> Response:
    if action == "evidence-photo":
        return await _run(request, session, deal_id, signature, photo=True)
    if action in MESSAGE_ACTIONS:
        return await _message_action(request, session, deal_id, signature, action)
    if action not in ACTIONS:
        return not_found(request)
    return await _run(
        request,
        session,
        deal_id,
        signature,
        ACTIONS[action],
        CONFIRM.get(action),
        check=ASKED_AFTER.get(action),
    )


@router.get("/d/{deal_id}/{signature}/evidence/{photo}")
async def evidence_photo(
    deal_id: str, signature: str, photo: str, request: Request, session: Session
) -> Response:
    """One photo of this deal's dispute evidence (either party's), for the seller."""
    parsed = _deal_id(request, deal_id, signature)
    found = (
        None
        if parsed is None
        else await evidence_page.photo_response(session, parsed, photo, request.app.state.settings)
    )
    return found if found is not None else not_found(request)


@router.get("/d/{deal_id}/{signature}/parcels/{parcel_id}/label.pdf")
async def parcel_label(
    deal_id: str, signature: str, parcel_id: str, request: Request, session: Session
) -> Response:
    """The label of this deal's parcel, to print; another deal's parcel is 404."""
    parsed = _deal_id(request, deal_id, signature)
    deal = None if parsed is None else await parties.shown(session, parsed)
    try:
        wanted = uuid.UUID(parcel_id)
        if deal is None:
            raise NotFound("No such deal.")
        parcel = await parties.parcel_label(session, deal, wanted)
    except (ValueError, NotFound):
        return not_found(request)
    return label_pdf(parcel)


@sandbox_router.post("/d/{deal_id}/{signature}/-/carrier", response_class=HTMLResponse)
async def carrier_action(
    deal_id: str, signature: str, request: Request, session: Session
) -> Response:
    """The sandbox's simulated carrier: an event of the booked parcel, or (where the marketplace
    ships) delivered or returned."""
    return await _run(request, session, deal_id, signature, _carrier)


@router.get("/d/{deal_id}/{signature}/payout-account/{token}", response_class=HTMLResponse)
async def confirm_account_page(
    deal_id: str, signature: str, token: str, request: Request, session: Session
) -> Response:
    """The link we e-mailed the seller: asks them to confirm the new payout account."""
    parsed = _deal_id(request, deal_id, signature)
    deal = None if parsed is None else await parties.shown(session, parsed)
    if deal is None:
        return not_found(request)
    change = await parties.change_to_confirm(session, deal, token)
    path = request.url.path
    context = {
        "deal": deal,
        "change": change,
        "page": path,
        "back": f"/d/{deal_id}/{signature}",
        "csrf": request.app.state.links.form_token(path),
        "error": None,
    }
    return page(request, "confirm_account.html", context)


@router.post("/d/{deal_id}/{signature}/payout-account/{token}", response_class=HTMLResponse)
async def confirm_account(
    deal_id: str, signature: str, token: str, request: Request, session: Session
) -> Response:
    parsed = _deal_id(request, deal_id, signature)
    shown = None if parsed is None else await parties.shown(session, parsed)
    if parsed is None or shown is None:
        return not_found(request)
    back = f"/d/{deal_id}/{signature}"

    async def render(message: str | None, status: int, kept: Kept) -> Response:
        return await _view(request, session, shown, message, status, kept)

    async def run(form: FormData) -> str:
        settings = request.app.state.settings
        flow = await parties.confirm_payout_account(session, parsed, token, settings)
        if flow is None:
            return "account-changed"
        return eid_pages.start_url(settings.base_url, flow, back)  # the same eID first

    response = await act(request, session, request.url.path, run, render)
    eid_start = f"{request.app.state.settings.base_url}/eid/"
    if response.status_code == 303 and not response.headers["location"].startswith(eid_start):
        # Back to the deal's page, not the confirmation link.
        done = response.headers["location"].rsplit("done=", 1)[-1]
        return RedirectResponse(f"{back}?done={done}", status_code=303)
    return response


async def _run(
    request: Request,
    session: Any,
    deal_id: str,
    signature: str,
    action: SellerAction | None = None,
    confirmation: Confirmation | None = None,
    check: Callable[[FormData], object] | None = None,
    photo: bool = False,
) -> Response:
    """Run ``action`` on the seller's deal, locked at the page's version; a forged link is 404.
    ``check`` refuses a bad input before ``confirmation`` asks, so the seller is not asked
    "are you sure?" about a report that is then refused. A ``photo`` upload (no ``action``) is
    checked before its body is read, decoded before the deal is locked, and kept under the
    lock (``evidence_page.PhotoUpload``)."""
    parsed = _deal_id(request, deal_id, signature)
    shown = None if parsed is None else await parties.shown(session, parsed)
    if parsed is None or shown is None:
        return not_found(request)
    upload = evidence_page.PhotoUpload(request, session, evidence.Party.SELLER) if photo else None

    async def render(message: str | None, status: int, kept: Kept) -> Response:
        fresh = await parties.shown(session, parsed)
        return await _view(request, session, fresh or shown, message, status, kept)

    async def run(form: FormData) -> str | None:
        deal = await parties.locked(session, parsed, form.get("version"))  # type: ignore[arg-type]
        if confirmation is not None:  # the page that asks again may end on a redirect URL
            listed = await offers.offers_of(session, deal)
            form_ends(request, [offer.seller_redirect_url for offer in listed])
        if check is not None:
            check(form)
        confirmed(form, confirmation)
        locale = i18n.current()  # the page's (PageLocaleMiddleware)
        parties.seller_reads(deal, locale)
        if upload is not None:
            await upload.add(deal)
            return "evidence-photo"
        assert action is not None
        return await action(session, deal, form, request.app.state, locale)

    async def admit() -> None:
        assert upload is not None
        assert shown is not None
        await upload.admit(shown)

    async def prepare(form: FormData) -> None:
        assert upload is not None
        assert shown is not None
        await upload.prepare(shown, form)

    return await act(
        request,
        session,
        f"/d/{deal_id}/{signature}",
        run,
        render,
        confirmation,
        admit=admit if upload else None,
        prepare=prepare if upload else None,
    )


async def _message_action(
    request: Request, session: Any, deal_id: str, signature: str, action: str
) -> Response:
    """Write to a buyer or report a buyer's message: the CSRF token and the deal's suspension
    are checked, not the page's version (a message is no deal action: another buyer's offer
    since the page was shown must not throw away what was typed); a refusal keeps what was
    typed. The conversation is named by its offer link, which must be one of this deal's."""
    parsed = _deal_id(request, deal_id, signature)
    shown = None if parsed is None else await parties.shown(session, parsed)
    if parsed is None or shown is None:
        return not_found(request)
    settings = request.app.state.settings

    async def render(message: str | None, status: int, kept: Kept) -> Response:
        fresh = await parties.shown(session, parsed)
        return await _view(request, session, fresh or shown, message, status, kept)

    async def run(form: FormData) -> str:
        deal = await parties.messaging(session, parsed)
        parties.seller_reads(deal, i18n.current())
        if action == "message":
            link_id = uuid_of(form, "offerLink")
            text = str(form.get("message", ""))
            await parties.seller_writes(session, deal, link_id, text, settings)
            return f"message-sent#conversation-{link_id}"
        reason = field(form, "reason", conversations.MAX_REPORT_REASON)
        message = await parties.seller_reports_message(
            session, deal, uuid_of(form, "messageId"), reason
        )
        return f"message-reported#message-{message.id}"

    return await act(request, session, f"/d/{deal_id}/{signature}", run, render, keeps_typed=True)


async def _details(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    details = parties.Details(
        name=field(form, "name"),
        description=field(form, "description", 5000),
        price_minor=price(form, locale),
        package_type=field(form, "packageType", 10),
        seller={
            k: field(form, k)
            for k in ("firstname", "lastname", "phone", "email", "address", "postcode", "town")
        },
    )
    await parties.complete_details(session, deal, details)
    return "details"


async def _sign(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    consent = checked(form, "consent")
    flow = await parties.seller_signs(
        session, deal, field(form, "full_name"), consent, app.settings
    )
    if flow is None:
        return "signed"
    own_page = app.links.deal_url(deal.id).removeprefix(app.settings.base_url)
    return eid_pages.start_url(app.settings.base_url, flow, own_page)


def _offer_id(form: FormData) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(form.get("offer")))
    except ValueError:
        return None


async def _approve(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    offer = await parties.decide_offer(session, deal, _offer_id(form), True, app.settings)
    return offer.seller_redirect_url or "approved"


async def _deny(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    await parties.decide_offer(session, deal, _offer_id(form), False, app.settings)
    return "denied"


async def _cancel(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    await parties.seller_fires(session, deal, Trigger.CANCEL, app.settings)
    return "cancelled"


async def _handover(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    carrier, tracking = field(form, "carrier", 100), field(form, "tracking", 100)
    await parties.hand_to_carrier(session, deal, carrier, tracking, app.settings)
    return "handed"


async def _pickup(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    confirmed = await parties.confirm_pickup(session, deal, field(form, "code", 20), app.settings)
    return "picked-up" if confirmed else "code-wrong"


def _problem_fields(form: FormData) -> tuple[str | None, str | None]:
    return field(form, "problem", 20), field(form, "reason", 2000)


async def _problem(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    kind, text = _problem_fields(form)
    await parties.seller_reports_problem(session, deal, kind, text, app.settings)
    return "problem-reported"


async def _return_received(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    await parties.seller_has_return(session, deal, app.settings)
    return "return-received"


async def _account(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    if field(form, "payout_kind", 10) == "swish":  # a Swish number, where Swish pays out
        holder = field(form, "swish_holder")
        if not holder:
            raise FieldError("swish_holder", _("Give the name of the Swish number's owner."))
        number = field(form, "swish", 40)
        swish = payments.SwishPayee(field(form, "ssn", 20) or "", app.settings)
        request = await parties.register_payout_account(session, deal, holder, number, swish)
        return "account" if request.outcome == "saved" else "account-confirm"
    holder, number = field(form, "holder"), field(form, "account", 40)
    request = await parties.register_payout_account(session, deal, holder, number)
    return "account" if request.outcome == "saved" else "account-confirm"


async def _book(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    await parties.book_parcel(session, deal, field(form, "delivery", 20), app.settings)
    return "booking"


async def _carrier(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    if "event" in form:  # the simulated carrier's event for the parcel we booked
        await parties.simulate_parcel(session, deal, field(form, "event", 20), app.settings)
        return "parcel-event"
    outcome = str(form.get("outcome"))
    if outcome not in ("delivered", "returned"):
        raise BadRequest(_("Unknown carrier event."))
    await parties.carrier_reports(session, deal, outcome == "delivered", app.settings)
    return outcome


async def _statement(session: Any, deal: Deal, form: FormData, app: Any, locale: str) -> str:
    text = field(form, "statement", evidence.MAX_STATEMENT_CHARS)
    await evidence.add_statement(session, deal, evidence.Party.SELLER, text)
    return "evidence-statement"


# The seller's actions that cannot be undone are asked again before they are taken.
CONFIRM = {
    "approve": Confirmation(
        N_(
            "Approve this offer? Its price and delivery become the deal's and cannot change "
            "any more, and every other offer is declined."
        ),
        N_("Yes, approve the offer"),
    ),
    "cancel": Confirmation(
        N_("Cancel the deal? Offers are declined and the deal cannot be taken up again."),
        N_("Yes, cancel the deal"),
    ),
    # Every deal ends.
    "problem": Confirmation(
        N_(
            "Report a problem with the handover? The deal goes to us to decide: the money stays "
            "held, and you can no longer confirm the handover with the code."
        ),
        N_("Report the problem"),
    ),
    # Disputes decided on evidence.
    "return-received": Confirmation(
        N_(
            "Confirm that the item the buyer sent back has come? The buyer is then refunded in "
            "full, and the deal ends."
        ),
        N_("Yes, I have it back"),
    ),
}
# The inputs checked before the confirmation asks (the action checks them again).
ASKED_AFTER: dict[str, Callable[[FormData], object]] = {
    "problem": lambda form: parties.pickup_problem_reason(*_problem_fields(form)),
}
# Writing to a buyer and reporting a buyer's message: no deal action (``_message_action``).
MESSAGE_ACTIONS = ("message", "report-message")
ACTIONS: dict[str, SellerAction] = {
    "details": _details,
    "sign": _sign,
    "approve": _approve,
    "deny": _deny,
    "cancel": _cancel,
    "handover": _handover,
    "book": _book,  # a parcel booked at the deployment's carrier
    "pickup": _pickup,
    "account": _account,
    "problem": _problem,  # every deal ends
    "evidence": _statement,
    "return-received": _return_received,  # disputes decided on evidence
}
