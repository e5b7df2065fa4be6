"""Offers over the API: create an offer link for a buyer; list a deal's offers."""

from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from dealbroker.auth.dependencies import Reader, Writer
from dealbroker.core.db import Session
from dealbroker.core.errors import ERROR_STATUS, problem
from dealbroker.core.idempotency import idempotent
from dealbroker.core.pagination import Paging, page_body
from dealbroker.core.responses import (
    IDEMPOTENCY,
    NOT_FOUND,
    TOO_LARGE,
    UNAUTHORIZED,
    dump,
    require_json,
)
from dealbroker.deals.api import DealId
from dealbroker.offers import service
from dealbroker.offers.schemas import OfferLinkCreate, OfferLinkOut, OfferPage, offer_out

router = APIRouter(tags=["Offers"])


@router.post(
    "/deals/v1/deals/{dealId}/offer",
    operation_id="create_offer_link",
    summary="Create an offer link for a buyer",
    description="Returns the link a buyer opens to send an offer. `price` defaults to the "
    "deal's price; `buyer` prefills the buyer's name and email. The link's query string "
    "ends with `offer=<reference>`: the `offerLinkId` of each offer made through it, in its "
    "`deal.offer` event and in `GET /deals/v1/deals/{dealId}/offers`. The deal must have a "
    "seller with an email and still take offers (`Draft` or `Ad`, no offer approved); its "
    "`allowedActions.createOfferLink` says whether it does.",
    status_code=201,
    response_model=OfferLinkOut,
    dependencies=[Depends(require_json)],
    # The interface lists 201, 400, 401, 403, 404, 405: a body not declared as JSON is its 400,
    # as a body that does not parse is.
    openapi_extra={
        ERROR_STATUS: {"InvalidInput": 405, "NotTakingOffers": 400, "UnsupportedMediaType": 400}
    },
    responses={
        # The interface fixes 400 for a deal that takes no offers: a Conflict kind, answered 400
        # and titled as its status.
        400: problem(
            400,
            "Bad Request",
            "This deal no longer takes offers (status Cancelled).",
            "not-taking-offers",
            label="Bad Request: the deal takes no offers, or the body is not JSON (malformed, "
            "or not declared `application/json`)",
        ),
        401: UNAUTHORIZED,
        403: problem(
            403, "Not Allowed", "This token lacks the scope deals:write.", label="Forbidden"
        ),
        404: NOT_FOUND,
        405: problem(
            405,
            "Invalid input",
            "The request does not match the schema: buyerRedirectUrl: Value error, must be an absolute http(s) URL",
        ),
        413: TOO_LARGE,
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


@router.get(
    "/deals/v1/deals/{dealId}/offers",
    operation_id="list_deal_offers",
    summary="List a deal's offers, newest first",
    description="Every offer buyers made on the deal, whatever became of it (`Pending`, "
    "`Approved`, `Denied`, `Withdrawn`, `Lapsed`), paged like the deal list: `page` from 1, `pageSize` "
    "default 20, at most 100. Each offer's `id` is the `id` in its `deal.offer` event's data, "
    "and `offerLinkId` the `offer` reference of the link it came through.",
    response_model=OfferPage,
    responses={
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: pageSize: must be at most 100",
        ),
        401: UNAUTHORIZED,
        403: problem(403, "Not Allowed", "This token lacks the scope deals:read."),
        404: NOT_FOUND,
    },
)
async def list_offers(
    deal_id: DealId, principal: Reader, session: Session, paging: Paging
) -> Response:
    result = await service.list_page(session, principal, deal_id, paging.number, paging.size)
    items = [offer_out(o) for o in result.offers]
    return Response(
        dump(page_body(paging, result.total_count, items)), media_type="application/json"
    )
