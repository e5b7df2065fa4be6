"""The conversations' queries the retention job runs."""

import uuid
from datetime import datetime

from sqlalchemy import ColumnElement, Select, and_, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.conversations.models import Conversation
from dealbroker.core.db import delete_batch, oldest_batch
from dealbroker.deals.lifecycle import FINAL_STATUSES
from dealbroker.deals.models import Deal, DealStatusChange


def _ended_before(before: datetime) -> ColumnElement[bool]:
    """Whether the conversation's deal ended (is in a final status) before ``before``: its
    last status change, the move to the final status (nothing leaves one), read backwards
    through ``ix_deal_status_history_deal``; the deal's ``updated_at`` for a deal with no
    history, which is never earlier than its end. A scalar subquery, not EXISTS: the planner
    then reads it per conversation (the deal by its key), where a semi-join could scan every
    ended deal. No message is written after the end, so a conversation quiet since before
    ``before`` is the only kind that can qualify: tested first, it spares the lookups."""
    last_change = (
        select(func.max(DealStatusChange.created_at))
        .where(DealStatusChange.deal_id == Deal.id)
        .scalar_subquery()
    )
    ended_at = (
        select(func.coalesce(last_change, Deal.updated_at))
        .where(Deal.id == Conversation.deal_id, Deal.status.in_(FINAL_STATUSES))
        .scalar_subquery()
    )
    return and_(Conversation.last_message_at < before, ended_at < before)


def purgeable_conversations(before: datetime, limit: int) -> Select[uuid.UUID]:
    """The ``limit`` conversations quiet longest of deals that ended before ``before``; on
    PostgreSQL locked (``SKIP LOCKED``), and only they, never their deals."""
    query = select(Conversation.id).where(_ended_before(before))
    return oldest_batch(query, Conversation.last_message_at, limit)


async def purge_ended(session: AsyncSession, before: datetime, limit: int) -> int:
    """Delete one batch of ``purgeable_conversations``; their messages go with them, by the
    foreign key's cascade. Returns how many conversations went."""
    chosen = Conversation.id.in_(purgeable_conversations(before, limit))
    return await delete_batch(session, Conversation, chosen)
