"""How the seller's and buyer's pages are rendered: templates, words for statuses, headers.

Every page route answers through ``page`` or ``not_found``, so every capability page carries
the same private headers.
"""

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from babel.dates import format_date, format_time, get_datetime_format
from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

from dealbroker.core import money
from dealbroker.web.locale import COOKIE, LOCALES, page_locale, switch_links

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
PRIVATE = {
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex",
    # No script at all, styles only from our stylesheet, and never inside another site's frame
    # (the pages have one-click actions). Forms may end on the integration's redirect URLs.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' https: data:; "
    "form-action 'self' https: http:; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
}
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
    "picked-up": "Handover confirmed: the deal is complete and your payout is on its way.",
    "account-confirm": "We sent a link to your e-mail address: open it to confirm the new payout "
    "account. Until then the money goes to the account shown.",
    "account-changed": "The new payout account is confirmed.",
    "offer": "Your offer is sent. The seller will answer here.",
    "withdrawn": "You withdrew your offer. You can make a new one.",
    "arrived": "Thank you: the item has arrived. Please check it and approve it.",
    "item-approved": "You approved the item. The seller is paid.",
    "item-denied": "You reported a problem. We will look into it and contact you both.",
    "paid": "Payment received. Thank you.",
}


def _money(minor: int | None, currency: str, locale: str) -> str:
    return "—" if minor is None else money.to_text(minor, currency, locale)


# Outcomes of an action that was taken but did not succeed, shown as an error after the
# redirect (a wrong handover code is counted, so it cannot be a rolled-back refusal).
FAILED = {
    "payment-failed": "The payment did not go through. You can try again.",
    "payment-cancelled": "The payment was cancelled. You can try again.",
    "code-wrong": "That is not the buyer's handover code. Check it on their phone and try again.",
}


def when(moment: datetime, zone: str, locale: str) -> str:
    """A deadline as a person reads it: an absolute local date and time as ``locale`` writes
    them (the full date, the short time), with its zone, e.g. "mandag 23. november 2026, 14:05
    (Europe/Oslo)"."""
    local = moment.astimezone(ZoneInfo(zone))
    both = str(get_datetime_format("full", locale=locale)).replace("'", "")
    written = both.replace("{1}", format_date(local, "full", locale=locale)).replace(
        "{0}", format_time(local, "short", locale=locale)
    )
    return f"{written} ({zone})"


def page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    """Render ``template`` in the request's locale; a ``?lang=`` link's choice is remembered."""
    done = request.query_params.get("done") or ""
    zone = request.app.state.settings.time_zone
    locale = page_locale(request)
    context = {
        "done": DONE.get(done),
        "locale": locale,
        "languages": switch_links(request),
        "money": lambda minor, currency: _money(minor, currency, locale),
        "amount_input": lambda minor: "" if minor is None else money.to_input(minor, locale),
        "when": lambda moment: when(moment, zone, locale),
        "typed": {},
        "invalid": {},
        **context,
    }
    if not context.get("error") and done in FAILED:
        context["error"] = FAILED[done]
    response = templates.TemplateResponse(
        request, template, context, status_code=status, headers=PRIVATE
    )
    chosen = request.query_params.get("lang")
    if chosen in LOCALES and request.cookies.get(COOKIE) != chosen:
        secure = request.app.state.settings.base_url.startswith("https://")
        response.set_cookie(
            COOKIE,
            str(chosen),
            max_age=365 * 24 * 3600,
            httponly=True,
            samesite="lax",
            secure=secure,
        )
    return response


def not_found(request: Request) -> Response:
    return templates.TemplateResponse(
        request, "not_found.html", {}, status_code=404, headers=PRIVATE
    )


# Paths of the pages people open in a browser; everything else is the API, answering JSON.
PAGE_PREFIXES = ("/d/", "/o/", "/pay/", "/sandbox/mailbox/")
API_PREFIXES = (
    "/deals/",
    "/oauth2/",
    "/integrations/",
    "/events/",
    "/webhooks/",
    "/webooks/",
    "/sandbox/v1/",
    "/ping",
    "/openapi.json",
    "/docs",
    "/redoc",
    "/.well-known/",
)


def is_page_request(request: Request) -> bool:
    """Whether to answer a person (HTML) rather than a program (problem+json): a page path, or
    a browser asking for a path that is not the API's."""
    path = request.url.path
    if path.startswith(PAGE_PREFIXES) or path == "/":
        return True
    if path.startswith(API_PREFIXES):
        return False
    return "text/html" in request.headers.get("accept", "")


def server_error(request: Request) -> Response:
    """The page a person sees when we fail: what to do, and the request id for support."""
    request_id = request.scope.get("state", {}).get("request_id", "")
    return templates.TemplateResponse(
        request,
        "error.html",
        {"request_id": request_id},
        status_code=500,
        # Answered outside the request-id middleware (Starlette's last-resort handler).
        headers={**PRIVATE, "X-Request-Id": request_id},
    )
