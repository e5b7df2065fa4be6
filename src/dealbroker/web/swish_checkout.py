"""The buyer's Swish checkout (``/pay/swish/<token>``) and Swish's callback endpoint.

The page offers Swish's two flows (https://developer.swish.nu/documentation/guides):
M-commerce, a request with no payer number whose token opens the Swish app on this phone
(``swish://paymentrequest?token=...&callbackurl=...``) or, on a computer, fills a QR code the
buyer scans with Swish on their phone; and E-commerce, the buyer's Swish number typed here, the
request then waiting in their app. Then the page waits: each load of it asks Swish over mutual
TLS how the request stands, and once Swish has settled it the buyer is sent back to the deal.
With JavaScript, a small script asks ``/status`` every few seconds and reloads the page when
the payment is settled; without it, the buyer presses "Check again" (the Swish app, opened on
the phone, comes back to this page by itself). Not a meta refresh: reloading the page every few
seconds under a screen reader is what WCAG 2.2.1 forbids (axe's ``meta-refresh``).

The callback (``POST /payments/v1/swish/callback``) is Swish's, left out of the OpenAPI like
Stripe's webhook. A body is read bounded and type-checked; a payment request's callback must
carry the ``callbackIdentifier`` we set on that request (401 otherwise, nothing changed), and
then what is applied is the request as Swish's API shows it (``payments.swish_events``). A
refund's callback wakes the refund's call. Nothing is held locked while Swish is asked.

``create_app`` mounts ``router`` only when Swish takes a method's payments here.
"""

import logging
import uuid
from urllib.parse import quote

from fastapi import APIRouter, Request
from markupsafe import Markup
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from dealbroker.carriers.qr import qr_svg
from dealbroker.core.errors import BadRequest, DomainError, NotFound, Unauthorized
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus, PaymentStatus
from dealbroker.deals import service as deal_service
from dealbroker.payments import service as payments
from dealbroker.payments import swish_events
from dealbroker.payments.models import Payment
from dealbroker.payments.provider import ProviderError, ProviderUnavailable, provider_named
from dealbroker.payments.swish import (
    CALLBACK_PATH,
    FINAL,
    SwishProvider,
    SwishRefused,
    SwishUnavailable,
    payer_alias,
)
from dealbroker.web.checkout import payment_context, return_path
from dealbroker.web.forms import read_form, said_on_page
from dealbroker.web.render import not_found, page, policy

router = APIRouter(include_in_schema=False)
log = logging.getLogger("dealbroker.payments")
# How often the waiting page's script asks whether Swish has settled the payment (ms).
POLL_MS = 3000
_PHONES = ("iphone", "ipad", "android", "mobile")
P = PaymentStatus
# Where a settled payment sends the buyer back (the deal page's ``done`` notices).
_DONE = {P.PAYMENT_FAILED: "payment-failed", P.PAYMENT_CANCELLED: "payment-cancelled"}


def _provider(settings: Settings) -> SwishProvider:
    provider = provider_named(settings, "swish")
    assert isinstance(provider, SwishProvider)  # the router is mounted with swish only
    return provider


def _on_phone(request: Request) -> bool:
    agent = request.headers.get("user-agent", "").lower()
    return any(word in agent for word in _PHONES)


def _back_to_deal(request: Request, payment: Payment) -> RedirectResponse:
    back = return_path(request)
    done = _DONE.get(P(payment.status), "paid")
    separator = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{separator}done={done}", status_code=303)


async def _payment(request: Request, token: str) -> Payment | None:
    async with request.app.state.sessionmaker() as session:
        found = await payments.by_checkout_token_unlocked(session, token)
    return found if found is not None and found.provider == "swish" else None


async def _render(
    request: Request, payment: Payment, *, error: str | None = None, status: int = 200
) -> Response:
    settings: Settings = request.app.state.settings
    path = request.url.path
    try:
        async with request.app.state.sessionmaker() as session:
            deal = await deal_service.get_for(session, payment.integration_id, payment.deal_id)
    except NotFound:  # gone (deleted, with its payments) since the payment was read
        return not_found(request)
    is_open = P(payment.status) in payments.OPEN and deal.status == DealStatus.SIGNED
    waiting = payment.status == P.PROCESSING
    phone = _on_phone(request)
    token = payment.swish_request_token
    app_link = qr = None
    if waiting and token:
        # The app on this device, and the QR code for a phone beside it: which one the buyer
        # chose is not kept, and either opens the same request.
        back = f"{settings.base_url}{path}?return={quote(return_path(request), safe='')}"
        app_link = f"swish://paymentrequest?token={quote(token)}&callbackurl={quote(back, safe='')}"
        # Swish's QR code for a payment request token: "D" and the token.
        qr = Markup(qr_svg(f"D{token}", title=_("Swish QR code")))
    context = {
        **payment_context(request, payment, deal, path, error=error, is_open=is_open),
        "waiting": waiting,
        "poll_ms": POLL_MS,
        "phone": phone,
        "app_link": app_link,
        "qr": qr,
        "typed_phone": "",
    }
    response = page(request, "swish_pay.html", context, status)
    if waiting:  # the page's one script asks /status, on our own origin
        response.headers["Content-Security-Policy"] = policy(
            extra="script-src 'self'; connect-src 'self'; "
        )
    return response


async def _as_swish_says(request: Request, token: str, payment: Payment) -> tuple[Payment, bool]:
    """``payment`` after asking Swish how its request stands (applied if Swish has settled
    it), and whether Swish answered."""
    if payment.status != P.PROCESSING:
        return payment, True
    try:
        state = await _provider(request.app.state.settings).payment_request(payment)
    except (SwishUnavailable, SwishRefused, ProviderUnavailable) as exc:
        log.warning("swish checkout: payment request of %s not read: %s", payment.id, exc)
        return payment, False
    if state is not None and state.status in FINAL:
        async with request.app.state.sessionmaker() as session, session.begin():
            await swish_events.apply(session, request.app.state.settings, payment.id, state)
        payment = await _payment(request, token) or payment
    return payment, True


@router.get("/pay/swish/{token}", response_class=HTMLResponse)
async def checkout_page(token: str, request: Request) -> Response:
    payment = await _payment(request, token)
    if payment is None:
        return not_found(request)
    payment, answered = await _as_swish_says(request, token, payment)
    if payment.status == P.PROCESSING:
        error = None if answered else _("Swish does not answer just now; we keep asking.")
        return await _render(request, payment, error=error)
    if P(payment.status) not in payments.OPEN:
        return _back_to_deal(request, payment)
    return await _render(request, payment)


@router.get("/pay/swish/{token}/status")
async def checkout_status(token: str, request: Request) -> Response:
    """For the waiting page's script: whether the payment is still waiting for Swish, and
    where the buyer goes once it is not (the page's own address: it sends them on)."""
    payment = await _payment(request, token)
    if payment is None:
        return JSONResponse({"waiting": False}, status_code=404)
    payment, _answered = await _as_swish_says(request, token, payment)
    return JSONResponse({"waiting": payment.status == P.PROCESSING})


@router.post("/pay/swish/{token}", response_class=HTMLResponse)
async def checkout_start(token: str, request: Request) -> Response:
    """Make the payment request: to the number typed, or for the app or a QR code."""
    payment = await _payment(request, token)
    if payment is None:
        return not_found(request)
    settings: Settings = request.app.state.settings
    try:
        form = await read_form(request, request.url.path)
        mode = str(form.get("mode", ""))
        payer = None
        if mode == "number":
            payer = payer_alias(str(form.get("phone", "")))
            if payer is None:
                raise BadRequest(_("Type the mobile number your Swish is connected to."))
        elif mode not in ("app", "qr"):
            raise BadRequest(_("Choose how to pay with Swish."))
        if payment.status != P.CREATED:
            return RedirectResponse(f"{request.url.path}?{request.url.query}", status_code=303)
        provider = _provider(settings)
        provider.check(payment)
        async with request.app.state.sessionmaker() as session, session.begin():
            deal = await deal_service.get_for(
                session, payment.integration_id, payment.deal_id, for_update=True
            )
            kept = await payments.record_swish_callback(
                session,
                deal,
                payment.id,
                swish_events.callback_hash(provider.callback_identifier(payment)),
            )
        if not kept:
            return await _render(request, payment, status=409)
        state = None
        try:
            request_token = await provider.create_request(payment, payer=payer)
        except SwishRefused as exc:
            if "RP09" not in exc.codes:
                raise
            # Made already: by a first attempt whose answer was lost, or by a page posted twice
            # at once. Its callbacks carry the same identifier; read it back for how it stands.
            request_token = None
            state = await provider.payment_request(payment)
        async with request.app.state.sessionmaker() as session, session.begin():
            deal = await deal_service.get_for(
                session, payment.integration_id, payment.deal_id, for_update=True
            )
            await payments.record_swish_request(session, deal, payment.id, request_token)
        if state is not None and state.status in FINAL:
            async with request.app.state.sessionmaker() as session, session.begin():
                await swish_events.apply(session, settings, payment.id, state)
    except SwishRefused as exc:
        log.warning("swish refused payment %s's request: %s", payment.id, exc)
        message = (
            _("That number is not connected to Swish.")
            if {"ACMT03", "ACMT01", "BE18"} & set(exc.codes)
            else _("Swish refused the payment request. Try again, or pay another way.")
        )
        return await _render(request, payment, error=message, status=402)
    except SwishUnavailable as exc:
        log.warning("swish did not take payment %s's request: %s", payment.id, exc)
        message = _("Swish does not answer just now. Try again in a minute.")
        return await _render(request, payment, error=message, status=503)
    except (ProviderError, ProviderUnavailable) as exc:
        # Not Swish's refusal but ours: a currency Swish does not take, Swish not set up here.
        log.warning("swish cannot take payment %s: %s", payment.id, exc)
        message = _("Swish cannot take this payment. Try again later, or pay another way.")
        status = exc.status if isinstance(exc, ProviderUnavailable) else 402
        return await _render(request, payment, error=message, status=status)
    except NotFound:
        return not_found(request)
    except DomainError as exc:
        return await _render(request, payment, error=said_on_page(exc), status=exc.status)
    return RedirectResponse(f"{request.url.path}?{request.url.query}", status_code=303)


@router.post(CALLBACK_PATH)
async def swish_callback(request: Request) -> Response:
    """Swish's callback about one of our payment requests or refunds: 400 for a body that is
    not one, 401 for one we did not ask for (or without our identifier), 503 when Swish cannot
    confirm it now (Swish calls again); 200 once applied, or known already."""
    settings: Settings = request.app.state.settings
    body = await request.body()
    try:
        told = swish_events.parse(body)
    except swish_events.MalformedCallback as exc:
        raise BadRequest(f"Not a Swish callback: {exc}.") from exc
    async with request.app.state.sessionmaker() as session:
        payment = await swish_events.payment_of(session, told.id)
        refund = (
            None if payment is not None else await swish_events.refund_call_of(session, told.id)
        )
    if refund is not None:
        async with request.app.state.sessionmaker() as session, session.begin():
            await swish_events.wake_refund(session, refund.id)
        log.info("swish refund callback %s (%s): its call is looked up", told.id, told.status)
        return JSONResponse({"received": True, "outcome": "refund"})
    if payment is None or not swish_events.identified(
        payment, request.headers.get("callbackIdentifier")
    ):
        log.warning("swish callback for %s refused: not a request of ours as we made it", told.id)
        raise Unauthorized("Not a callback for a Swish request of ours.")
    try:
        state = await _provider(settings).payment_request(payment)
    except (SwishUnavailable, SwishRefused) as exc:
        log.warning("swish callback for %s not confirmed now: %s", told.id, exc)
        return JSONResponse({"received": False}, status_code=503)
    if state is None:
        raise Unauthorized("Swish has no such payment request.")
    async with request.app.state.sessionmaker() as session, session.begin():
        outcome = await swish_events.apply(session, settings, uuid.UUID(hex=state.id), state)
    log.info(
        "swish callback %s (%s, confirmed %s): %s", told.id, told.status, state.status, outcome
    )
    return JSONResponse({"received": True, "outcome": outcome.value})
