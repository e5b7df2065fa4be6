"""How the seller's and buyer's pages are rendered: templates, words for statuses, headers.

Every page route answers through ``page`` or ``not_found``, so every capability page carries
the same private headers.
"""

import base64
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from ipaddress import ip_address
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from babel.dates import format_datetime
from babel.lists import format_list
from fastapi import Request
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from dealbroker.carriers.qr import qr_svg
from dealbroker.core import i18n, money
from dealbroker.core.clock import from_millis
from dealbroker.core.i18n import LOCALES, N_, _
from dealbroker.parties import reason_read
from dealbroker.web.locale import COOKIE, page_locale, switch_links

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
templates.env.add_extension("jinja2.ext.i18n")
templates.env.policies["ext.i18n.trimmed"] = True  # as babel.cfg extracts them
# The page's words come from the catalogs of the locale its request is worked in (newstyle:
# ``_("... %(name)s", name=...)`` formats and escapes).
templates.env.install_gettext_callables(  # type: ignore[attr-defined]
    i18n.gettext, i18n.ngettext, newstyle=True
)
# Statuses, delivery and package kinds read as words on the pages; the raw name stays in a
# data attribute (tests and scripts read that).
LABELS = {
    "Draft": N_("Draft"),
    "Ad": N_("Open for offers"),
    "Signed": N_("Signed"),
    "Cancelled": N_("Cancelled"),
    "Pickup_Pending": N_("Waiting for the handover"),
    "Pickup_Expired": N_("Handover not confirmed in time"),
    "Pickup_Denied": N_("In dispute"),
    "Shipping_Pending": N_("Waiting to be shipped"),
    "Shipping_Expired": N_("Not shipped in time"),
    "Shipping_In_Progress": N_("On its way"),
    "Shipping_Arrived": N_("Arrived"),
    "Shipping_Returned": N_("Returned to the seller"),
    "Shipping_Review_Denied": N_("In dispute"),
    "Refunded": N_("Refunded"),
    "Completed": N_("Completed"),
    "Created": N_("Payment started"),
    "Processing": N_("Payment in progress"),
    "PaymentFailed": N_("Payment failed"),
    "PaymentCancelled": N_("Payment cancelled"),
    "Paid": N_("Paid, held in escrow"),
    "PendingPayOut": N_("Payout pending"),
    "PaidOut": N_("Paid out"),
    "PayoutFailed": N_("Payout failed"),
    "PayoutCancelled": N_("Payout cancelled"),
    "Pending": N_("Waiting for your answer"),
    "Approved": N_("Approved"),
    "Denied": N_("Declined"),
    "Withdrawn": N_("Withdrawn"),
    "Lapsed": N_("Lapsed"),  # every deal ends
    "Carrier": N_("Sent with a carrier"),
    "Pickup": N_("Picked up in person"),
    "Small": N_("Small"),
    "Medium": N_("Medium"),
    "Large": N_("Large"),
    "XL": N_("Extra large"),
    # Where a parcel we book is delivered (carriers.base.Delivery).
    "mailbox": N_("To the buyer's mailbox"),
    "parcel_locker": N_("To a parcel locker near the buyer"),
    "pickup_point": N_("To a pickup point near the buyer"),
    "iban": N_("IBAN"),
    "account": N_("account number"),
    "swish": N_("Swish number"),
    "seller": N_("seller"),
    "buyer": N_("buyer"),
    "timer": N_("deadline"),
    "provider": N_("payment or carrier"),
    "operator": N_("dealbroker"),
    "integration": N_("marketplace"),
    "sandbox": N_("sandbox"),
    # A step that keeps the status (a return then refund under way) reads as the step.
    "return_requested": N_("In dispute: return then refund decided"),
    "return_sent": N_("In dispute: item sent back"),
}


# What moved a deal, as the history reads it (the back office's dossier beside who did it); the
# raw trigger stays in a data attribute.
TRIGGERS = {
    "created": N_("deal created"),
    "seller_signed": N_("the seller signed"),
    "buyer_signed": N_("the buyer signed"),
    "paid_for_shipping": N_("paid, to be shipped"),
    "paid_for_pickup": N_("paid, to be picked up"),
    "cancel": N_("cancelled"),
    "carrier_picked_up": N_("the carrier picked it up"),
    "carrier_delivered": N_("the carrier delivered it"),
    "carrier_returned": N_("the carrier sent it back"),
    "shipping_expired": N_("not shipped in time"),
    "pickup_expired": N_("handover not confirmed in time"),
    "buyer_approved": N_("the buyer approved the item"),
    "handover_confirmed": N_("the seller confirmed the handover with the code"),
    "buyer_denied": N_("the buyer reported a problem"),
    "review_period_ended": N_("the review period ended"),
    "refund": N_("refunded"),
    "dispute_released": N_("dispute decided: the seller is paid"),
    "dispute_refunded": N_("dispute decided: the buyer is refunded"),
    "buyer_not_received": N_("the buyer reported the parcel missing"),
    "transit_expired": N_("the parcel did not arrive in time"),
    "seller_reported_problem": N_("the seller reported a problem"),
    "approval_lapsed": N_("the approval lapsed"),
    "return_requested": N_("dispute decided: return then refund"),
    "return_sent": N_("the buyer sent the item back"),
    "return_received": N_("the seller confirmed the return"),
    "return_confirm_expired": N_("the return was not confirmed in time"),
    "return_not_sent": N_("the item was not sent back in time"),
}


def label(name: object) -> str:
    """The word a person reads for a status or kind, in the page's language."""
    known = LABELS.get(str(name))
    return _(known) if known is not None else str(name).replace("_", " ")


def trigger_words(trigger: object) -> str:
    """What moved a deal (a history row's trigger), in the page's language."""
    known = TRIGGERS.get(str(trigger))
    return _(known) if known is not None else str(trigger).replace("_", " ")


templates.env.filters["label"] = label


def and_list(items: list[str]) -> str:
    """``items`` joined as the page's language lists them ("a, b og c", "a, b och c")."""
    return format_list(items, locale=i18n.current()) if items else ""


templates.env.filters["and_list"] = and_list
templates.env.filters["trigger"] = trigger_words
templates.env.filters["dispute_reason"] = reason_read
# The audit trail's values as the operator reads them: "Jönköping", not "J\u00f6nk\u00f6ping"
# (``tojson`` still escapes the characters that matter in HTML).
templates.env.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}


def status_words(deal: Any, reader: str, approved: bool = True) -> str:
    """The deal's status as ``reader`` (``seller`` or ``buyer``) reads it on their page. Where
    the status alone would say something untrue to them it is told apart: an ``Ad`` or ``Draft``
    deal with an approved offer takes no more offers, and a buyer whose offer was not the one
    approved (``approved`` False) learns only that the item went to someone else."""
    agreed = deal.buyer_user_id is not None
    if reader == "buyer" and not approved and agreed and deal.status != "Cancelled":
        return _("Sold to another buyer")
    if agreed and deal.status == "Draft":
        if reader == "seller":
            return _("Offer approved: waiting for your signature")
        return _("Your offer is approved: waiting for the seller's signature")
    if agreed and deal.status == "Ad":
        if reader == "seller":
            return _("Offer approved: waiting for the buyer's signature")
        return _("Your offer is approved: waiting for your signature")
    return label(deal.status)


templates.env.globals["status_words"] = status_words


def deal_title(deal: Any) -> str:
    """How a deal is named on the consoles' pages: its name, or for one without a name (the
    API lets a deal be created without one) a placeholder and the start of its id, never
    ``None`` and distinct from the other nameless deals of a list."""
    if deal.name:
        return str(deal.name)
    return f"{_('(no name)')} {str(deal.id)[:8]}"


templates.env.globals["deal_title"] = deal_title
_URL = re.compile(r"https?://[^\s<>\"']+[^\s<>\"'.,;:!?)]")


def with_links(text: str) -> Markup:
    """A message's plain text, escaped, with each web address in it a link (the sandbox's
    outbox, where a login or offer link is to be opened, not copied)."""
    parts: list[str] = []
    end = 0
    for found in _URL.finditer(text):
        parts.append(str(escape(text[end : found.start()])))
        url = escape(found.group(0))
        parts.append(f'<a href="{url}" rel="noreferrer">{url}</a>')
        end = found.end()
    parts.append(str(escape(text[end:])))
    return Markup("".join(parts))


templates.env.filters["with_links"] = with_links
_COMMAND = re.compile(r"`([^`<>]{1,200})`")


def with_commands(text: str) -> Markup:
    """A message's plain text, escaped, with each `command` in it (between backticks, as the
    message and its translations write it) shown as code, the backticks left out: the command
    is what the operator types, the backticks are not."""
    return Markup(_COMMAND.sub(r"<code>\1</code>", str(escape(text))))


_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")


def _origin_source(url: str) -> str | None:
    """``url``'s origin as a CSP source (``https://host:port``), or None when it has none that
    a policy can name safely (another scheme, user info, a host with other characters)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.netloc.rsplit(":", 1)[0] if port is not None else parts.netloc
    if parts.scheme not in ("http", "https") or not _HOST.fullmatch(host):
        return None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def policy(*form_ends: str, extra: str = "") -> str:
    """The pages' Content-Security-Policy: no script, styles only from our stylesheet, never
    inside another site's frame (the pages have one-click actions), and forms that post to our
    own pages only, or end on one of ``form_ends`` (the integration's redirect URLs for this
    page). ``extra`` adds directives (the Stripe checkout's script, frame and connect
    sources)."""
    sources = " ".join(dict.fromkeys(["'self'", *filter(None, map(_origin_source, form_ends))]))
    return (
        f"default-src 'none'; {extra}style-src 'self'; img-src 'self' https: data:; "
        f"form-action {sources}; frame-ancestors 'none'; base-uri 'none'"
    )


# Capability pages must not leak their URL to other sites or be cached by intermediaries.
PRIVATE = {
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex",
    "Content-Security-Policy": policy(),
    "X-Frame-Options": "DENY",
}


def form_ends(request: Request, urls: Iterable[str | None]) -> None:
    """Say where this request's page forms may end besides our own pages: the integration's
    redirect URLs that an action on it answers with (the browser follows that 303 only when
    the page's ``form-action`` names its origin)."""
    request.state.form_ends = [url for url in urls if url]


def _headers(request: Request) -> dict[str, str]:
    ends = list(getattr(request.state, "form_ends", None) or [])
    settings = request.app.state.settings
    if settings.eid_enabled and not settings.eid_simulated:  # signing redirects to the issuer
        ends.append(settings.eid_issuer)
    if not ends:
        return PRIVATE
    return {**PRIVATE, "Content-Security-Policy": policy(*ends)}


DONE = {
    "details": N_("Your changes are saved."),
    "signed": N_("You signed the deal."),
    "approved": N_("You approved the offer; the buyer can now sign and pay."),
    "denied": N_("You declined the offer."),
    "cancelled": N_("The deal is cancelled."),
    "handed": N_("Marked as handed to the carrier."),
    "booking": N_("Your booking is sent to the carrier: the label shows here when it is ready."),
    "parcel-event": N_("The sandbox carrier reported the parcel's news."),
    "delivered": N_("The carrier delivered the item."),
    "returned": N_("The carrier returned the item."),
    "account": N_("Your payout account is saved."),
    "picked-up": N_("Handover confirmed: the deal is complete and your payout is on its way."),
    "account-confirm": N_(
        "We sent a link to your e-mail address: open it to confirm the new payout "
        "account. Until then the money goes to the account shown."
    ),
    "account-changed": N_("The new payout account is confirmed."),
    "offer": N_("Your offer is sent. The seller will answer here."),
    "withdrawn": N_("You withdrew your offer. You can make a new one."),
    "arrived": N_("Thank you: the item has arrived. Please check it and approve it."),
    "item-approved": N_("You approved the item. The seller is paid."),
    "item-denied": N_("You reported a problem. We will look into it and contact you both."),
    "not-received": N_(
        "You reported that the parcel has not arrived. We will look into it and contact you both."
    ),
    # Every deal ends.
    "problem-reported": N_(
        "You reported a problem with the handover. We will look into it and contact you both."
    ),
    "evidence-statement": N_("Your statement is added. The other party and we can read it."),
    "evidence-photo": N_("Your photo is added. The other party and we can see it."),
    # Conversations.
    "message-sent": N_("Your message is sent."),
    "message-reported": N_("Thank you: our support will look at the message you reported."),
    # Disputes decided on evidence: return then refund.
    "return-sent": N_(
        "Thank you: the seller now sees the tracking number. You are refunded once they "
        "confirm that the item is back."
    ),
    "return-received": N_("Thank you: the buyer is being refunded, and the deal ends."),
    "paid": N_("Payment received. Thank you."),
    "logged-out": N_("You are logged out."),
    "operator-added": N_(
        "The operator is added. Give them a login link, or they log in with your identity provider."
    ),
    "operator-changed": N_(
        "The operator is changed. New roles or a disabling end their sessions at once."
    ),
    # The back office's disputes.
    "dispute-decided": N_("The dispute is decided. Both parties are told, with your reason."),
    "dispute-proposed": N_(
        "The decision is proposed. Another operator must approve it before it is carried out."
    ),
    "proposal-approved": N_("The decision is approved and carried out. Both parties are told."),
    "proposal-rejected": N_("The proposed decision is rejected. Nothing was decided."),
    # The back office's money pages.
    "payouts-exported": N_(
        "The bank file is made. Download it and upload it to the bank; it is kept here."
    ),
    "nothing-to-export": N_("Every payout is in a file already: no file was made."),
    "call-retried": N_("The call is queued again: the worker makes it in a moment."),
    "call-retried-before": N_("This call was tried again already: nothing more was queued."),
    "payment-waiting": N_(
        "Your payment is sent. We are waiting for the confirmation from the payment provider; "
        "this page shows it when it has arrived."
    ),
    # The back office's reported messages.
    "message-hidden": N_("The message is hidden from both parties. Its report is closed."),
    "report-dismissed": N_("The report is closed. The message stays as it is."),
    "party-blocked": N_("That party can no longer write on this deal."),
    "party-unblocked": N_("That party can write on this deal again."),
    # The developer portal.
    "member-added": N_("The member is added. They log in with a link sent to their address."),
    "member-changed": N_("The member's role is changed."),
    "member-removed": N_("The member is removed; their sessions have ended."),
    # The back office.
    "integration-disabled": N_("The integration is disabled: its tokens are revoked."),
    "integration-enabled": N_("The integration is enabled: it must ask for new tokens."),
}


def _money(minor: int | None, currency: str, locale: str) -> str:
    return "—" if minor is None else money.to_text(minor, currency, locale)


# Outcomes of an action that was taken but did not succeed, shown as an error after the
# redirect (a wrong handover code is counted, so it cannot be a rolled-back refusal).
FAILED = {
    "payment-failed": N_("The payment did not go through. You can try again."),
    "payment-cancelled": N_("The payment was cancelled. You can try again."),
    "code-wrong": N_(
        "That is not the buyer's handover code. Check it on their phone and try again."
    ),
}


def page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    """Render ``template`` in the request's locale; a ``?lang=`` link's choice is remembered."""
    done = request.query_params.get("done") or ""
    zone = request.app.state.settings.time_zone
    locale = i18n.current()  # the page's, set for the whole request by PageLocaleMiddleware
    context = {
        "done": _(DONE[done]) if done in DONE else None,
        "locale": locale,
        "languages": switch_links(request),
        "money": lambda minor, currency: _money(minor, currency, locale),
        "amount_input": lambda minor: "" if minor is None else money.to_input(minor, locale),
        "when": lambda moment: i18n.when(moment, ZoneInfo(zone)),
        "moment": lambda moment: format_datetime(
            moment, "short", tzinfo=ZoneInfo(zone), locale=locale
        ),
        "typed": {},
        "invalid": {},
        "eid_signing": request.app.state.settings.eid_enabled,
        **context,
    }
    if not context.get("error") and done in FAILED:
        context["error"] = _(FAILED[done])
    response = templates.TemplateResponse(
        request, template, context, status_code=status, headers=_headers(request)
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
        request, "not_found.html", {"locale": i18n.current()}, status_code=404, headers=PRIVATE
    )


def outbox_readable(request: Request) -> bool:
    """Whether this request may read the outbox page: a local sandbox (``local_outbox``) and a
    browser connected from this machine (a loopback address)."""
    if not request.app.state.settings.local_outbox:
        return False
    host = request.client.host if request.client else ""
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


# Paths of the pages people open in a browser; everything else is the API, answering JSON.
PAGE_PREFIXES = (
    "/d/",
    "/o/",
    "/pay/",
    "/eid/",
    "/sandbox/mailbox/",
    "/sandbox/parcels/",
    "/back-office/",
    "/portal/",
)
PAGE_PATHS = ("/", "/conditions", "/sandbox/outbox")
API_PREFIXES = (
    "/deals/",
    "/payments/",
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
    return is_page_scope(request.scope)


def is_page_scope(scope: Scope) -> bool:
    """``is_page_request`` read off the ASGI scope, without building a request and its URL
    (every request passes through ``PageLocaleMiddleware``, which asks)."""
    path = scope["path"]
    if path.startswith(PAGE_PREFIXES) or path in PAGE_PATHS:
        return True
    if path.startswith(API_PREFIXES):
        return False
    for name, value in scope["headers"]:
        if name == b"accept":
            return b"text/html" in value
    return False


def server_error(request: Request) -> Response:
    """The page a person sees when we fail: what to do, and the request id for support."""
    request_id = request.scope.get("state", {}).get("request_id", "")
    # Answered outside the middleware that sets the page's locale: set it here.
    i18n.use(page_locale(request))
    return templates.TemplateResponse(
        request,
        "error.html",
        {"request_id": request_id, "locale": i18n.current()},
        status_code=500,
        headers=PRIVATE,
    )


class PageLocaleMiddleware:
    """A request for a page is worked in the page's locale from its start, so everything it
    says (a refusal raised by a rule, then the page itself) reads in the reader's language. The
    API, answering programs, stays in English."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and is_page_scope(scope):
            with i18n.using(page_locale(Request(scope))):
                await self.app(scope, receive, send)
            return
        await self.app(scope, receive, send)


# --- what the carrier said about the parcel, as both pages list it (deals.shipments) ---
CARRIER_SAID = {
    "booked": N_("The parcel is booked with %(carrier)s"),
    "picked_up": N_("%(carrier)s picked the parcel up"),
    "in_transit": N_("The parcel is on its way with %(carrier)s"),
    "ready_for_pickup": N_("The parcel is ready to be collected"),
    "delivered": N_("%(carrier)s delivered the parcel"),
    "returned": N_("%(carrier)s returned the parcel to the seller"),
    "lost": N_("%(carrier)s has lost the parcel"),
    "damaged": N_("%(carrier)s reports that the parcel was damaged"),
}


@dataclass(frozen=True)
class CarrierNews:
    """One carrier event as the pages list it: when, what in the reader's words, and what the
    carrier gave with it (its own words, where, and where the buyer collects the parcel)."""

    at: datetime
    type: str
    carrier: str
    said: str
    words: str | None = None
    location: str | None = None
    pickup_point: str | None = None


def carrier_log(events: list[dict[str, Any]]) -> list[CarrierNews]:
    """Each recorded carrier event, in the page's language, oldest first. The carrier's own
    words (in English, from Bring and the sandbox's carrier) are quoted on English pages only:
    a page in Norwegian or Swedish says it all in its own words."""
    english = i18n.current() == "en"
    return [
        CarrierNews(
            from_millis(e["occurredAt"]),
            e["type"],
            e["carrier"],
            said_by(CARRIER_SAID[e["type"]], e["carrier"]),
            e.get("description") if english else None,
            e.get("location"),
            e.get("pickupPoint"),
        )
        for e in events
        if e.get("type") in CARRIER_SAID
    ]


def said_by(words: str, carrier: str) -> str:
    """One of ``CARRIER_SAID``'s texts, in the page's language, naming ``carrier``."""
    return _(words) % {"carrier": carrier}


def qr_code(parcel: Any) -> Markup | None:
    """The parcel's code to show at the counter: the carrier's own QR image, inline (a
    ``data:`` PNG the booking fetched; nothing is fetched from the page), or else the carrier's
    text drawn as an inline SVG QR code; None where it has neither."""
    if parcel is None:
        return None
    title = _("QR code to show at the counter")
    if parcel.qr_png:
        encoded = base64.b64encode(parcel.qr_png).decode("ascii")
        return Markup('<img class="qr-code" src="data:image/png;base64,{}" alt="{}">').format(
            encoded, title
        )
    if not parcel.qr_code:
        return None
    return Markup(qr_svg(parcel.qr_code, title=title))


def label_pdf(parcel: Any) -> Response:
    """A parcel's label, to download and print (the page's private headers)."""
    name = f"label-{parcel.tracking_number or parcel.reference}.pdf"
    return Response(
        bytes(parcel.label_pdf),
        media_type="application/pdf",
        headers={
            **PRIVATE,
            "Content-Disposition": f'attachment; filename="{_safe_name(name)}"',
            "X-Content-Type-Options": "nosniff",
        },
    )


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "", name)[:120] or "label.pdf"
