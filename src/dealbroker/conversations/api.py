"""A deal's conversations over the API, for the deal's integration (read only: the parties
write on their own pages)."""

from fastapi import APIRouter, Request
from starlette.responses import Response

from dealbroker.auth.dependencies import Reader
from dealbroker.conversations import service
from dealbroker.conversations.schemas import ConversationPage, conversation_out
from dealbroker.core.db import Session
from dealbroker.core.errors import problem
from dealbroker.core.pagination import PageRequest, Paging, page_body
from dealbroker.core.responses import NOT_FOUND, UNAUTHORIZED, dump
from dealbroker.deals.api import DealId

router = APIRouter(tags=["Conversations"])
# Conversations per page, at most and by default: each carries all its messages (up to
# ``service.MAX_MESSAGES`` of ``Settings.message_max_chars``), so a page stays a few megabytes.
PAGE_SIZE_MAX = 10


@router.get(
    "/deals/v1/deals/{dealId}/conversations",
    operation_id="list_deal_conversations",
    summary="List a deal's conversations with their messages",
    description="What the seller and each buyer wrote to each other on the deal: one "
    "conversation per offer link (`offerLinkId`), the one with the latest message first, each "
    "with all its messages, oldest first. Paged like the deal list, `page` from 1, but with "
    "`pageSize` at most 10 (and 10 by default): a larger one is answered as 10, with "
    "`adjusted`. A message support hid is listed with `hidden: true` and "
    "`text: null`. `warnings` are what its reader was warned about. The opt-in `deal.message` "
    "event tells that a message arrived (its `conversationId` and `messageId` are the `id`s "
    "here). Conversations are deleted a set time after the deal ended (the deployment's "
    "retention). 404 for a deal of another integration.",
    response_model=ConversationPage,
    responses={
        400: problem(
            400,
            "Invalid input",
            "The request does not match the schema: dealId: Input should be a valid UUID",
        ),
        401: UNAUTHORIZED,
        403: problem(403, "Not Allowed", "This token lacks the scope deals:read."),
        404: NOT_FOUND,
    },
)
async def list_conversations(
    request: Request, deal_id: DealId, principal: Reader, session: Session, paging: Paging
) -> Response:
    if paging.size > PAGE_SIZE_MAX:
        asked = "pageSize" in request.query_params
        adjusted = paging.adjusted + (
            ("pageSize",) if asked and "pageSize" not in paging.adjusted else ()
        )
        paging = PageRequest(paging.number, PAGE_SIZE_MAX, adjusted)
    result = await service.page_of_deal(session, principal, deal_id, paging.number, paging.size)
    items = [
        conversation_out(c, result.messages[c.id], result.buyer_names.get(c.offer_link_id))
        for c in result.conversations
    ]
    return Response(
        dump(page_body(paging, result.total_count, items)), media_type="application/json"
    )
