"""A console's audit trail page: the back office's, of everything, and the developer
portal's, of the member's own integration; newest first, a page at a time."""

import uuid

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.requests import Request
from starlette.responses import Response

from dealbroker.audit import service as audit
from dealbroker.web.console.access import Console, page_count

PAGE_SIZE = 50


async def trail(
    console: Console,
    request: Request,
    session: AsyncSession,
    template: str,
    number: int,
    integration_id: uuid.UUID | None = None,
) -> Response:
    """Page ``number`` of the trail (of ``integration_id``'s records only, if given)."""
    rows, total = await audit.page(session, number, PAGE_SIZE, integration_id)
    pages = page_count(total, PAGE_SIZE)
    context = {"rows": rows, "number": number, "pages": pages, "total": total}
    return console.page(request, template, context)
