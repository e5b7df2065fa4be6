"""The integration's API requests of the last ``api_request_log_days`` days, from the API's
request log (``integrations.request_log``): method, route template, status, request id and
time, newest first, a page at a time, filtered by status class. Never a body, a query string,
a header or a token: the log keeps none."""

from typing import Annotated, Literal

from fastapi import Query, Request
from starlette.responses import HTMLResponse, Response

from dealbroker.core.db import Session
from dealbroker.integrations import request_log
from dealbroker.web.console.access import page_count
from dealbroker.web.portal.session import PORTAL, ReadOnly, page

router = PORTAL.router()
PAGE_SIZE = 50


@router.get("/requests", response_class=HTMLResponse)
async def requests(
    request: Request,
    member: ReadOnly,
    session: Session,
    status: Annotated[Literal["2xx", "4xx", "5xx"] | None, Query()] = None,
    number: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> Response:
    days = request.app.state.settings.api_request_log_days
    found = await request_log.list_requests(
        session,
        member.integration_id,
        keep_days=days,
        status_class=status,
        page=number,
        size=PAGE_SIZE,
    )
    pages = page_count(found.total, PAGE_SIZE)
    context: dict[str, object] = {
        "rows": found.requests,
        "total": found.total,
        "number": number,
        "pages": pages,
        "status": status,
        "classes": list(request_log.STATUS_CLASSES),
        "days": days,
    }
    return page(request, "portal_requests.html", context)
