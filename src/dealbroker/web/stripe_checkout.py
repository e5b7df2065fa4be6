"""The buyer's Stripe checkout (``/pay/stripe/<token>``) and Stripe's webhook endpoint.

The page loads Stripe.js from ``DEALBROKER_STRIPE_JS_URL``; the card fields are Stripe's, and
the card goes from the browser to Stripe (a SetupIntent confirmed with ``confirmCardSetup``).
Our server is posted only the SetupIntent's id, puts that card on the payment's PaymentIntent
and confirms it; if the bank asks for 3-D Secure, the page completes it with
``confirmCardPayment``. Then the buyer is sent back to the deal, which says that we wait for
the confirmation: the payment becomes ``Paid`` only when Stripe's signed webhook says so
(``payments.stripe_events``, through ``dealbroker.settlement``), never because the browser came back.

The webhook (``POST /payments/v1/stripe/webhook``) is Stripe's, not the integrations' API, so
it is left out of the OpenAPI document like the pages. Its body is bounded by the app's body
limit before it is read, the signature and its age are checked by the ``stripe`` library, and
each event id is applied once.

``create_app`` mounts ``router`` only when the provider is ``stripe``.
"""

import logging
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest, DomainError
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus, PaymentStatus
from dealbroker.deals import service as deal_service
from dealbroker.payments import service as payments
from dealbroker.payments import stripe_events
from dealbroker.payments.models import Payment
from dealbroker.payments.provider import CardDeclined, ProviderError, provider_for
from dealbroker.payments.stripe_provider import StripeProvider
from dealbroker.settlement import settle_payment
from dealbroker.web.checkout import payment_context, return_path
from dealbroker.web.forms import read_form, said_on_page
from dealbroker.web.render import not_found, page, policy

router = APIRouter(include_in_schema=False)
log = logging.getLogger("dealbroker.payments")
WEBHOOK_PATH = "/payments/v1/stripe/webhook"
# How old a signed delivery may be (seconds): an older one, replayed, is refused.
SIGNATURE_TOLERANCE = 300
WAITING = "payment-waiting"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def checkout_policy(settings: Settings) -> str:
    """The checkout page's Content-Security-Policy: the pages' own, plus Stripe.js's origin
    for scripts and frames and the Stripe API's for its calls; on this page only."""
    js = _origin(settings.stripe_js_url)
    frames = f"{js} https://hooks.stripe.com" if js == "https://js.stripe.com" else js
    return policy(
        extra=f"script-src 'self' {js}; frame-src {frames}; "
        f"connect-src {_origin(settings.stripe_api_base)}; "
    )


def _provider(settings: Settings) -> StripeProvider:
    provider = provider_for(settings)
    assert isinstance(provider, StripeProvider)  # the router is mounted for stripe only
    return provider


def _back_to_deal(back: str, done: str) -> RedirectResponse:
    separator = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{separator}done={done}", status_code=303)


async def _render(
    request: Request,
    payment: Payment,
    *,
    setup_secret: str | None = None,
    intent_secret: str | None = None,
    error: str | None = None,
    closed: bool = False,
    status: int = 200,
) -> Response:
    settings: Settings = request.app.state.settings
    path = request.url.path
    async with request.app.state.sessionmaker() as session:
        deal = await deal_service.get_for(session, payment.integration_id, payment.deal_id)
    is_open = not closed and PaymentStatus(payment.status) in payments.OPEN
    context = {
        **payment_context(request, payment, deal, path, error=error, is_open=is_open),
        "setup_secret": setup_secret,
        "intent_secret": intent_secret,
        "stripe_js_url": settings.stripe_js_url,
        "publishable_key": settings.stripe_publishable_key,
        "waiting": WAITING,
    }
    response = page(request, "stripe_pay.html", context, status)
    response.headers["Content-Security-Policy"] = checkout_policy(settings)
    return response


# The checkout pages call Stripe, so they take no request-long transaction (on SQLite that
# would hold the database's write lock through the call): each step has a short one.


async def _payment(request: Request, token: str) -> Payment | None:
    async with request.app.state.sessionmaker() as session:
        return await payments.by_checkout_token_unlocked(session, token)


async def _with_intent(request: Request, payment: Payment) -> Payment:
    """``payment`` with its Stripe PaymentIntent, created now if it has none, and stored in
    a transaction of its own; a second page load finds it, or gets the same objects from
    Stripe by the idempotency keys."""
    if payment.stripe_payment_intent_id is not None:
        return payment
    customer_id, intent_id = await _provider(request.app.state.settings).create_intent(payment)
    async with request.app.state.sessionmaker() as session, session.begin():
        # The deal's row lock orders this write with the deal's own changes.
        await deal_service.get_for(
            session, payment.integration_id, payment.deal_id, for_update=True
        )
        return await payments.record_stripe_intent(session, payment.id, customer_id, intent_id)


async def _payable(request: Request, payment: Payment) -> bool:
    """Whether the buyer may still pay ``payment``: it is open and its deal waits for it (a
    cancel closes the payment; a deal that moved on takes no payment either)."""
    if PaymentStatus(payment.status) not in payments.OPEN:
        return False
    async with request.app.state.sessionmaker() as session:
        deal = await deal_service.get_for(session, payment.integration_id, payment.deal_id)
    return deal.status == DealStatus.SIGNED


async def _refused(request: Request, payment: Payment) -> Response:
    """The checkout of a payment that can no longer be made: said, and nothing to pay with."""
    return await _render(request, payment, closed=True, status=409)


@router.get("/pay/stripe/{token}", response_class=HTMLResponse)
async def checkout_page(token: str, request: Request) -> Response:
    payment = await _payment(request, token)
    if payment is None:
        return not_found(request)
    if not await _payable(request, payment):
        return await _refused(request, payment)
    if payment.status == PaymentStatus.PROCESSING:
        # A card is on its way: the webhook decides, not another try on this page.
        return _back_to_deal(return_path(request), WAITING)
    payment = await _with_intent(request, payment)
    setup_secret = await _provider(request.app.state.settings).card_setup(payment)
    return await _render(request, payment, setup_secret=setup_secret)


@router.post("/pay/stripe/{token}", response_class=HTMLResponse)
async def checkout_charge(token: str, request: Request) -> Response:
    """The browser set up the card: charge it, with no transaction open while Stripe works."""
    payment = await _payment(request, token)
    if payment is None:
        return not_found(request)
    try:
        form = await read_form(request, request.url.path)
        setup_intent = str(form.get("setup_intent", ""))
        if not setup_intent.startswith("seti_") or payment.stripe_payment_intent_id is None:
            raise BadRequest(_("No card was set up on this page. Reload it and try again."))
        if not await _payable(request, payment):
            return await _refused(request, payment)
        if payment.status != PaymentStatus.CREATED:
            return _back_to_deal(return_path(request), WAITING)
        intent = await _provider(request.app.state.settings).charge_card(payment, setup_intent)
    except CardDeclined as exc:
        await _declined(request, payment)
        payment = await _payment(request, token) or payment  # as it is now: failed
        return await _render(request, payment, error=str(exc), status=402)
    except ProviderError as exc:
        return await _render(request, payment, error=str(exc), status=402)
    except DomainError as exc:
        return await _render(request, payment, error=said_on_page(exc), status=exc.status)
    async with request.app.state.sessionmaker() as session, session.begin():
        await payments.processing(session, payment.deal_id, payment.id)
    if intent.status == "requires_action":  # 3-D Secure: the page completes it
        return await _render(request, payment, intent_secret=intent.client_secret)
    return _back_to_deal(return_path(request), WAITING)


async def _declined(request: Request, payment: Payment) -> None:
    """Stripe answered our server that the card was declined: this payment has failed, now.
    Left open until the webhook, it could be charged again with another card on the same
    PaymentIntent, and then the first attempt's late ``payment_failed`` event would fail a
    payment whose money Stripe has taken. Failed at once, a new try is a new payment with a
    new PaymentIntent, and that late event finds this one closed."""
    async with request.app.state.sessionmaker() as session, session.begin():
        deal = await deal_service.get_for(
            session, payment.integration_id, payment.deal_id, for_update=True
        )
        current = await payments.current(session, deal)
        if current is None or current.id != payment.id:
            return
        if PaymentStatus(current.status) in payments.OPEN:
            await settle_payment(session, deal, "failed", request.app.state.settings)


@router.post(WEBHOOK_PATH)
async def stripe_webhook(request: Request, session: Session) -> Response:
    """Stripe's events about our PaymentIntents and Refunds; 400 if the signature does not
    verify or is too old, or the signed body is not an event we can read; 200 once the event
    is applied or known, or when it is well formed and of a type we do not use."""
    settings: Settings = request.app.state.settings
    body = await request.body()
    try:
        if len(body) > stripe_events.MAX_EVENT_BYTES:
            raise stripe_events.MalformedEvent("too large")
        payload = body.decode("utf-8")
    except (UnicodeDecodeError, stripe_events.MalformedEvent) as exc:
        raise BadRequest("Not a Stripe event.") from exc
    import stripe  # here, not with the module: the app imports this one for every provider

    try:
        # The signature is checked before the body is decoded (and decoded by us, bounded:
        # the library's own construct_event would decode any depth).
        stripe.WebhookSignature.verify_header(
            payload,
            request.headers.get("stripe-signature"),
            settings.stripe_webhook_secret.get_secret_value(),
            tolerance=SIGNATURE_TOLERANCE,
        )
    except stripe.SignatureVerificationError as exc:
        raise BadRequest("The Stripe-Signature header does not verify.") from exc
    try:
        event = stripe_events.parse(payload)
    except stripe_events.MalformedEvent as exc:
        log.warning("stripe webhook: a signed body refused: %s", exc)
        raise BadRequest(f"Not a Stripe event we can read: {exc}.") from exc
    outcome = await stripe_events.handle(session, settings, event)
    log.info("stripe event %s (%s): %s", event.id, event.type, outcome)
    return JSONResponse({"received": True, "outcome": outcome.value})
