"""``POST /deals/v1/deals/{dealId}/offer``: create an offer link for a buyer."""

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from dealbroker.auth.dependencies import Writer
from dealbroker.core.db import Session
from dealbroker.core.errors import ERROR_STATUS, problem
from dealbroker.core.idempotency import idempotent
from dealbroker.core.responses import dump, require_json
from dealbroker.deals.api import (
    IDEMPOTENCY,
    NOT_FOUND,
    TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED,
    DealId,
)
from dealbroker.offers import service
from dealbroker.offers.schemas import OfferLinkCreate, OfferLinkOut

router = APIRouter(tags=["Offers"])


@router.post(
    "/deals/v1/deals/{dealId}/offer",
    operation_id="create_offer_link",
    summary="Create an offer link for a buyer",
    description="Returns the link a buyer opens to send an offer. `price` defaults to the "
    "deal's price; `buyer` prefills the buyer's name and email. The link's query string "
    "ends with `offer=<reference>`. The deal must have a seller with an email and still take "
    "offers (`Draft` or `Ad`).",
    status_code=201,
    response_model=OfferLinkOut,
    dependencies=[Depends(require_json)],
    openapi_extra={ERROR_STATUS: {"InvalidInput": 405, "NotTakingOffers": 400}},
    responses={
        400: problem(400, "Bad Request", "This deal no longer takes offers (status Cancelled)."),
        401: UNAUTHORIZED,
        403: problem(403, "Forbidden", "This token lacks the scope deals:write."),
        404: NOT_FOUND,
        405: problem(
            405,
            "Invalid input",
            "The request does not match the schema: buyerRedirectUrl: Value error, must be an absolute http(s) URL",
        ),
        413: TOO_LARGE,
        415: UNSUPPORTED,
        422: IDEMPOTENCY,
    },
)
async def create_offer_link(
    deal_id: DealId, body: OfferLinkCreate, request: Request, principal: Writer, session: Session
) -> Response:
    async def produce() -> tuple[int, bytes]:
        links = request.app.state.links
        created = await service.create_link(session, principal, deal_id, body, links.offer_token)
        url = links.offer_url(created.token, created.link.id)
        return 201, dump({"url": url})

    return await idempotent(session, request, principal.integration_id, produce)
