"""The buyer's Vipps MobilePay checkout and Vipps's webhook.

``/pay/vipps/<token>`` (where the buyer's pay button leads) creates the payment at Vipps, from
our payment's row, and sends the buyer on to Vipps's landing page or app (its ``redirectUrl``):
a plain redirect, so it works with JavaScript off. Vipps sends the buyer back to
``/pay/vipps/return/<reference>``: the return page asks Vipps how the payment stands (``GET``,
never the browser's word) and applies it (``payments.vipps_events``), then sends the buyer on to
the deal's page. The return address names the payment's Vipps reference rather than the checkout
token: a token is issued anew whenever the buyer opens the checkout again, while the payment at
Vipps, created once under its idempotency key, keeps the return address it was created with.
Knowing a reference lets one only have Vipps's own answer applied.

The webhook (``POST /payments/v1/vipps/webhook``, not in the OpenAPI) is verified by Vipps's
HMAC scheme, for the host and path of the address registered at Vipps (``webhook_target``),
before its body is read (a forged or stale delivery: 401, nothing changed); an
``AUTHORIZED`` event is confirmed by Vipps's ``GET`` before the payment becomes paid.

Provider calls are made with no transaction open; each change has a short one of its own.
``create_app`` mounts ``router`` only when ``vipps`` takes payments here.
"""

import logging
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from dealbroker.core import clock
from dealbroker.core.errors import BadRequest
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus, PaymentStatus
from dealbroker.deals import service as deal_service
from dealbroker.payments import service as payments
from dealbroker.payments import vipps_events
from dealbroker.payments.models import Payment
from dealbroker.payments.provider import ProviderError, provider_named
from dealbroker.payments.vipps import VippsProvider, VippsUnavailable, payment_id_of, reference
from dealbroker.web.checkout import payment_context, return_path
from dealbroker.web.render import not_found, page

router = APIRouter(include_in_schema=False)
log = logging.getLogger("dealbroker.payments")
WEBHOOK_PATH = "/payments/v1/vipps/webhook"
# What the deal's page says when the buyer comes back: the answer for each Vipps state.
DONE = {
    "AUTHORIZED": "paid",
    "ABORTED": "payment-cancelled",
    "TERMINATED": "payment-cancelled",
    "EXPIRED": "payment-failed",
}
WAITING = "payment-waiting"


def _provider(settings: Settings) -> VippsProvider:
    provider = provider_named(settings, "vipps")
    assert isinstance(provider, VippsProvider)  # the router is mounted for vipps only
    return provider


def _back_to_deal(back: str, done: str) -> RedirectResponse:
    separator = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{separator}done={done}", status_code=303)


async def _render(
    request: Request, payment: Payment, error: str | None, status: int, vipps_url: str = ""
) -> Response:
    async with request.app.state.sessionmaker() as session:
        deal = await deal_service.get_for(session, payment.integration_id, payment.deal_id)
    context = payment_context(request, payment, deal, request.url.path, error=error)
    context["vipps_url"] = vipps_url
    return page(request, "vipps_pay.html", context, status)


@router.get("/pay/vipps/{token}", response_class=HTMLResponse)
async def checkout(token: str, request: Request) -> Response:
    settings: Settings = request.app.state.settings
    async with request.app.state.sessionmaker() as session:
        payment = await payments.by_checkout_token_unlocked(session, token)
        deal = (
            None
            if payment is None
            else await deal_service.get_for(session, payment.integration_id, payment.deal_id)
        )
    if payment is None or deal is None or payment.provider != "vipps":
        return not_found(request)
    if PaymentStatus(payment.status) not in payments.OPEN or deal.status != DealStatus.SIGNED:
        return await _render(request, payment, _("This payment can no longer be made."), 409)
    back = return_path(request)
    return_url = (
        f"{settings.base_url}/pay/vipps/return/{reference(payment.id)}"
        f"?return={quote(back, safe='')}"
    )
    try:
        redirect = await _provider(settings).create(payment, return_url, deal.name or "")
    except (ProviderError, VippsUnavailable) as exc:
        log.warning("vipps: creating payment %s failed: %s", payment.id, exc)
        message = _("Vipps could not start the payment just now. Try again in a moment.")
        return await _render(request, payment, message, 503)
    # A page of ours that moves on to Vipps (see vipps_pay.html), not a redirect: the pay
    # form's redirects may not leave our origin.
    return await _render(request, payment, None, 200, vipps_url=redirect)


@router.get("/pay/vipps/return/{ref}", response_class=HTMLResponse)
async def returned(ref: str, request: Request) -> Response:
    """The buyer is back from Vipps: how the payment stands is Vipps's to say."""
    settings: Settings = request.app.state.settings
    payment_id = payment_id_of(ref)
    back = return_path(request)
    if payment_id is None:
        return not_found(request)
    try:
        found = await _provider(settings).client.get(payment_id)
    except (ProviderError, VippsUnavailable) as exc:
        log.warning("vipps: reading payment %s on the buyer's return failed: %s", payment_id, exc)
        return _back_to_deal(back, WAITING)  # the webhook or the polling settles it
    if found is None:
        return not_found(request)
    async with request.app.state.sessionmaker() as session, session.begin():
        await vipps_events.apply(session, settings, payment_id, found.state, found)
    return _back_to_deal(back, DONE.get(found.state, WAITING))


def webhook_target(settings: Settings) -> tuple[str, str]:
    """The host and the path Vipps signs a delivery for: those of the webhook address the
    operator registered at Vipps, ``DEALBROKER_BASE_URL`` + ``WEBHOOK_PATH``. Never the Host
    header or path the request claims: a proxy may rewrite them (or strip a prefix), and a
    client chooses them."""
    base = urlsplit(settings.base_url)
    return base.netloc, base.path.rstrip("/") + WEBHOOK_PATH


@router.post(WEBHOOK_PATH)
async def webhook(request: Request) -> Response:
    """Vipps's events about our payments: 401 for a delivery that does not verify, 400 for a
    verified body we cannot read, 503 when Vipps cannot confirm an approval now (it retries),
    else 200 (applied, known already, or not ours: logged)."""
    settings: Settings = request.app.state.settings
    body = await request.body()
    host, path = webhook_target(settings)
    try:
        if len(body) > vipps_events.MAX_BODY_BYTES:
            raise vipps_events.Forged("too large to be Vipps's")
        vipps_events.verify(
            settings.vipps_webhook_secret.get_secret_value(),
            path,
            host,
            request.headers.get("x-ms-date"),
            request.headers.get("x-ms-content-sha256"),
            request.headers.get("authorization"),
            body,
            clock.now(),
        )
    except vipps_events.Forged as exc:
        log.warning("vipps webhook refused: %s", exc)
        return JSONResponse({"detail": "The delivery does not verify."}, status_code=401)
    try:
        event = vipps_events.parse(body)
    except vipps_events.Malformed as exc:
        raise BadRequest(f"Not a Vipps event we can read: {exc}.") from exc
    payment_id = vipps_events.event_payment(event, settings)
    if payment_id is None:
        log.warning("vipps webhook for %s (%s): not ours", event.reference, event.name)
        return JSONResponse({"received": True, "outcome": "unmatched"})
    found = None
    if event.name == "AUTHORIZED":
        try:
            found = await _provider(settings).client.get(payment_id)
        except (ProviderError, VippsUnavailable) as exc:
            log.warning("vipps webhook: confirming %s failed: %s", event.reference, exc)
            return JSONResponse({"detail": "Try again later."}, status_code=503)
    async with request.app.state.sessionmaker() as session, session.begin():
        outcome = await vipps_events.apply(session, settings, payment_id, event.name, found)
    log.info("vipps event %s for %s: %s", event.name, event.reference, outcome)
    return JSONResponse({"received": True, "outcome": outcome.value})
