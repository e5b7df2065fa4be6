"""The web pages behind the capability links. The full seller and buyer flows come with the web
issue; these pages already resolve the links and show which deal they are for."""

import uuid
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.templating import Jinja2Templates
from starlette.responses import HTMLResponse, Response

from dealbroker.core import money
from dealbroker.core.db import Session
from dealbroker.deals import repository as deals
from dealbroker.offers import service as offers

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
# Capability pages must not leak their URL to other sites or be cached by intermediaries.
PRIVATE = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Robots-Tag": "noindex"}


def _price(minor: int | None, currency: str) -> str:
    return "—" if minor is None else f"{money.to_string(minor)} {currency}"


def _not_found(request: Request) -> Response:
    return templates.TemplateResponse(
        request, "not_found.html", {}, status_code=404, headers=PRIVATE
    )


@router.get("/o/{token}", response_class=HTMLResponse)
async def offer_page(token: str, request: Request, session: Session) -> Response:
    found = await offers.resolve(session, token, request.query_params.get("offer"))
    if found is None:
        return _not_found(request)
    link, deal = found
    context = {
        "deal": deal,
        "link": link,
        "price": _price(link.price_minor, deal.currency),
    }
    return templates.TemplateResponse(request, "offer.html", context, headers=PRIVATE)


@router.get("/d/{deal_id}/{signature}", response_class=HTMLResponse)
async def seller_page(deal_id: str, signature: str, request: Request, session: Session) -> Response:
    try:
        parsed = uuid.UUID(deal_id)
    except ValueError:
        return _not_found(request)
    if not request.app.state.links.deal_signature_valid(parsed, signature):
        return _not_found(request)
    deal = await deals.by_id(session, parsed)
    if deal is None:
        return _not_found(request)
    context = {"deal": deal, "price": _price(deal.price_minor, deal.currency)}
    return templates.TemplateResponse(request, "seller.html", context, headers=PRIVATE)
