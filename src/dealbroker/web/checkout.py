"""The simulated payment provider's checkout page (``/pay/<token>``): succeed, fail, cancel.

It moves no money, so ``create_app`` mounts ``router`` only in the sandbox; elsewhere its path
is a plain 404.
"""

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest, DomainError
from dealbroker.core.i18n import _
from dealbroker.core.statuses import PaymentStatus
from dealbroker.deals import service as deals
from dealbroker.deals.models import Deal
from dealbroker.payments import service as payments
from dealbroker.payments.models import Payment
from dealbroker.settlement import settle_payment
from dealbroker.web.forms import read_form, said_on_page
from dealbroker.web.render import not_found, page

router = APIRouter(include_in_schema=False)
OUTCOMES = {"succeeded": "paid", "failed": "payment-failed", "cancelled": "payment-cancelled"}


def return_path(request: Request) -> str:
    back = request.query_params.get("return", "")
    return back if back.startswith("/o/") else "/"


def payment_context(
    request: Request,
    payment: Payment,
    deal: Deal,
    path: str,
    *,
    error: str | None = None,
    is_open: bool = False,
) -> dict[str, Any]:
    """What a checkout page at ``path`` shows of ``payment`` (the simulated provider's and
    Stripe's): the deal, the way back to it and the form's token."""
    return {
        "payment": payment,
        "deal": deal,
        "page": path,
        "back": return_path(request),
        "csrf": request.app.state.links.form_token(path),
        "error": error,
        "open": is_open,
    }


@router.get("/pay/{token}", response_class=HTMLResponse)
async def payment_page(token: str, request: Request, session: Session) -> Response:
    payment = await payments.by_checkout_token(session, token)
    if payment is None:
        return not_found(request)
    deal = await deals.get_for(session, payment.integration_id, payment.deal_id)
    is_open = PaymentStatus(payment.status) in payments.OPEN
    context = payment_context(request, payment, deal, f"/pay/{token}", is_open=is_open)
    return page(request, "pay.html", context)


@router.post("/pay/{token}", response_class=HTMLResponse)
async def payment_outcome(token: str, request: Request, session: Session) -> Response:
    payment = await payments.by_checkout_token(session, token)
    if payment is None:
        return not_found(request)
    path = f"/pay/{token}"
    back = return_path(request)
    deal = await deals.get_for(session, payment.integration_id, payment.deal_id, for_update=True)
    try:
        form = await read_form(request, path)
        outcome = str(form.get("outcome"))
        if outcome not in OUTCOMES:
            raise BadRequest(_("Unknown outcome."))
        async with session.begin_nested():
            await settle_payment(session, deal, outcome, request.app.state.settings)
    except DomainError as exc:
        # The refused step rolled back: read the payment and the deal as they now stand.
        payment = await payments.by_checkout_token(session, token) or payment
        deal = await deals.get_for(session, payment.integration_id, payment.deal_id)
        context = payment_context(request, payment, deal, path, error=said_on_page(exc))
        return page(request, "pay.html", context, exc.status)
    separator = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{separator}done={OUTCOMES[outcome]}", status_code=303)
