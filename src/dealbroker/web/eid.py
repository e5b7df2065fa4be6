"""The eID signing's two pages between a party's page and the issuer: ``/eid/<flow>`` sends the
browser to the issuer (the party's sign action redirects there), ``/eid/callback`` is where the
issuer sends it back. Between the two, the flow's state, PKCE verifier and the party's page to
return to are kept in a short-lived cookie; the callback signs only the flow that cookie names,
for its own deal and party."""

import base64
import binascii
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, RedirectResponse, Response

from dealbroker import parties
from dealbroker.core import clock, oidc
from dealbroker.core.db import WriteSession
from dealbroker.core.errors import BadRequest
from dealbroker.deals.models import Deal
from dealbroker.signatures import eid
from dealbroker.signatures.models import EidSignature
from dealbroker.signatures.service import SignatureStatus
from dealbroker.web.forms import field, read_form
from dealbroker.web.render import PRIVATE, page
from dealbroker.web.session_cookie import HostCookie

log = logging.getLogger("dealbroker.eid")
router = APIRouter(include_in_schema=False)
# The sandbox's simulated eID: mounted by ``create_app`` only in the sandbox with
# ``DEALBROKER_EID_ISSUER=simulated``; a 404 everywhere else.
simulated_router = APIRouter(include_in_schema=False)
SIMULATED_PATH = "/eid/simulated"
COOKIE_MINUTES = 60  # longer than any flow may take; the flow's own limit is eid_flow_minutes


@dataclass(frozen=True)
class Kept:
    """The cookie: the flow, its state and PKCE verifier, and the party's page."""

    flow_id: uuid.UUID
    state: str
    verifier: str
    back: str

    def value(self) -> str:
        back = base64.urlsafe_b64encode(self.back.encode()).decode().rstrip("=")
        return f"{self.flow_id}.{self.state}.{self.verifier}.{back}"

    @classmethod
    def read(cls, value: str) -> "Kept | None":
        parts = value.split(".") if len(value) <= 2000 else []
        if len(parts) != 4 or not all(parts):
            return None
        try:
            flow_id = uuid.UUID(parts[0])
            back = base64.urlsafe_b64decode(parts[3] + "=" * (-len(parts[3]) % 4)).decode()
        except (ValueError, binascii.Error):
            return None
        return cls(flow_id, parts[1], parts[2], back) if _own_page(back) else None


def _own_page(path: str) -> bool:
    return path.startswith(("/d/", "/o/")) and len(path) <= 500


# The signing under way in this browser (``Kept``).
COOKIE = HostCookie("dealbroker-eid")


def start_url(base_url: str, flow_id: uuid.UUID, back: str) -> str:
    """Where a party's sign action sends the browser (``back`` is the party's page): our page
    that sends it on to the issuer."""
    query = base64.urlsafe_b64encode(back.encode()).decode().rstrip("=")
    return f"{base_url}/eid/{flow_id}?back={query}"


def _refused(request: Request, back: str | None, payout: bool = False) -> Response:
    """The page a party reads when the signing (or a payout account's confirmation) did not go
    through; nothing was signed or changed."""
    response = page(request, "eid_failed.html", {"back": back, "payout": payout}, status=400)
    response.headers.update(PRIVATE)
    return response


def _forget(request: Request, response: Response) -> Response:
    COOKIE.clear(request, response)
    return response


@router.get("/eid/callback", response_class=HTMLResponse)
async def callback(
    request: Request,
    session: WriteSession,
    code: Annotated[str, Query(max_length=2000)] = "",
    state: Annotated[str, Query(max_length=200)] = "",
    error: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """Back from the issuer: the flow this browser started is Completed with the verified ID
    token, or Failed (cancelled at the issuer, too late, another state, a token refused)."""
    settings = request.app.state.settings
    kept = Kept.read(COOKIE.read(request))
    found = None if kept is None else await parties.eid_flow(session, kept.flow_id, kept.state)
    if kept is None or found is None:
        log.warning("eID return refused: no signing of this browser's is under way")
        return _forget(request, _refused(request, kept.back if kept else None))
    flow, deal = found

    async def answer(pending: oidc.Pending) -> dict[str, Any]:
        if error:  # access_denied: cancelled by the person
            raise oidc.OidcRefused(f"the issuer answered {error}")
        return await oidc.finish(
            eid.client(settings), pending, code, state, lambda got: eid.complete(got, settings)
        )

    return await _returned(request, session, kept, flow, deal, answer)


async def _returned(
    request: Request,
    session: AsyncSession,
    kept: Kept,
    flow: EidSignature,
    deal: Deal,
    answer: Callable[[oidc.Pending], Awaitable[dict[str, Any]]],
) -> Response:
    """The browser is back from the issuer (the real one or the sandbox's simulated one):
    too late, or the claims ``answer`` verifies against the nonce of the deal's terms as they
    are now (terms changed since the start are another nonce: refused), or its refusal."""
    settings = request.app.state.settings
    failure = None
    claims = None
    if eid.timed_out(flow, clock.now(), settings):
        failure = f"not back within {settings.eid_flow_minutes} minutes"
    else:
        pending = oidc.Pending(kept.state, eid.nonce(deal, flow.terms_salt), kept.verifier)
        try:
            claims = await answer(pending)
        except oidc.OidcRefused as exc:
            failure = exc.reason
    return await _finish(request, session, kept, flow.id, claims, failure)


async def _finish(
    request: Request,
    session: AsyncSession,
    kept: Kept,
    flow_id: uuid.UUID,
    claims: dict[str, object] | None,
    failure: str | None,
) -> Response:
    """The signature Completed (back to the party's page) or Failed (the page that says so);
    the pending signing is forgotten either way."""
    settings = request.app.state.settings
    flow = await parties.eid_returned(session, flow_id, claims, failure, settings)
    payout = flow.purpose == "payout"
    if flow.status != SignatureStatus.COMPLETED:
        log.warning("eID %s %s failed: %s", flow.purpose, flow.id, flow.failure)
        return _forget(request, _refused(request, kept.back, payout))
    joiner = "&" if "?" in kept.back else "?"
    outcome = "account-changed" if payout else "signed"
    done = RedirectResponse(f"{kept.back}{joiner}done={outcome}", status_code=303, headers=PRIVATE)
    return _forget(request, done)


@router.get("/eid/{flow_id}", response_class=HTMLResponse)
async def send(
    flow_id: str,
    request: Request,
    session: WriteSession,
    back: Annotated[str, Query(max_length=700)] = "",
) -> Response:
    """To the issuer, once per flow, with the flow's state, nonce and PKCE verifier."""
    settings = request.app.state.settings
    try:
        parsed = uuid.UUID(flow_id)
        path = base64.urlsafe_b64decode(back + "=" * (-len(back) % 4)).decode()
    except (ValueError, binascii.Error):
        return _refused(request, None)
    if not _own_page(path):
        return _refused(request, None)
    sent = await parties.eid_send(session, parsed, settings)
    if sent is None:
        return _refused(request, path)
    flow, pending = sent
    if settings.eid_simulated:
        response = _simulated_page(request, flow.id, pending.nonce)
    else:
        try:
            url = await oidc.start(eid.client(settings), pending)
        except oidc.OidcRefused as exc:
            await parties.eid_returned(session, flow.id, None, exc.reason, settings)
            log.warning("eID signing %s not started: %s", flow.id, exc.reason)
            return _refused(request, path)
        response = RedirectResponse(url, status_code=303, headers=PRIVATE)
    COOKIE.set(
        request,
        response,
        Kept(flow.id, pending.state, pending.verifier, path).value(),
        COOKIE_MINUTES * 60,
    )
    return response


def _simulated_page(request: Request, flow_id: uuid.UUID, nonce: str) -> Response:
    """The simulated eID's page: says it is one, asks who signs; the flow's cookie follows.
    Like a real issuer it is given the flow's nonce (the hash of the deal's terms as they are
    now) and puts it in its answer, so terms changed meanwhile are refused as in production."""
    context = {
        "action": SIMULATED_PATH,
        "csrf": request.app.state.links.form_token(SIMULATED_PATH),
        "flow": flow_id,
        "nonce": nonce,
    }
    response = page(request, "eid_simulated.html", context)
    response.headers.update(PRIVATE)
    return response


@simulated_router.post(SIMULATED_PATH, response_class=HTMLResponse)
async def simulated(request: Request, session: WriteSession) -> Response:
    """The simulated eID answers: the typed name and birth date as its "verified" claims, or a
    cancel. Only the flow this browser started, as the real callback."""
    kept = Kept.read(COOKIE.read(request))
    found = None if kept is None else await parties.eid_flow(session, kept.flow_id, kept.state)
    if kept is None or found is None:
        return _forget(request, _refused(request, kept.back if kept else None))
    flow, deal = found
    try:
        form = await read_form(request, SIMULATED_PATH)
    except BadRequest:
        return await _finish(request, session, kept, flow.id, None, "simulated eID: bad form")
    name = field(form, "name")

    async def answer(pending: oidc.Pending) -> dict[str, Any]:
        if form.get("outcome") != "confirm" or not name:
            raise oidc.OidcRefused("cancelled (simulated eID)")
        claims: dict[str, Any] = {
            "iss": "simulated",
            "sub": f"simulated:{name}",
            "name": name,
            "birthdate": field(form, "birthdate", 10),
            "acr": "simulated",
            "iat": int(clock.now().timestamp()),
            "nonce": str(form.get("nonce", ""))[:100],
        }
        return oidc.bound(claims, pending.nonce)

    return await _returned(request, session, kept, flow, deal, answer)
