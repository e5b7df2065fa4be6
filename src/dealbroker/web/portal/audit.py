"""The integration's own audit trail (owners): who of its members, or of our operators, did
what to it and when (logins, member changes, secret rotations), newest first."""

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse, Response

from dealbroker.audit import service as audit
from dealbroker.core.db import Session
from dealbroker.web.console.access import page_count
from dealbroker.web.portal.session import PREFIX, Owner, page

router = APIRouter(prefix=PREFIX, include_in_schema=False)
PAGE_SIZE = 50


@router.get("/audit", response_class=HTMLResponse)
async def audit_trail(
    request: Request,
    member: Owner,
    session: Session,
    number: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
) -> Response:
    rows, total = await audit.page(session, number, PAGE_SIZE, member.integration_id)
    pages = page_count(total, PAGE_SIZE)
    context = {"rows": rows, "number": number, "pages": pages, "total": total}
    return page(request, "portal_audit.html", context)
