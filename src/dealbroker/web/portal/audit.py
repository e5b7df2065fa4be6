"""The integration's own audit trail (owners): who of its members, or of our operators, did
what to it and when (logins, member changes, secret rotations), newest first."""

from fastapi import Request
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.web.console import audit
from dealbroker.web.console.access import PageNumber
from dealbroker.web.portal.session import PORTAL, Owner

router = PORTAL.router()


@router.get("/audit", response_class=HTMLResponse)
async def audit_trail(
    request: Request, member: Owner, session: Session, number: PageNumber = 1
) -> Response:
    return await audit.trail(
        PORTAL, request, session, "portal_audit.html", number, member.integration_id
    )
