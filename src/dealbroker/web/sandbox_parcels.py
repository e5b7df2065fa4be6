"""The sandbox carrier's tracking page (``/sandbox/parcels/<tracking number>``): where the
simulated carrier's tracking links lead, as a real carrier's lead to its own site. It shows the
parcel's events and nothing of the parties (a tracking number is no capability).

``create_app`` mounts ``router`` only in the sandbox with the simulated carrier; elsewhere its
paths are plain 404s.
"""

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, Response

from dealbroker import parties
from dealbroker.core.db import Session
from dealbroker.parcels.service import carrier_name
from dealbroker.web.render import CARRIER_SAID, label, not_found, page, said_by

router = APIRouter(include_in_schema=False)


@router.get("/sandbox/parcels/{tracking_number}", response_class=HTMLResponse)
async def tracking_page(tracking_number: str, request: Request, session: Session) -> Response:
    found = await parties.sandbox_tracking(session, tracking_number, request.app.state.settings)
    if found is None:
        return not_found(request)
    parcel, events = found
    carrier = carrier_name(parcel.carrier)
    context = {
        "carrier": carrier,
        "tracking_number": parcel.tracking_number,
        "size": label(parcel.size),
        "events": [(at, said_by(CARRIER_SAID[kind], carrier)) for at, kind in events],
        "error": None,
    }
    return page(request, "sandbox_parcel.html", context)
