"""The seller's and the buyer's pages, behind the capability links the API hands out.

Plain HTML forms, no JavaScript needed. Every form carries a CSRF token (an HMAC of the page's
capability path) and the deal's version: a post from a stale page, a second tab or a double
click finds another version and changes nothing, with a clear message. Each action runs in a
savepoint, so a refused action leaves no trace. Every change goes through the same services and
lifecycle flows as the API.
"""

import uuid
from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.templating import Jinja2Templates
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from dealbroker.core import money
from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest, DomainError
from dealbroker.core.validation import holds_nul
from dealbroker.deals import flows, lifecycle
from dealbroker.deals import repository as deal_rows
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import Actor, DealStatus, Trigger
from dealbroker.deals.models import Deal
from dealbroker.notifications import service as notifications
from dealbroker.offers import service as offers
from dealbroker.offers.models import OfferLink, OfferStatus
from dealbroker.payments import service as payments
from dealbroker.payments.provider import provider_for
from dealbroker.signatures.service import SignatureStatus, SignatureType, record

router = APIRouter(include_in_schema=False)
# The simulated payment provider's checkout, the simulated carrier and the mailbox: ``create_app``
# mounts this router only in the sandbox, so elsewhere their paths are plain 404s.
sandbox_router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
LABELS = {
    "PaidOut": "Paid out",
    "PendingPayOut": "Payout pending",
    "PaymentFailed": "Payment failed",
    "PaymentCancelled": "Payment cancelled",
    "PayoutFailed": "Payout failed",
    "PayoutCancelled": "Payout cancelled",
    "Ad": "Published",
    "Shipping_Review_Denied": "In dispute",
    "Pickup_Denied": "In dispute",
}
# Statuses read as words on the pages; the raw name stays in a data attribute.
templates.env.filters["label"] = lambda status: LABELS.get(
    status, str(status).replace("_", " ").capitalize()
)
# Capability pages must not leak their URL to other sites or be cached by intermediaries.
PRIVATE = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Robots-Tag": "noindex"}
DONE = {
    "details": "Your changes are saved.",
    "signed": "You signed the deal.",
    "approved": "You approved the offer; the buyer can now sign and pay.",
    "denied": "You declined the offer.",
    "cancelled": "The deal is cancelled.",
    "handed": "Marked as handed to the carrier.",
    "delivered": "The carrier delivered the item.",
    "returned": "The carrier returned the item.",
    "account": "Your payout account is saved.",
    "offer": "Your offer is sent. The seller will answer here.",
    "arrived": "Thank you: the item has arrived. Please check it and approve it.",
    "item-approved": "You approved the item. The seller is paid.",
    "item-denied": "You reported a problem. We will look into it and contact you both.",
    "paid": "Payment received. Thank you.",
    "payment-failed": "The payment did not go through. You can try again.",
    "payment-cancelled": "The payment was cancelled. You can try again.",
}
PACKAGE_TYPES = ("Small", "Medium", "Large", "XL")


def _money(minor: int | None, currency: str) -> str:
    return "—" if minor is None else f"{money.to_string(minor)} {currency}"


def _page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    done = request.query_params.get("done")
    context = {"done": DONE.get(done or ""), "money": _money, **context}
    return templates.TemplateResponse(
        request, template, context, status_code=status, headers=PRIVATE
    )


def _not_found(request: Request) -> Response:
    return templates.TemplateResponse(
        request, "not_found.html", {}, status_code=404, headers=PRIVATE
    )


async def _form(request: Request, page: str) -> FormData:
    """The posted form, its CSRF token checked; a bad token is refused before anything else.

    Every action reads its fields from here, so this is where a NUL character (which the
    database cannot store) is refused, whichever field it came in."""
    form = await request.form()
    if not request.app.state.links.form_token_valid(page, str(form.get("csrf", ""))):
        raise BadRequest(
            "This form has expired or did not come from this page. Reload and try again."
        )
    if any(holds_nul(name, str(value)) for name, value in form.multi_items()):
        raise BadRequest(
            "The form holds a character that cannot be saved (a NUL character, U+0000). "
            "Nothing was changed; remove it and try again."
        )
    return form


def _field(form: FormData, name: str, max_length: int = 200) -> str | None:
    value = str(form.get(name, "")).strip()
    if len(value) > max_length:
        raise BadRequest(f"{name} is too long (at most {max_length} characters).")
    return value or None


def _price(form: FormData, name: str = "price") -> int | None:
    raw = _field(form, name, 20)
    if raw is None:
        return None
    try:
        return money.to_minor(Decimal(raw.replace(",", ".")))
    except (ArithmeticError, ValueError) as exc:  # InvalidOperation is an ArithmeticError
        raise BadRequest(f"The price {raw!r} is not a valid amount: {exc}") from exc


async def _act(
    request: Request,
    session: Any,
    deal: Deal,
    page: str,
    action: Callable[[FormData], Awaitable[str | None]],
    render: Callable[[str, int], Awaitable[Response]],
    back: str | None = None,
) -> Response:
    """Run one form action on ``deal`` (row locked): CSRF, then the version the page was made
    from, then the action in a savepoint. Success redirects (303) back with a message, or to
    the redirect URL the action returns; a refusal re-renders the page with the reason."""
    try:
        form = await _form(request, page)
        if str(form.get("version")) != str(deal.version):
            return await render(
                "This page was out of date (the deal changed since it was shown, or the form "
                "was sent twice). Nothing was changed; here is the current state.",
                409,
            )
        async with session.begin_nested():
            outcome = await action(form)
    except DomainError as exc:
        return await render(exc.detail, exc.status)
    if outcome and outcome.startswith(("http://", "https://")):
        return RedirectResponse(outcome, status_code=303)
    back = back or page
    return RedirectResponse(
        f"{back}{'&' if '?' in back else '?'}done={outcome or ''}", status_code=303
    )


# --- the seller's page ----------------------------------------------------------------------


async def _seller_deal(request: Request, session: Any, deal_id: str, signature: str) -> Deal | None:
    try:
        parsed = uuid.UUID(deal_id)
    except ValueError:
        return None
    if not request.app.state.links.deal_signature_valid(parsed, signature):
        return None
    return (
        await deal_rows.by_id_for_update(session, parsed)
        if request.method == "POST"
        else await deal_rows.by_id(session, parsed)
    )


async def _seller_view(
    request: Request, session: Any, deal: Deal, error: str | None = None, status: int = 200
) -> Response:
    settings = request.app.state.settings
    page = request.url.path.split("/-/")[0]
    payment = await payments.current(session, deal)
    account = None
    if deal.seller_user_id is not None:
        account = await payments.payout_account_of(session, deal.seller_user_id)
    amount, fee = (
        (payment.amount_minor, payment.fee_minor) if payment else payments.amounts(deal, settings)
    )
    status_now = DealStatus(deal.status)
    context = {
        "deal": deal,
        "page": page,
        "csrf": request.app.state.links.form_token(page),
        "error": error,
        "history": await deal_rows.history(session, deal.id),
        "offers": await offers.offers_of(session, deal),
        "takes_offers": offers.takes_offers(deal),
        "payment": payment,
        "amount": amount,
        "fee": fee,
        "account": account,
        "package_types": PACKAGE_TYPES,
        "can_cancel": lifecycle.transition_for(status_now, Trigger.CANCEL, Actor.SELLER)
        is not None,
        "sandbox": settings.is_sandbox,
        "mailbox": request.app.state.links.mailbox_url(deal.id) if settings.is_sandbox else None,
        "seller": deal.seller or {},
    }
    return _page(request, "seller.html", context, status)


@router.get("/d/{deal_id}/{signature}", response_class=HTMLResponse)
async def seller_page(deal_id: str, signature: str, request: Request, session: Session) -> Response:
    deal = await _seller_deal(request, session, deal_id, signature)
    if deal is None:
        return _not_found(request)
    return await _seller_view(request, session, deal)


SellerAction = Callable[[Any, Deal, FormData, Any], Awaitable[str]]


@router.post("/d/{deal_id}/{signature}/-/{action}", response_class=HTMLResponse)
async def seller_action(
    deal_id: str, signature: str, action: str, request: Request, session: Session
) -> Response:
    if action not in SELLER_ACTIONS:
        return _not_found(request)
    return await _seller_act(request, session, deal_id, signature, SELLER_ACTIONS[action])


async def _seller_act(
    request: Request, session: Any, deal_id: str, signature: str, act: SellerAction
) -> Response:
    """Run ``act`` on the seller's deal through ``_act``; a forged link is a 404."""
    deal = await _seller_deal(request, session, deal_id, signature)
    if deal is None:
        return _not_found(request)
    settings = request.app.state.settings
    page = f"/d/{deal_id}/{signature}"

    async def render(message: str, status: int) -> Response:
        fresh = await deal_rows.by_id(session, deal.id)
        return await _seller_view(request, session, fresh or deal, message, status)

    async def run(form: FormData) -> str | None:
        return await act(session, deal, form, settings)

    return await _act(request, session, deal, page, run, render)


async def _details(session: Any, deal: Deal, form: FormData, settings: Any) -> str:
    fields: dict[str, object] = {
        "name": _field(form, "name"),
        "description": _field(form, "description", 5000),
        "price_minor": _price(form),
    }
    package = _field(form, "packageType", 10)
    if package is not None and package not in PACKAGE_TYPES:
        raise BadRequest("Choose a package size from the list.")
    fields["package_type"] = package
    seller = {
        k: _field(form, k)
        for k in ("firstname", "lastname", "phone", "email", "address", "postcode", "town")
    }
    if seller["email"] and "@" not in seller["email"]:
        raise BadRequest("The email address does not look right.")
    await deals.update_details(session, deal, fields, seller)
    return "details"


async def _seller_sign(session: Any, deal: Deal, form: FormData, settings: Any) -> str:
    _signature_consent(form)
    missing = [n for n, v in (("name", deal.name), ("price", deal.price_minor)) if not v]
    if not (deal.seller or {}).get("email"):
        missing.append("your email")
    if missing:
        raise BadRequest(f"Complete the deal before signing: {', '.join(missing)} missing.")
    await record(
        session, deal, SignatureType.SELLER, SignatureStatus.INITIATED, Actor.SELLER, settings
    )
    await record(
        session, deal, SignatureType.SELLER, SignatureStatus.COMPLETED, Actor.SELLER, settings
    )
    return "signed"


def _signature_consent(form: FormData) -> None:
    if not _field(form, "full_name"):
        raise BadRequest("Type your full name to sign.")
    if form.get("consent") != "yes":
        raise BadRequest("Tick the box to confirm that you agree to the deal.")


async def _decide(session: Any, deal: Deal, form: FormData, approve: bool) -> str:
    try:
        offer_id = uuid.UUID(str(form.get("offer")))
    except ValueError as exc:
        raise BadRequest("Choose an offer.") from exc
    offer = await offers.pending_offer(session, deal, offer_id)
    if approve:
        await offers.approve(session, deal, offer)
        return offer.seller_redirect_url or "approved"
    await offers.deny(session, deal, offer)
    return "denied"


async def _approve(session: Any, deal: Deal, form: FormData, settings: Any) -> str:
    return await _decide(session, deal, form, True)


async def _deny(session: Any, deal: Deal, form: FormData, settings: Any) -> str:
    return await _decide(session, deal, form, False)


async def _cancel(session: Any, deal: Deal, form: FormData, settings: Any) -> str:
    await flows.fire(session, deal, Trigger.CANCEL, Actor.SELLER, settings)
    return "cancelled"


async def _handover(session: Any, deal: Deal, form: FormData, settings: Any) -> str:
    await flows.fire(session, deal, Trigger.CARRIER_PICKED_UP, Actor.SELLER, settings)
    return "handed"


async def _account(session: Any, deal: Deal, form: FormData, settings: Any) -> str:
    if deal.seller_user_id is None:
        raise BadRequest(
            "Add your email to the deal first: the payout account belongs to you as a user."
        )
    holder = _field(form, "holder")
    number = _field(form, "account", 40)
    if not holder or not number:
        raise BadRequest("Give the account holder's name and the IBAN or account number.")
    await payments.register_payout_account(session, deal.seller_user_id, number, holder)
    return "account"


SELLER_ACTIONS: dict[str, SellerAction] = {
    "details": _details,
    "sign": _seller_sign,
    "approve": _approve,
    "deny": _deny,
    "cancel": _cancel,
    "handover": _handover,
    "account": _account,
}


# --- the buyer's page (the offer link) ------------------------------------------------------


async def _buyer_view(
    request: Request,
    session: Any,
    link: OfferLink,
    deal: Deal,
    error: str | None = None,
    status: int = 200,
) -> Response:
    page = request.url.path.split("/-/")[0]
    mine = await offers.offers_from_link(session, link)
    latest = mine[0] if mine else None
    approved = (
        latest is not None
        and latest.status == OfferStatus.APPROVED
        and deal.buyer_user_id == latest.buyer_user_id
    )
    payment = await payments.current(session, deal) if approved else None
    context = {
        "deal": deal,
        "link": link,
        "page": page,
        "query": f"?offer={link.id}",
        "csrf": request.app.state.links.form_token(page),
        "error": error,
        "offer": latest,
        "approved": approved,
        "can_offer": offers.takes_offers(deal)
        and (latest is None or latest.status == OfferStatus.DENIED),
        "payment": payment,
        "mailbox": request.app.state.links.mailbox_url(deal.id)
        if request.app.state.settings.is_sandbox
        else None,
    }
    return _page(request, "buyer.html", context, status)


@router.get("/o/{token}", response_class=HTMLResponse)
async def offer_page(token: str, request: Request, session: Session) -> Response:
    found = await offers.resolve(session, token, request.query_params.get("offer"))
    if found is None:
        return _not_found(request)
    link, deal = found
    return await _buyer_view(request, session, link, deal)


@router.post("/o/{token}/-/{action}", response_class=HTMLResponse)
async def buyer_action(token: str, action: str, request: Request, session: Session) -> Response:
    found = await offers.resolve_for_update(session, token)
    if found is None or action not in BUYER_ACTIONS:
        return _not_found(request)
    link, deal = found
    settings = request.app.state.settings
    page = f"/o/{token}"

    async def render(message: str, status: int) -> Response:
        return await _buyer_view(request, session, link, deal, message, status)

    async def run(form: FormData) -> str | None:
        return await BUYER_ACTIONS[action](session, link, deal, form, settings, page)

    response = await _act(request, session, deal, page, run, render)
    if isinstance(response, RedirectResponse) and response.headers["location"].startswith(page):
        # Keep the offer reference on the way back to the page.
        location = (
            response.headers["location"]
            .replace(page, f"{page}?offer={link.id}&", 1)
            .replace("&?", "&")
        )
        return RedirectResponse(location, status_code=303)
    return response


async def _offer(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, page: str
) -> str:
    price = _price(form)
    if price is None:
        raise BadRequest("Give the price you offer.")
    shipping = str(form.get("shippingType", ""))
    if shipping not in ("Carrier", "Pickup"):
        raise BadRequest("Choose Carrier or Pickup.")
    email = _field(form, "email", 254)
    if not email or "@" not in email:
        raise BadRequest("Give your email address, so the seller can answer.")
    if not offers.takes_offers(deal):
        raise BadRequest("This deal does not take offers any more.")
    await offers.submit(
        session,
        deal,
        price_minor=price,
        shipping_type=shipping,
        buyer_name=_field(form, "name"),
        buyer_email=email,
        buyer_redirect_url=link.buyer_redirect_url,
        seller_redirect_url=link.seller_redirect_url,
        offer_link_id=link.id,
    )
    return link.buyer_redirect_url or "offer"


async def _approved_offer(session: Any, link: OfferLink, deal: Deal) -> None:
    mine = await offers.offers_from_link(session, link)
    if (
        not mine
        or mine[0].status != OfferStatus.APPROVED
        or mine[0].buyer_user_id != deal.buyer_user_id
    ):
        raise BadRequest("Only the buyer whose offer was approved can do this.")


async def _buyer_sign(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, page: str
) -> str:
    await _approved_offer(session, link, deal)
    _signature_consent(form)
    await record(
        session, deal, SignatureType.BUYER, SignatureStatus.INITIATED, Actor.BUYER, settings
    )
    await record(
        session, deal, SignatureType.BUYER, SignatureStatus.COMPLETED, Actor.BUYER, settings
    )
    return "signed"


async def _pay(
    session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, page: str
) -> str:
    await _approved_offer(session, link, deal)
    _, token = await payments.start(session, deal, settings)
    return provider_for(settings).checkout_url(settings.base_url, token, f"{page}?offer={link.id}")


def _buyer_trigger(trigger: Trigger, outcome: str) -> Callable[..., Awaitable[str]]:
    async def step(
        session: Any, link: OfferLink, deal: Deal, form: FormData, settings: Any, page: str
    ) -> str:
        await _approved_offer(session, link, deal)
        await flows.fire(session, deal, trigger, Actor.BUYER, settings)
        return outcome

    return step


BUYER_ACTIONS: dict[str, Callable[..., Awaitable[str]]] = {
    "offer": _offer,
    "sign": _buyer_sign,
    "pay": _pay,
    "arrived": _buyer_trigger(Trigger.CARRIER_DELIVERED, "arrived"),
    "approve": _buyer_trigger(Trigger.BUYER_APPROVED, "item-approved"),
    "deny": _buyer_trigger(Trigger.BUYER_DENIED, "item-denied"),
}


# --- the sandbox: the simulated payment provider's test page, carrier and mailbox ----------


def _return_path(request: Request) -> str:
    back = request.query_params.get("return", "")
    return back if back.startswith("/o/") else "/"


@sandbox_router.get("/pay/{token}", response_class=HTMLResponse)
async def payment_page(token: str, request: Request, session: Session) -> Response:
    payment = await payments.by_checkout_token(session, token)
    if payment is None:
        return _not_found(request)
    deal = await deal_rows.by_id(session, payment.deal_id)
    page = f"/pay/{token}"
    context = {
        "payment": payment,
        "deal": deal,
        "page": page,
        "back": _return_path(request),
        "csrf": request.app.state.links.form_token(page),
        "error": None,
        "open": payments.PaymentStatus(payment.status) in payments.OPEN,
    }
    return _page(request, "pay.html", context)


@sandbox_router.post("/pay/{token}", response_class=HTMLResponse)
async def payment_outcome(token: str, request: Request, session: Session) -> Response:
    payment = await payments.by_checkout_token(session, token)
    if payment is None:
        return _not_found(request)
    page = f"/pay/{token}"
    back = _return_path(request)
    deal = await deal_rows.by_id_for_update(session, payment.deal_id)
    assert deal is not None
    try:
        form = await _form(request, page)
        outcome = str(form.get("outcome"))
        if outcome not in ("succeeded", "failed", "cancelled"):
            raise BadRequest("Unknown outcome.")
        async with session.begin_nested():
            await flows.settle_payment(session, deal, outcome, request.app.state.settings)
    except DomainError as exc:
        context = {
            "payment": payment,
            "deal": deal,
            "page": page,
            "back": back,
            "open": False,
            "csrf": request.app.state.links.form_token(page),
            "error": exc.detail,
        }
        return _page(request, "pay.html", context, exc.status)
    done = {"succeeded": "paid", "failed": "payment-failed", "cancelled": "payment-cancelled"}[
        outcome
    ]
    separator = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{separator}done={done}", status_code=303)


async def _carrier(session: Any, deal: Deal, form: FormData, settings: Any) -> str:
    """The sandbox's simulated carrier: delivered or returned (see ``carrier_action``)."""
    outcome = form.get("outcome")
    trigger = {"delivered": Trigger.CARRIER_DELIVERED, "returned": Trigger.CARRIER_RETURNED}.get(
        str(outcome)
    )
    if trigger is None:
        raise BadRequest("Unknown carrier event.")
    await flows.fire(session, deal, trigger, Actor.PROVIDER, settings)
    return str(outcome)


@sandbox_router.post("/d/{deal_id}/{signature}/-/carrier", response_class=HTMLResponse)
async def carrier_action(
    deal_id: str, signature: str, request: Request, session: Session
) -> Response:
    """The simulated carrier's buttons on the seller's page. ``create_app`` includes this router
    before ``router``, so this path wins over the generic seller action."""
    return await _seller_act(request, session, deal_id, signature, _carrier)


@sandbox_router.get("/sandbox/mailbox/{deal_id}/{signature}", response_class=HTMLResponse)
async def mailbox_page(
    deal_id: str, signature: str, request: Request, session: Session
) -> Response:
    """Every message sent about one deal, for following a deal in the sandbox."""
    try:
        parsed = uuid.UUID(deal_id)
    except ValueError:
        return _not_found(request)
    if not request.app.state.links.mailbox_signature_valid(parsed, signature):
        return _not_found(request)
    deal = await deal_rows.by_id(session, parsed)
    if deal is None:
        return _not_found(request)
    messages = await notifications.mailbox(session, parsed)
    return _page(request, "mailbox.html", {"deal": deal, "messages": messages, "error": None})
