"""The sandbox triggers at ``/webhooks/v1/...`` and the interface index's ``/webooks/v1/...``.

Authenticated by the ``webhook-secret`` header alone (403 for an integration without
``deals:write``); served only in the sandbox environment (404 elsewhere). A deal of another
integration answers exactly as an unknown one: a trigger's ``dealId`` that names no deal of the
caller's is invalid input (400, as the interface lists), the deal clock's path a 404. Schema
violations are 405, malformed JSON 400, as the interface lists.
"""

import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Path, Request
from fastapi.routing import APIRoute
from starlette.responses import Response

from dealbroker.auth.dependencies import limit_integration
from dealbroker.core import callers, logs
from dealbroker.core.db import Session
from dealbroker.core.errors import ERROR_STATUS, problem
from dealbroker.core.idempotency import idempotent
from dealbroker.core.responses import IDEMPOTENCY, dump, require_json, require_json_if_body
from dealbroker.core.settings import Settings
from dealbroker.deals import actions
from dealbroker.deals.models import Deal
from dealbroker.deals.schemas import deal_out
from dealbroker.events import service as events
from dealbroker.integrations.models import Integration
from dealbroker.sandbox import scenarios, schemas, service

PREFIXES = ("/webhooks/v1", "/webooks/v1")


class SecretFirstRoute(APIRoute):
    """Checks the ``webhook-secret`` before FastAPI reads the body, so a caller without a valid
    secret learns nothing from the body's handling (401 whatever it sent)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            async with request.app.state.sessionmaker() as session, session.begin():
                found = await service.integration_for(
                    session, request.headers.get("webhook-secret")
                )
            callers.identify(request.scope, found.id)  # the integration's request log's
            return await handler(request)

        return guarded


# Mounted only when the environment is the sandbox: elsewhere these paths do not exist (404).
router = APIRouter(tags=["Sandbox"], route_class=SecretFirstRoute)


async def _integration(request: Request, session: Session) -> Integration:
    integration = await service.integration_for(session, request.headers.get("webhook-secret"))
    logs.bind(integration_id=integration.id)
    await limit_integration(request, integration.id)
    return integration


Caller = Annotated[Integration, Depends(_integration)]
COMMON: dict[str, Any] = dict(
    # No body at all is allowed (dummy data); a body must be JSON.
    dependencies=[Depends(require_json_if_body)],
    openapi_extra={
        ERROR_STATUS: {"InvalidInput": 405, "NotTakingOffers": 400},
        "security": [{"WebhookSecret": []}],
    },
)
ERRORS: dict[int | str, dict[str, Any]] = {
    400: problem(400, "Bad Request", "Malformed JSON body: Expecting value", "malformed-json"),
    401: problem(401, "Not Authorized", "The webhook-secret is not valid."),
    403: problem(403, "Not Allowed", "This integration lacks the scope deals:write."),
    # Unknown, or another integration's: the two answers are the same, as on the deals API.
    404: problem(404, "Not Found", "No deal 3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10."),
    405: problem(
        405,
        "Invalid input",
        "The request does not match the schema: signatureType: Input should be 'Seller' or 'Buyer'",
    ),
    409: problem(
        409, "Conflict", "A buyer signature cannot complete on a deal in status Cancelled."
    ),
    415: problem(
        415, "Unsupported Media Type", "The body must be application/json, not text/plain."
    ),
    422: IDEMPOTENCY,
}


def _result(
    request: Request, session: Any, integration: Integration, deal: Deal | None
) -> Response:
    deal_body = None
    if deal is not None:
        actor = actions.api_actor(request.app.state.settings)
        allowed = actions.allowed_actions(deal, integration.scope_list, actor)
        deal_body = deal_out(
            deal,
            request.app.state.links.deal_url(deal.id),
            allowed,
            request.app.state.settings.shipping_paid_by,
        )
    body = {
        "events": [orjson.loads(e.payload) for e in events.emitted(session)],
        "deal": deal_body,
    }
    return Response(dump(body), media_type="application/json")


def _replayed(response: Response) -> dict[str, str]:
    flag = response.headers.get("idempotent-replayed")
    return {"Idempotent-Replayed": flag} if flag else {}


UNKNOWN_DEAL = (
    "a `dealId` that names no deal of yours (another integration's answers the same), an offer "
    "`id` that names no offer of the deal"
)
# Every trigger: the body's dealId names no deal of the caller's, which is input, not a path:
# 400 (the interface's "Invalid input" for signatureStatus and dealOffer), never a 404.
TRIGGER_ERRORS: dict[int | str, dict[str, Any]] = {
    **{k: v for k, v in ERRORS.items() if k not in (404, 415)},
    400: {
        **problem(
            400,
            "Invalid input",
            "No deal 3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10.",
            "unknown-reference",
        ),
        "description": "Invalid input: malformed JSON, a body not declared "
        "`application/json`, or " + UNKNOWN_DEAL,
    },
}
# signatureStatus and dealOffer: the interface lists no 409, so a deal that cannot take the
# effect (a closed deal; an offer on a deal past its approval) answers its 400.
REFUSED_AS_400: dict[int | str, dict[str, Any]] = {
    **{k: v for k, v in TRIGGER_ERRORS.items() if k != 409},
    400: {
        **problem(
            400,
            "Bad Request",
            "A deal in status Completed cannot reach a signature: no path of the lifecycle "
            "leads out of it.",
            "illegal-transition",
        ),
        "description": "Invalid input: malformed JSON, a body not declared "
        "`application/json`, "
        + UNKNOWN_DEAL
        + ", an effect no path of the lifecycle reaches from the deal's status (a closed deal; "
        "an offer on a deal past its approved offer), or an offer without a price on a deal "
        "that has none",
    },
}
PREFER = {
    "name": "Prefer",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "example": "return=representation"},
    "description": "`return=representation`: answer 200 with the emitted events and the deal "
    "instead of the interface's 204 with no body.",
}


# What a trigger does: its effect on the deal (through the real flows), the deal after it.
Effect = Callable[[Any, Integration, Any, Settings], Awaitable[Deal | None]]


def _register(
    name: str,
    summary: str,
    description: str,
    model: type,
    effect: Effect,
    status_code: int = 200,
    refused_as_400: bool = False,
) -> None:
    async def endpoint(
        request: Request,
        session: Session,
        integration: Caller,
        body: model | None = None,  # type: ignore[valid-type]
    ) -> Response:
        async def produce() -> tuple[int, bytes]:
            given = body if body is not None else model()
            deal = await effect(session, integration, given, request.app.state.settings)
            if status_code == 204 and "return=representation" not in request.headers.get(
                "prefer", ""
            ):
                return 204, b""
            response = _result(request, session, integration, deal)
            return response.status_code, bytes(response.body)

        response = await idempotent(session, request, integration.id, produce)
        if response.status_code == 204:
            return Response(status_code=204, headers=_replayed(response))
        return response

    extra = dict(COMMON["openapi_extra"])
    # A body not declared as JSON is the interface's 400 "Invalid input", as one that does not
    # parse (signatureStatus and dealOffer list no 415; the others answer alike).
    extra[ERROR_STATUS] = {**extra[ERROR_STATUS], "UnsupportedMediaType": 400}
    responses = TRIGGER_ERRORS
    if refused_as_400:
        extra[ERROR_STATUS] = {**extra[ERROR_STATUS], "Conflict": 400}
        responses = REFUSED_AS_400
    if status_code == 204:
        extra["parameters"] = [*extra.get("parameters", []), PREFER]
        responses = {
            **responses,
            200: {
                "model": schemas.TriggerResult,
                "description": "With `Prefer: return=representation`",
            },
        }
    for prefix in PREFIXES:
        alias = prefix == "/webooks/v1"
        router.add_api_route(
            f"{prefix}/{name}",
            endpoint,
            methods=["POST"],
            operation_id=f"sandbox_{name}" + ("_alias" if alias else ""),
            summary=summary + (" (alias path)" if alias else ""),
            description=description,
            status_code=status_code,
            response_model=None if status_code == 204 else schemas.TriggerResult,
            responses=responses,
            dependencies=COMMON["dependencies"],
            openapi_extra=extra,
        )


async def _offer(
    session: Any, integration: Integration, body: Any, settings: Settings
) -> Deal | None:
    return await service.deal_offer(session, integration, body)


async def _approve(
    session: Any, integration: Integration, body: Any, settings: Settings
) -> Deal | None:
    return await service.offer_decision(session, integration, body, True, settings)


async def _deny(
    session: Any, integration: Integration, body: Any, settings: Settings
) -> Deal | None:
    return await service.offer_decision(session, integration, body, False, settings)


WITH_DEAL = (
    " With a `dealId` the effect is applied to that deal through the real flow and its "
    "events are emitted; where the deal's status does not allow the effect yet, the deal is "
    "first fast-forwarded along the lifecycle (sandbox seller, buyer and offer where missing, "
    "the signatures, a payment), every step with its real events, in order. Only an effect no "
    "path reaches is refused. Without a `dealId`, the event is sent with dummy data."
)
ANSWERS = " Answers the emitted events, in order, and the deal."

_register(
    "signatureStatus",
    "Simulate signature.status",
    "The deal becomes `Signed` (the interface: always), whatever the `status` and the "
    "`signatureType`: the buyer's, or one with no type, fast-forwards a `Draft` or `Ad` deal to "
    "where the buyer signs; the seller's signs a `Draft` (`Ad`), or is sent again for an `Ad` "
    "deal, and a sandbox buyer is then approved and signs. The event asked for is sent as "
    "asked; an `Initiated` signature is then completed, a `Failed` one started again "
    "(`Initiated`) and completed, so the deal still ends `Signed`. A deal already past the "
    "signature gets the signature's event again, as asked, and stays where it is; a closed deal "
    "(`Completed`, `Refunded`, `Cancelled`) is refused with 400." + WITH_DEAL + ANSWERS,
    schemas.SignatureStatusTrigger,
    service.signature_status,
    refused_as_400=True,
)
_register(
    "dealOffer",
    "Simulate deal.offer",
    "Creates a pending offer on the deal (default buyer and shipping `Carrier` when not "
    "given); a draft without a seller e-mail gets the sandbox seller's. A deal past its "
    "approved offer, or closed, takes no offers (400); on a deal without a price the offer must "
    "name one (400, with `errors` naming `price`). Answers 204 with no body, or, with "
    "`Prefer: return=representation`, 200 with the emitted events and the deal." + WITH_DEAL,
    schemas.DealOfferTrigger,
    _offer,
    status_code=204,
    refused_as_400=True,
)
_register(
    "dealOfferApproved",
    "Simulate deal.offerApproved",
    "Approves the given pending offer, or the deal's oldest (a sandbox buyer's offer is made "
    "first when there is none); the other pending offers are denied." + WITH_DEAL + ANSWERS,
    schemas.OfferDecisionTrigger,
    _approve,
)
_register(
    "dealOfferDenied",
    "Simulate deal.offerDenied",
    "Denies the given pending offer, or the deal's oldest (a sandbox buyer's offer is made "
    "first when there is none)." + WITH_DEAL + ANSWERS,
    schemas.OfferDecisionTrigger,
    _deny,
)
_register(
    "paymentStatus",
    "Simulate payment.status",
    "Sets the deal's payment status (default `Paid`), walking the payment table. A payment "
    "needs a `Signed` deal (`Paid` moves it on to `Shipping_Pending` or `Pickup_Pending`), a "
    "payout status a `Completed` one and `Refunded` a refunded one: the deal is "
    "fast-forwarded there first (409 when no path leads there)." + WITH_DEAL + ANSWERS,
    schemas.PaymentStatusTrigger,
    service.payment_status,
)
_register(
    "dealStatus",
    "Simulate deal.status",
    "Moves the deal to `status` along the shortest path of the lifecycle (409, with the "
    "statuses it can reach, when none leads there)." + WITH_DEAL + ANSWERS,
    schemas.DealStatusTrigger,
    service.deal_status,
)


_register(
    "parcelEvent",
    "Simulate the carrier's event about the deal's parcel",
    "With the sandbox's carrier (`DEALBROKER_CARRIER=simulated`): the carrier tells `type` "
    "about the deal's parcel, pushed, signed and taken through the same handler as Bring's "
    "Event Cast pushes, so the deal moves as a real parcel would move it (`picked_up`: "
    "`Shipping_In_Progress`; `delivered`: `Shipping_Arrived`; `ready_for_pickup`: recorded, "
    "the buyer told where to collect it; `returned`: "
    "refunded less the shipping; `lost`: the dispute; `damaged`: recorded). A deal with no "
    "parcel booked is first fast-forwarded to `Shipping_Pending` as a Carrier deal and its "
    "parcel booked, every step with its real events. An event that cannot move the deal now "
    "is recorded only, as a real carrier's late event. A `dealId` is required (405 without). "
    "409 without the sandbox's carrier, for a Pickup deal or a closed one." + ANSWERS,
    schemas.ParcelEventTrigger,
    service.parcel_event,
)


@router.post(
    "/sandbox/v1/clock/advance",
    operation_id="sandbox_advance_clock",
    summary="Move your sandbox clock ahead so deal deadlines fire now",
    description="Every pending deadline of your deals (7 days to ship or pick up, the transit "
    "deadline after the hand-over, 24 hours to review, an open dispute's decision date) comes "
    "`seconds` closer; those now due fire at once, through the real lifecycle, with their "
    "events. To move one deal only, move its own clock "
    "(`POST /sandbox/v1/deals/{dealId}/clock/advance`). Authenticated by `webhook-secret`; "
    "sandbox only.",
    response_model=schemas.ClockAdvanced,
    dependencies=[Depends(require_json)],
    openapi_extra=COMMON["openapi_extra"],
    responses={k: v for k, v in ERRORS.items() if k in (400, 401, 403, 405, 415, 422)},
)
async def advance_clock(body: schemas.ClockAdvance, request: Request) -> Response:
    # Its own transactions, not the request's: the due timers are fired after the move commits,
    # each in a transaction of its own (and SQLite allows one writer at a time).
    sessionmaker = request.app.state.sessionmaker
    async with sessionmaker() as session, session.begin():
        integration = await service.integration_for(session, request.headers.get("webhook-secret"))

        async def produce() -> tuple[int, bytes]:
            offset, moved = await service.advance_clock(session, integration, body.seconds)
            return 200, dump({"clockOffsetSeconds": offset, "timersMoved": moved})

        response = await idempotent(session, request, integration.id, produce)
    fired = await service.let_time_pass(sessionmaker, request.app.state.settings)
    replayed = response.headers.get("idempotent-replayed")
    return Response(
        dump({**orjson.loads(response.body), "timersFired": fired}),
        media_type="application/json",
        headers={"Idempotent-Replayed": replayed} if replayed else None,
    )


DealPath = Annotated[uuid.UUID, Path(alias="dealId", description="The deal's id (uuid).")]
DEAL_CLOCK_ERRORS: dict[int | str, dict[str, Any]] = {
    k: v for k, v in ERRORS.items() if k in (400, 401, 403, 404, 405, 415, 422)
}


@router.post(
    "/sandbox/v1/deals/{dealId}/clock/advance",
    operation_id="sandbox_advance_deal_clock",
    summary="Move one deal's own test clock ahead; your other deals keep their time",
    description="A test clock of the deal's own, as the integration's clock is yours: the "
    "deal's pending deadlines (7 days to ship or pick up, the transit deadline after the "
    "hand-over, 24 hours to review, the approved buyer's time to pay, a return's, an open "
    "dispute's decision date) come `seconds` closer, and the deal's `clockOffsetSeconds` grows "
    "by `seconds`; your other deals are left alone. The deal's offset adds to your "
    "integration's: a deal moved 2 days ahead, then your clock 1 day, is 3 days ahead. Those "
    "deadlines now due fire at once, through the real lifecycle, with their webhooks in "
    "order. Two moves of one deal at the same time both count. With an `Idempotency-Key`, a "
    "repeated request moves nothing again. 404 for a deal of another integration. "
    "Authenticated by `webhook-secret`; sandbox only.",
    response_model=schemas.DealClockAdvanced,
    dependencies=[Depends(require_json)],
    openapi_extra=COMMON["openapi_extra"],
    responses=DEAL_CLOCK_ERRORS,
)
async def advance_deal_clock(
    deal_id: DealPath, body: schemas.ClockAdvance, request: Request
) -> Response:
    # Its own transactions, as the integration's clock: the move commits, then the due timers
    # fire, each in a transaction of its own.
    sessionmaker = request.app.state.sessionmaker
    async with sessionmaker() as session, session.begin():
        integration = await _integration(request, session)

        async def produce() -> tuple[int, bytes]:
            moved = await service.advance_deal_clock(session, integration, deal_id, body.seconds)
            return 200, dump(moved)

        response = await idempotent(session, request, integration.id, produce)
    fired = await service.let_deal_time_pass(sessionmaker, request.app.state.settings, deal_id)
    replayed = response.headers.get("idempotent-replayed")
    return Response(
        dump({**orjson.loads(response.body), "timersFired": fired}),
        media_type="application/json",
        headers={"Idempotent-Replayed": replayed} if replayed else None,
    )


@router.get(
    "/sandbox/v1/deals/{dealId}/clock",
    operation_id="sandbox_get_deal_clock",
    summary="One deal's test clock: its offsets, its time and its pending deadlines",
    description="How far the deal's own clock and your integration's have been moved ahead, "
    "the deal's time (`clockTime`: the real time plus both offsets), and its pending "
    "deadlines with when each fires, as the deal's pages show them. Moving a clock brings "
    "the deadlines closer rather than changing the real time: `dueInSeconds` is the same "
    "on either reading. 404 for a deal of another integration. Authenticated by "
    "`webhook-secret`; sandbox only.",
    response_model=schemas.DealClock,
    openapi_extra={"security": COMMON["openapi_extra"]["security"]},
    responses={
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: dealId: Input should be a valid UUID",
        ),
        **{k: v for k, v in ERRORS.items() if k in (401, 403, 404)},
    },
)
async def get_deal_clock(
    deal_id: DealPath, request: Request, session: Session, integration: Caller
) -> Response:
    body = await service.deal_clock(session, integration, deal_id)
    return Response(dump(body), media_type="application/json")


SCENARIO_ERRORS: dict[int | str, dict[str, Any]] = {
    k: v for k, v in ERRORS.items() if k in (400, 401, 403, 404, 405, 409, 415)
}
SCENARIO_ERRORS[409] = problem(
    409,
    "Conflict",
    "A deal in status Pickup_Pending cannot reach Shipping_Pending: no path of the lifecycle "
    "leads there from here (it can reach: Pickup_Expired, Pickup_Denied, Refunded, Completed).",
)


@router.get(
    "/sandbox/v1/scenarios",
    operation_id="sandbox_list_scenarios",
    summary="The named paths a sandbox scenario can drive a deal down",
    description="Every scenario `POST /sandbox/v1/scenarios` runs, with what happens in it, the "
    "shipping type it needs and the status its own steps start from. Authenticated by "
    "`webhook-secret`; sandbox only.",
    response_model=schemas.ScenarioList,
    openapi_extra={"security": COMMON["openapi_extra"]["security"]},
    responses={k: v for k, v in ERRORS.items() if k in (401, 403)},
)
async def list_scenarios(request: Request) -> Response:
    return Response(dump({"items": scenarios.listing()}), media_type="application/json")


@router.post(
    "/sandbox/v1/scenarios",
    operation_id="sandbox_run_scenario",
    summary="Drive a deal down a whole named path, with its real webhooks in order",
    description="Runs the scenario on a new sandbox deal, or on your `dealId`: a deal before "
    "the scenario's start is fast-forwarded there along the lifecycle, one partway down the "
    "path goes on from its step. Every step is the real service call of the party that takes "
    "it (seller, buyer, carrier, operator, payment provider), so the events are a real deal's, "
    "in order; where time passes (7 days, 24 hours) the deal's own deadlines are brought "
    "forward and fire (the integration's other deals are left alone); refunds and payouts are "
    "made before the answer. Answers the events emitted for the deal, in order, and the deal "
    "at the end. 409 when no path leads from the deal's status to the scenario's (nothing is "
    "changed then). Authenticated by `webhook-secret`; sandbox only.",
    response_model=schemas.ScenarioResult,
    dependencies=[Depends(require_json)],
    openapi_extra=COMMON["openapi_extra"],
    responses=SCENARIO_ERRORS,
)
async def run_scenario(body: schemas.ScenarioRun, request: Request) -> Response:
    # Its own transactions, as the clock's: a scenario that lets time pass commits before the
    # deadlines fire, each in a transaction of its own.
    sessionmaker = request.app.state.sessionmaker
    async with sessionmaker() as session, session.begin():
        integration = await service.integration_for(session, request.headers.get("webhook-secret"))
    settings = request.app.state.settings
    outcome = await scenarios.run(sessionmaker, integration, body.scenario, body.dealId, settings)
    deal = outcome.deal
    return Response(
        dump(
            {
                "scenario": body.scenario,
                "dealId": deal.id,
                "status": deal.status,
                "paymentStatus": deal.payment_status,
                "events": outcome.events,
                "deal": deal_out(
                    deal,
                    request.app.state.links.deal_url(deal.id),
                    actions.allowed_actions(
                        deal,
                        integration.scope_list,
                        actions.api_actor(request.app.state.settings),
                    ),
                    request.app.state.settings.shipping_paid_by,
                ),
            }
        ),
        media_type="application/json",
    )
