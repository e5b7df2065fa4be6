"""The developer portal's sandbox pages: the integration's clock (its offset, and moving it
ahead), one deal's own test clock (its offsets, its pending deadlines, moving it ahead), and the
scenarios (what each does; running one on a new deal or on one of the integration's, with the
events it emitted).

Only in the sandbox: elsewhere every route here is not found (and the navigation has no item).
Every member sees; a developer or owner acts, through the services the sandbox API calls, with
the member as the audit trail's actor. A deal of another integration is not found.
"""

import uuid
from datetime import timedelta
from typing import Any

from fastapi import Request
from pydantic import ValidationError
from starlette.responses import HTMLResponse, Response

from dealbroker.auth.service import Principal
from dealbroker.core.db import Session
from dealbroker.core.errors import Conflict, NotFound
from dealbroker.core.i18n import N_, _, ngettext
from dealbroker.deals import service as deals
from dealbroker.events.service import By
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import Integration
from dealbroker.sandbox import scenarios, schemas, service
from dealbroker.web.portal.session import PORTAL, Developer, LoggedInMember, ReadOnly, page
from dealbroker.web.render import not_found

router = PORTAL.router()
DEALS_SHOWN = 10
# The clock forms' units, in seconds; the amount is bounded by the API's own limit (366 days).
UNITS = {
    "minutes": (60, N_("minutes")),
    "hours": (3600, N_("hours")),
    "days": (86400, N_("days")),
}
MAX_AMOUNT = 10_000
BAD_DURATION = N_("Enter a whole number of minutes, hours or days, at most 366 days.")
NO_DEAL = N_("Your integration has no deal with that id. Check the deal id.")
NO_SCENARIO = N_("Choose one of the scenarios.")
UNREACHABLE = N_(
    "This scenario cannot run on that deal: no path of the lifecycle leads from its status to "
    "the scenario's start. Nothing was changed."
)


def _by(request: Request, member: LoggedInMember) -> By:
    return By(member.actor, request.state.request_id, operator=False)


def _sandbox(request: Request) -> bool:
    return bool(request.app.state.settings.is_sandbox)


async def _integration(session: Session, member: LoggedInMember) -> Integration:
    # The member's session names it: not found only if deleted meanwhile.
    return await integrations.get(session, member.integration_id)


def _seconds(form: Any) -> int | None:
    """The form's duration in seconds, bounded as the API bounds it; None when invalid."""
    amount = str(form.get("amount", "")).strip()[:10]
    unit = UNITS.get(str(form.get("unit", ""))[:10])
    if not amount.isdigit() or unit is None or not 1 <= int(amount) <= MAX_AMOUNT:
        return None
    try:
        return schemas.ClockAdvance.model_validate({"seconds": int(amount) * unit[0]}).seconds
    except ValidationError:
        return None


def _duration(seconds: int) -> str:
    """An offset in the page's language: days, hours and minutes."""
    left = timedelta(seconds=seconds)
    parts = []
    if left.days:
        parts.append(ngettext("%(num)d day", "%(num)d days", left.days) % {"num": left.days})
    hours, rest = divmod(left.seconds, 3600)
    if hours:
        parts.append(ngettext("%(num)d hour", "%(num)d hours", hours) % {"num": hours})
    minutes = rest // 60
    if minutes or not parts:
        parts.append(ngettext("%(num)d minute", "%(num)d minutes", minutes) % {"num": minutes})
    return " ".join(parts)


def _context(request: Request) -> dict[str, Any]:
    return {
        "units": [(key, _(label)) for key, (_s, label) in UNITS.items()],
        "duration": _duration,
        "scenarios": scenarios.listing(),
        "max_amount": MAX_AMOUNT,
    }


@router.get("/sandbox", response_class=HTMLResponse)
async def sandbox(request: Request, member: ReadOnly, session: Session) -> Response:
    """The integration's clock, its newest deals (each to its own clock), the scenarios."""
    if not _sandbox(request):
        return not_found(request)
    return await _sandbox_page(request, member, session)


async def _sandbox_page(
    request: Request, member: LoggedInMember, session: Session, status: int = 200, **extra: Any
) -> Response:
    integration = await _integration(session, member)
    principal = Principal(member.integration_id, frozenset(member.scopes))
    reads, conn = request.app.state.driver_statements, await session.connection()
    found = await deals.list_page(reads, principal, 1, DEALS_SHOWN, conn)
    context = {
        **_context(request),
        "offset": integration.clock_offset_seconds,
        "deals": found.deals,
        "deals_total": found.total_count,
        "moved": _moved(request),
        **extra,
    }
    return page(request, "portal_sandbox.html", context, status)


def _moved(request: Request) -> str | None:
    """The message after a clock's move: how many deadlines came closer and fired."""
    params = request.query_params
    moved, fired = params.get("moved", ""), params.get("fired", "")
    if not (moved.isdigit() and fired.isdigit() and len(moved) < 10 and len(fired) < 10):
        return None
    return _("The clock moved ahead: %(moved)s, of which %(fired)s fired.") % {
        "moved": ngettext(
            "%(num)d deadline came closer", "%(num)d deadlines came closer", int(moved)
        )
        % {"num": int(moved)},
        "fired": fired,
    }


@router.post("/sandbox/clock")
async def advance_clock(request: Request, member: Developer, session: Session) -> Response:
    """Move the integration's clock ahead; the deadlines now due fire before the answer."""
    if not _sandbox(request):
        return not_found(request)
    seconds = _seconds(await PORTAL.checked_form(request))
    if seconds is None:
        return await _sandbox_page(request, member, session, 400, error=_(BAD_DURATION))
    integration = await _integration(session, member)
    _offset, moved = await service.advance_clock(
        session, integration, seconds, _by(request, member)
    )
    # The move commits, then the due deadlines fire, each in a transaction of its own (as the
    # sandbox API does it).
    await session.commit()
    settings = request.app.state.settings
    fired = await service.let_time_pass(request.app.state.sessionmaker, settings)
    return PORTAL.to(f"/sandbox?moved={moved}&fired={fired}")


@router.post("/sandbox/deal")
async def find_deal(request: Request, member: ReadOnly, session: Session) -> Response:
    """To a deal's clock page by its id (typed or pasted)."""
    if not _sandbox(request):
        return not_found(request)
    form = await PORTAL.checked_form(request)
    try:
        deal_id = uuid.UUID(str(form.get("deal", "")).strip()[:40])
        await deals.get_for(session, member.integration_id, deal_id)
    except (ValueError, NotFound):
        return await _sandbox_page(request, member, session, 400, error=_(NO_DEAL))
    return PORTAL.to(f"/sandbox/deals/{deal_id}")


@router.get("/sandbox/deals/{deal_id}", response_class=HTMLResponse)
async def deal_clock(
    request: Request, deal_id: uuid.UUID, member: ReadOnly, session: Session
) -> Response:
    """One deal's test clock: its offsets, its time, its pending deadlines."""
    if not _sandbox(request):
        return not_found(request)
    try:
        return await _deal_page(request, member, session, deal_id)
    except NotFound:
        return not_found(request)


async def _deal_page(
    request: Request,
    member: LoggedInMember,
    session: Session,
    deal_id: uuid.UUID,
    status: int = 200,
    **extra: Any,
) -> Response:
    integration = await _integration(session, member)
    clock_of = await service.deal_clock(session, integration, deal_id)
    deal = await deals.get_for(session, member.integration_id, deal_id)
    context = {
        **_context(request),
        "c": clock_of,
        "deal": deal,
        "moved": _moved(request),
        **extra,
    }
    return page(request, "portal_sandbox_deal.html", context, status)


@router.post("/sandbox/deals/{deal_id}/clock")
async def advance_deal_clock(
    request: Request, deal_id: uuid.UUID, member: Developer, session: Session
) -> Response:
    """Move this deal's own clock ahead; its deadlines now due fire before the answer."""
    if not _sandbox(request):
        return not_found(request)
    seconds = _seconds(await PORTAL.checked_form(request))
    try:
        if seconds is None:
            return await _deal_page(request, member, session, deal_id, 400, error=_(BAD_DURATION))
        integration = await _integration(session, member)
        moved = await service.advance_deal_clock(
            session, integration, deal_id, seconds, _by(request, member)
        )
    except NotFound:
        return not_found(request)
    await session.commit()
    settings = request.app.state.settings
    sessionmaker = request.app.state.sessionmaker
    fired = await service.let_deal_time_pass(sessionmaker, settings, deal_id)
    return PORTAL.to(f"/sandbox/deals/{deal_id}?moved={moved['timersMoved']}&fired={fired}")


@router.post("/sandbox/scenarios")
async def run_scenario(request: Request, member: Developer, session: Session) -> Response:
    """Run a scenario on a new deal, or on the integration's deal given; the page then shows
    the deal's status and the events the run emitted, in order."""
    if not _sandbox(request):
        return not_found(request)
    form = await PORTAL.checked_form(request)
    name = str(form.get("scenario", ""))[:60]
    typed = str(form.get("deal", "")).strip()[:40]
    if name not in scenarios.SCENARIOS:
        return await _sandbox_page(request, member, session, 400, error=_(NO_SCENARIO))
    try:
        deal_id = uuid.UUID(typed) if typed else None
        if deal_id is not None:
            await deals.get_for(session, member.integration_id, deal_id)
    except (ValueError, NotFound):
        return await _sandbox_page(request, member, session, 400, error=_(NO_DEAL))
    integration = await _integration(session, member)
    # The run takes transactions of its own (a wait commits before its deadlines fire).
    await session.commit()
    settings = request.app.state.settings
    try:
        outcome = await scenarios.run(
            request.app.state.sessionmaker,
            integration,
            name,
            deal_id,
            settings,
            _by(request, member),
        )
    except Conflict:
        # The request's transaction is over: the page is read in a session of its own.
        async with request.app.state.sessionmaker() as reading:
            return await _sandbox_page(request, member, reading, 409, error=_(UNREACHABLE))
    context = {
        **_context(request),
        "scenario": scenarios.SCENARIOS[name],
        "deal": outcome.deal,
        "events": outcome.events,
    }
    return page(request, "portal_sandbox_result.html", context)
