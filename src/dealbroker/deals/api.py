"""Routes of the deal endpoints: parse, call the deal service, render."""

import hashlib
import uuid
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Request
from starlette.responses import Response

from dealbroker.auth.dependencies import Reader, Writer
from dealbroker.auth.service import Principal
from dealbroker.core.clock import from_millis
from dealbroker.core.db import Session
from dealbroker.core.errors import ERROR_STATUS, problem
from dealbroker.core.fastpath.routes import DirectRoute
from dealbroker.core.idempotency import Claim, idempotent
from dealbroker.core.pagination import Paging, page_body
from dealbroker.core.responses import (
    FORBIDDEN,
    IDEMPOTENCY,
    NOT_FOUND,
    TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED,
    dump,
    require_json,
)
from dealbroker.deals import actions, flows, service, shipments
from dealbroker.deals.flows import deadline_days
from dealbroker.deals.lifecycle import DeadlineDays
from dealbroker.deals.models import DealFields, NewDeal
from dealbroker.deals.schemas import (
    SHIPMENT_EXAMPLE,
    DealCreate,
    DealOut,
    DealPage,
    LifecycleOut,
    ShipmentEventIn,
    StatusChange,
    deal_out,
    lifecycle_out,
)

router = APIRouter(tags=["Deals"], route_class=DirectRoute)

DealId = Annotated[uuid.UUID, Path(alias="dealId", description="The deal's id (uuid).")]
# Create deal lists 201, 401, 403 and 405 "Invalid input": a body that is no JSON at all (not
# declared as JSON, or not parsing), or an unusable Idempotency-Key, is invalid input too, so
# 405, never 400 or 415 (``BadRequest`` covers ``MalformedJson``).
CREATE_ERROR_STATUS = {
    ERROR_STATUS: {"InvalidInput": 405, "BadRequest": 405, "UnsupportedMediaType": 405}
}


def _renderer(request: Request, principal: Principal) -> Callable[[DealFields], dict[str, object]]:
    """What makes a deal's body, with what this caller may do to it now. The app's settings
    and links are looked up once per request, not once for each deal of a list, and the
    allowed actions worked out once for each status (``actions.for_caller``)."""
    state = request.app.state
    deal_url = state.links.deal_url
    allowed = actions.for_caller(principal.scopes, actions.api_actor(state.settings))
    paid_by = state.settings.shipping_paid_by

    def out(deal: DealFields) -> dict[str, object]:
        return deal_out(deal, deal_url(deal.id), allowed(deal), paid_by)

    return out


def _json(request: Request, principal: Principal, deal: DealFields) -> bytes:
    return dump(_renderer(request, principal)(deal))


@router.post(
    "/deals/v1/deals",
    operation_id="create_deal",
    summary="Create a deal",
    description="Creates a deal in status `Draft` and returns it with the seller's management `url`. "
    "Seller data (with an email) is needed if offer links are to be used. Send an "
    "`Idempotency-Key` header to make retries safe.",
    status_code=201,
    response_model=DealOut,
    dependencies=[Depends(require_json)],
    openapi_extra=CREATE_ERROR_STATUS,
    responses={
        401: UNAUTHORIZED,
        403: FORBIDDEN,
        405: {
            **problem(
                405,
                "Invalid input",
                "The request does not match the schema: packageType: Input should be 'Small', "
                "'Medium', 'Large' or 'XL'",
            ),
            "description": "Invalid input: a body that breaks the schema (`errors` names each "
            "field; type `invalid-input`), that is not JSON (type `malformed-json`), is missing, "
            "or is not declared `application/json` (type `unsupported-media-type`), or an "
            "`Idempotency-Key` that is not 1 to 255 printable ASCII characters (type "
            "`bad-request`)",
        },
        413: TOO_LARGE,
        422: IDEMPOTENCY,
    },
)
async def create_deal(
    body: DealCreate, request: Request, principal: Writer, session: Session
) -> Response:
    currency = request.app.state.settings.currency
    alone = request.app.state.driver_statements

    async def produce() -> tuple[int, bytes]:
        deal = await service.create(session, principal, body, currency, alone=alone)
        return 201, _json(request, principal, deal)

    async def produce_claiming(key: Claim) -> tuple[int, bytes] | None:
        # The answer is known before the deal is stored: it is stored with the key, at once.
        claimed: list[Claim] = []

        def claim(deal: NewDeal) -> Claim:
            claimed.append(key.answering(201, _json(request, principal, deal)))
            return claimed[0]

        stored = await service.create_claiming(
            session, principal, body, currency, claim, alone=alone
        )
        if stored is None:
            return None
        return claimed[0].status, claimed[0].body

    return await idempotent(session, request, principal.integration_id, produce, produce_claiming)


@router.get(
    "/deals/v1/deals",
    operation_id="list_deals",
    summary="List your deals, newest first",
    description=(
        "The deals this integration created, newest first, a page at a time (`page`, "
        "`pageSize`); `page` in the answer gives the totals. The interface lists 200, 401 and "
        "403 only: a page parameter out of range or not an integer is never refused, but read "
        "as the nearest valid value; the page object gives the `pageNumber` and `pageSize` "
        "used and names the parameter in `adjusted`."
    ),
    response_model=DealPage,
    responses={
        401: UNAUTHORIZED,
        403: problem(403, "Not Allowed", "This token lacks the scope deals:read."),
    },
)
async def list_deals(request: Request, principal: Reader, paging: Paging) -> Response:
    reads = request.app.state.driver_statements
    result = await service.list_page(reads, principal, paging.number, paging.size)
    out = _renderer(request, principal)
    items = [out(d) for d in result.deals]
    return Response(
        dump(page_body(paging, result.total_count, items)), media_type="application/json"
    )


@router.get(
    "/deals/v1/deals/{dealId}",
    operation_id="get_deal",
    summary="Get one deal",
    description=(
        "The deal with its status, seller, payment status and the actions the caller may "
        "take now (`allowedActions`). 404 for a deal of another integration."
    ),
    response_model=DealOut,
    responses={
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: dealId: Input should be a valid UUID",
        ),
        401: UNAUTHORIZED,
        403: problem(403, "Not Allowed", "This token lacks the scope deals:read."),
        404: NOT_FOUND,
    },
)
async def get_deal(deal_id: DealId, request: Request, principal: Reader) -> Response:
    deal = await service.read(request.app.state.driver_statements, principal, deal_id)
    return Response(dump(_renderer(request, principal)(deal)), media_type="application/json")


STATUS_DOC: dict[str, Any] = dict(
    summary="Change a deal's status",
    description='Body `{"status": "Cancelled"}`. An integration may cancel a deal before '
    "payment (from `Draft`, `Ad` or `Signed`). In the sandbox it may fire any legal "
    "transition of the lifecycle to test its flows. An illegal change is 409 with the "
    "statuses allowed from the current one.",
    response_model=DealOut,
    dependencies=[Depends(require_json)],
    responses={
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: status: Input should be 'Draft', 'Ad', …",
        ),
        401: UNAUTHORIZED,
        403: FORBIDDEN,
        404: NOT_FOUND,
        409: problem(
            409,
            "Conflict",
            "A deal in status Cancelled cannot move to Cancelled; no change is allowed from here.",
            "illegal-transition",
        ),
        413: TOO_LARGE,
        415: UNSUPPORTED,
        422: IDEMPOTENCY,
    },
)


# The interface lists the path without ``/v1`` too: the same operation (registered second).
@router.post("/deals/{dealId}/status", operation_id="change_deal_status_alias", **STATUS_DOC)
@router.post("/deals/v1/deals/{dealId}/status", operation_id="change_deal_status", **STATUS_DOC)
async def change_status(
    deal_id: DealId, body: StatusChange, request: Request, principal: Writer, session: Session
) -> Response:
    async def produce() -> tuple[int, bytes]:
        settings = request.app.state.settings
        deal = await flows.change_status(session, principal, deal_id, body.status, settings)
        return 200, _json(request, principal, deal)

    return await idempotent(session, request, principal.integration_id, produce)


@router.post(
    "/deals/v1/deals/{dealId}/shipment-events",
    operation_id="report_shipment_event",
    summary="Report a carrier event about the deal's parcel",
    description="For an integration that books the shipment for its users: what the carrier "
    "says about the parcel. `picked_up` is the hand-over when the deal is still "
    "`Shipping_Pending` (it moves to `Shipping_In_Progress` and the transit deadline starts); "
    "`picked_up` and `in_transit` are otherwise recorded while the parcel is in transit. "
    "`delivered` moves the deal to `Shipping_Arrived` (the buyer's 24 hours to review start), "
    "`returned` to `Shipping_Returned` (the buyer is refunded in full). Each event is shown to "
    "both parties with its time and emitted as a `deal.shipment` event (then the `deal.status` "
    "it causes, if any). An event that makes no sense for the deal's status is 409 with the "
    "current status; the same event reported again changes nothing. A parcel dealbroker booked "
    "itself (a deployment with a carrier, docs/shipping.md) is followed on the carrier's own "
    "events: reports for it are 409. Send an `Idempotency-Key` header to make retries safe.",
    response_model=DealOut,
    dependencies=[Depends(require_json)],
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {
                    "examples": {
                        "delivered": {"value": SHIPMENT_EXAMPLE},
                        "picked_up": {"value": {**SHIPMENT_EXAMPLE, "type": "picked_up"}},
                    }
                }
            }
        }
    },
    responses={
        400: problem(
            400,
            "Invalid input",
            "occurredAt must lie between 90 days ago and one hour from now.",
        ),
        401: UNAUTHORIZED,
        403: FORBIDDEN,
        404: NOT_FOUND,
        409: problem(
            409,
            "Conflict",
            "A deal in status Completed cannot move to carrier_delivered; no change is allowed "
            "from here.",
            "illegal-transition",
        ),
        413: TOO_LARGE,
        415: UNSUPPORTED,
        422: IDEMPOTENCY,
    },
)
async def report_shipment_event(
    deal_id: DealId, body: ShipmentEventIn, request: Request, principal: Writer, session: Session
) -> Response:
    event = shipments.CarrierEvent(
        type=shipments.ShipmentEventType(body.type),
        carrier=body.carrier,
        tracking_number=body.trackingNumber,
        occurred_at=from_millis(body.occurredAt),
    )

    async def produce() -> tuple[int, bytes]:
        settings = request.app.state.settings
        deal = await shipments.report_for(
            session, principal.integration_id, deal_id, event, settings
        )
        return 200, _json(request, principal, deal)

    return await idempotent(session, request, principal.integration_id, produce)


# The table changes only with a release: clients may keep it an hour, then revalidate cheaply.
LIFECYCLE_CACHE = "private, max-age=3600"


@cache
def _lifecycle_body(days: DeadlineDays) -> tuple[bytes, str]:
    """The published table and its strong ETag, made once per process (the same in each)."""
    body = dump(lifecycle_out(days))
    return body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def _matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110 13.1.2: weak comparison of ``etag`` with each tag listed (or ``*``)."""
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or etag in tags


@router.get(
    "/deals/v1/lifecycle",
    operation_id="get_lifecycle",
    summary="The deal lifecycle: every status and transition",
    description="The lifecycle table the service enforces, built from the table in the code: "
    "every status (final or not), every transition (from, trigger, to, who may fire it, the "
    "deadline it sets and its other effects). The same for every integration; it changes only "
    "with a release (or the deployment's transit deadline setting). "
    "Answers with an `ETag` and `Cache-Control: " + LIFECYCLE_CACHE + "`; send "
    "`If-None-Match` to get 304 when it has not changed. An integration may POST to "
    "`/deals/v1/deals/{dealId}/status` the transitions whose actors include `integration` "
    "(`sandbox` in the sandbox); each deal's `allowedActions` says which, right now.",
    response_model=LifecycleOut,
    responses={
        304: {"description": "Not Modified: the `If-None-Match` ETag is current."},
        401: UNAUTHORIZED,
        403: problem(403, "Not Allowed", "This token lacks the scope deals:read."),
    },
)
async def get_lifecycle(
    request: Request,
    principal: Reader,
    if_none_match: Annotated[
        str | None, Header(description="An ETag from an earlier answer: 304 if still current.")
    ] = None,
) -> Response:
    body, etag = _lifecycle_body(deadline_days(request.app.state.settings))
    headers = {"ETag": etag, "Cache-Control": LIFECYCLE_CACHE}
    if if_none_match is not None and _matches(if_none_match, etag):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)
