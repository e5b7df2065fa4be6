"""The integration's credentials (owners): rotate the client secret and the webhook signing
secret, through the same ``integrations.service`` functions as the CLI and the back office,
which record it in the audit trail in the change's own transaction (never the secret).

A new secret is shown once: on the page that answers the form itself (never through a
redirect, whose target a browser may keep in its history), with ``Cache-Control: no-store``.
Rotating wants a recent login.
"""

from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Request
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.core.i18n import _
from dealbroker.integrations import service as integrations
from dealbroker.web.console import secrets
from dealbroker.web.portal.session import PORTAL, LoggedInMember, Owner, page, require_member

router = PORTAL.router()
FreshOwner = Annotated[LoggedInMember, Depends(require_member("owner", fresh=True))]


def _context(error: str | None = None) -> dict[str, object]:
    return {**secrets.overlaps(), "error": error}


@router.get("/credentials", response_class=HTMLResponse)
async def credentials(request: Request, member: Owner) -> Response:
    """The client id, and the forms that rotate the secrets."""
    return page(request, "portal_credentials.html", _context())


def _secrets(request: Request, context: Mapping[str, object]) -> Response:
    return secrets.shown_once(PORTAL, request, "portal_secrets.html", context)


@router.post("/credentials/secret")
async def rotate_secret(request: Request, member: FreshOwner, session: Session) -> Response:
    """A new client secret, shown once; the old one and its tokens stop working now."""
    rotated = await integrations.rotate_secret(
        session, member.client_id, member.actor, request.state.request_id
    )
    context = {
        "client_secret": rotated.client_secret,
        "done": _("A new client secret is issued; the old one and its tokens no longer work."),
    }
    return _secrets(request, context)


@router.post("/credentials/webhook-secret")
async def rotate_webhook_secret(request: Request, member: FreshOwner, session: Session) -> Response:
    """A new webhook signing secret, shown once; the old one stays valid for the overlap
    chosen."""
    overlap = secrets.overlap(await PORTAL.checked_form(request))
    if overlap is None:
        error = _("Choose how long the old webhook secret stays valid.")
        return page(request, "portal_credentials.html", _context(error), 400)
    rotated = await integrations.rotate_webhook_secret(
        session,
        member.integration_id,
        overlap,
        member.actor,
        request.state.request_id,
    )
    context = {
        "webhook_secret": rotated.webhook_secret,
        "previous_expires_at": rotated.previous_expires_at,
        "done": _("A new webhook secret is issued."),
    }
    return _secrets(request, context)
