"""The back office's integrations (admin) and deal search (support).

Admins register integrations, disable and enable them, and rotate their client and webhook
secrets, each through the same ``integrations.service`` function as the CLI, which records it
in the audit trail in the change's own transaction. A new secret is shown once: on the page
that answers the form itself (never through a redirect, whose target a browser may keep in its
history), with ``Cache-Control: no-store``; it is neither logged nor in the audit trail.
Rotating a secret wants a recent login. Each integration's rate-limit refusals over the last
day and week come from ``integrations.refusals``.

Support finds deals by deal id or by the seller's or buyer's e-mail (``deals.search``), each
linking to its dossier page.
"""

from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, Response

from dealbroker.core import clock
from dealbroker.core.db import Session
from dealbroker.core.errors import BadRequest
from dealbroker.core.i18n import _
from dealbroker.core.settings import Environment
from dealbroker.deals import search as deal_search
from dealbroker.integrations import refusals
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import ALL_SCOPES
from dealbroker.operators.service import LoggedIn
from dealbroker.web.backoffice.session import BACK_OFFICE, Admin, Support, page, require_operator
from dealbroker.web.console import secrets

router = BACK_OFFICE.router()
FreshAdmin = Annotated[LoggedIn, Depends(require_operator("admin", fresh=True))]


@router.get("/integrations", response_class=HTMLResponse)
async def integrations_page(request: Request, logged_in: Admin, session: Session) -> Response:
    """Every integration: its client id, whether it is active, its rate-limit refusals, and
    the forms that change it; the form that registers one."""
    return page(request, "back_office_integrations.html", await _context(request, session))


async def _context(request: Request, session: AsyncSession) -> dict[str, object]:
    counts = await refusals.counts(session, clock.now())
    every = await integrations.list_all(session)
    return {
        "integrations": [(i, counts.get(i.id, refusals.Counts())) for i in reversed(every)],
        "sandbox": request.app.state.settings.environment == Environment.SANDBOX,
        "scopes": ALL_SCOPES,
        **secrets.overlaps(),
    }


@router.post("/integrations")
async def integrations_create(request: Request, logged_in: Admin, session: Session) -> Response:
    form = await BACK_OFFICE.checked_form(request)
    name = str(form.get("name", ""))[: integrations.MAX_NAME + 1]
    scopes = [str(s) for s in form.getlist("scope")][: len(ALL_SCOPES)]
    try:
        if not scopes:  # the service's default is every scope: the form asks for a choice
            raise BadRequest("no scope chosen")
        async with session.begin_nested():
            created = await integrations.create(
                session, name, scopes, logged_in.actor, request.state.request_id
            )
    except BadRequest:
        error = _("Give a name of at most 200 characters and at least one scope.")
        context = {**await _context(request, session), "error": error}
        return page(request, "back_office_integrations.html", context, 400)
    context = {
        "integration": created.integration,
        "client_secret": created.client_secret,
        "webhook_secret": created.integration.webhook_secret,
        "done": _("The integration is registered."),
    }
    return _secrets(request, context)


def _secrets(request: Request, context: Mapping[str, object]) -> Response:
    return secrets.shown_once(BACK_OFFICE, request, "back_office_integration_secrets.html", context)


@router.post("/integrations/{client_id}/disabled")
async def integrations_disabled(
    request: Request, client_id: str, logged_in: Admin, session: Session
) -> Response:
    form = await BACK_OFFICE.checked_form(request)
    disabled = form.get("disabled") == "1"
    await integrations.set_active(
        session, client_id[:64], not disabled, logged_in.actor, request.state.request_id
    )
    done = "integration-disabled" if disabled else "integration-enabled"
    return BACK_OFFICE.to(f"/integrations?done={done}")


@router.post("/integrations/{client_id}/secret")
async def integrations_rotate_secret(
    request: Request, client_id: str, logged_in: FreshAdmin, session: Session
) -> Response:
    """A new client secret, shown once; the old one and its tokens stop working now."""
    rotated = await integrations.rotate_secret(
        session, client_id[:64], logged_in.actor, request.state.request_id
    )
    context = {
        "integration": rotated.integration,
        "client_secret": rotated.client_secret,
        "done": _("A new client secret is issued; the old one and its tokens no longer work."),
    }
    return _secrets(request, context)


@router.post("/integrations/{client_id}/webhook-secret")
async def integrations_rotate_webhook_secret(
    request: Request, client_id: str, logged_in: FreshAdmin, session: Session
) -> Response:
    """A new webhook secret, shown once; the old one stays valid for the overlap chosen."""
    overlap = secrets.overlap(await BACK_OFFICE.checked_form(request))
    integration = await integrations.get_by_client_id(session, client_id[:64])
    if overlap is None:
        error = _("Choose how long the old webhook secret stays valid.")
        context = {**await _context(request, session), "error": error}
        return page(request, "back_office_integrations.html", context, 400)
    rotated = await integrations.rotate_webhook_secret(
        session,
        integration.id,
        overlap,
        logged_in.actor,
        request.state.request_id,
    )
    context = {
        "integration": rotated.integration,
        "webhook_secret": rotated.webhook_secret,
        "previous_expires_at": rotated.previous_expires_at,
        "done": _("A new webhook secret is issued."),
    }
    return _secrets(request, context)


@router.get("/deals", response_class=HTMLResponse)
async def deals_search(
    request: Request,
    logged_in: Support,
    session: Session,
    q: Annotated[str, Query(max_length=deal_search.MAX_QUERY)] = "",
) -> Response:
    """Deals by deal id, or by the seller's or the buyer's e-mail address, newest first."""
    found = await deal_search.search(session, q) if q.strip() else None
    context: dict[str, object] = {"q": q, "found": found, "max_results": deal_search.MAX_RESULTS}
    return page(request, "back_office_deals.html", context)
