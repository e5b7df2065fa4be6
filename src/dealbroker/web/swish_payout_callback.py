"""Swish's payout callback (``POST /payments/v1/swish/payout-callback``): Swish tells us a payout
instruction is paid (``PAID``) or failed (``ERROR``).

The body is only a hint of which instruction to look at. It is bounded before it is parsed and
checked field by field; the instruction must be a payout call of ours, and its status is then
Swish's own answer to our ``GET`` over mutual TLS (``payments.swish_payouts``). A callback whose
status Swish does not confirm is refused (400) and changes nothing: a forged one cannot pay a
payout out, nor fail it. A callback for a payout settled already is acknowledged (200) and not
applied again. Not in the OpenAPI: it is Swish's, not the integrations' API. ``create_app``
mounts it only with ``DEALBROKER_SWISH_PAYOUTS``.
"""

import json
import logging
import uuid
from decimal import Decimal

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from dealbroker.core.errors import BadRequest
from dealbroker.core.settings import Settings
from dealbroker.payments import swish_payouts as swish
from dealbroker.payments.swish import SwishRefused, SwishUnavailable

log = logging.getLogger("dealbroker.payments")
router = APIRouter(include_in_schema=False)


def _instruction(body: bytes) -> tuple[uuid.UUID, str]:
    """The callback's instruction id (as our call id) and status; ``BadRequest`` otherwise."""
    if len(body) > swish.MAX_CALLBACK_BYTES:
        raise BadRequest("Not a Swish payout callback: too large.")
    try:
        data = json.loads(body.decode("utf-8"), parse_float=Decimal)
        record = swish.Record.parse(data)
        call_id = uuid.UUID(hex=record.instruction_id)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"Not a Swish payout callback we can read: {exc}.") from exc
    if len(record.instruction_id) != 32:
        raise BadRequest("Not a Swish payout callback: payoutInstructionUUID is not 32 hex digits.")
    return call_id, record.status


@router.post(swish.CALLBACK_PATH)
async def swish_payout_callback(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    sessionmaker = request.app.state.sessionmaker
    call_id, claimed = _instruction(await request.body())
    async with sessionmaker() as session:
        status = await swish.payout_status(session, call_id)
    if status is None:
        raise BadRequest("No payout of ours has this payoutInstructionUUID.")
    if status == "succeeded" or (status == "failed" and claimed != "PAID"):
        return JSONResponse({"received": True, "outcome": "duplicate"})
    # A PAID callback for a call we recorded as refused is asked about too: if Swish did pay
    # it, the money went out, and ``apply`` makes that loud rather than a "duplicate".
    try:
        record = await swish.SwishPayoutsClient(settings).get(swish.instruction_id(call_id))
    except (SwishUnavailable, SwishRefused) as exc:
        # Swish cannot confirm it now: it calls back again, and the worker's poll asks later.
        log.warning("swish payout callback %s not confirmed now: %s", call_id, exc)
        return JSONResponse({"received": False}, status_code=503)
    if record is None or record.status != claimed:
        log.warning(
            "swish payout callback %s refused: it says %s, Swish says %s",
            call_id,
            claimed,
            "nothing" if record is None else record.status,
        )
        raise BadRequest("The callback's status is not Swish's.")
    async with sessionmaker() as session, session.begin():
        outcome = await swish.apply(session, call_id, record)
    log.info("swish payout callback %s (%s): %s", call_id, record.status, outcome)
    return JSONResponse({"received": True, "outcome": outcome})
