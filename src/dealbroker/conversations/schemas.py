"""A deal's conversations as the API shows them to the deal's integration."""

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from dealbroker.conversations.models import Conversation, ConversationMessage
from dealbroker.core.pagination import Page
from dealbroker.core.validation import examples

MESSAGE_EXAMPLE: dict[str, Any] = {
    "id": "0e1d2c3b-4a59-4687-9a6b-5c4d3e2f1a0b",
    "from": "buyer",
    "text": "Is the frame 56 cm? Call me on 912 34 567.",
    "sentAt": "2026-11-22T10:05:00.000Z",
    "warnings": ["phone"],
    "reported": False,
    "hidden": False,
}
HIDDEN_EXAMPLE: dict[str, Any] = {
    "id": "1f2e3d4c-5b6a-4798-8a7b-6c5d4e3f2a1b",
    "from": "seller",
    "text": None,
    "sentAt": "2026-11-22T10:20:00.000Z",
    "warnings": [],
    "reported": True,
    "hidden": True,
}
CONVERSATION_EXAMPLE: dict[str, Any] = {
    "id": "4c3b2a19-8f7e-4d6c-b5a4-93827160f5e4",
    "offerLinkId": "7d1c2b9a-5f7e-4d8c-8a51-0e2f4b6c9d13",
    "buyerName": "Ola Nordmann",
    "createdAt": "2026-11-22T10:05:00.000Z",
    "lastMessageAt": "2026-11-22T10:20:00.000Z",
    "sellerBlocked": False,
    "buyerBlocked": False,
    "messages": [MESSAGE_EXAMPLE, HIDDEN_EXAMPLE],
}


class MessageOut(BaseModel):
    """One message, as either party sees it; one support hid shows that it was hidden, not
    its words."""

    model_config = examples(MESSAGE_EXAMPLE)

    id: UUID = Field(description="The message's id: the `messageId` of its `deal.message` event.")
    from_: Literal["seller", "buyer"] = Field(alias="from", description="Who wrote it.")
    text: str | None = Field(
        description="Plain text, as written (line breaks kept); null when support hid it."
    )
    sentAt: datetime  # noqa: N815
    warnings: list[Literal["phone", "email", "link", "payment"]] = Field(
        description="What the reader is warned about: a phone number, an e-mail address, a "
        "link or payment words, found in a message written before the deal was paid (never "
        "pay outside the deal); empty after."
    )
    reported: bool = Field(description="Whether the other party reported it to support.")
    hidden: bool = Field(description="Whether support hid it (its `text` is then null).")


class ConversationOut(BaseModel):
    """The seller and one buyer (one offer link): before the offer, about it, and after the
    approval for the approved buyer."""

    model_config = examples(CONVERSATION_EXAMPLE)

    id: UUID = Field(description="The `conversationId` of its `deal.message` events.")
    offerLinkId: UUID = Field(  # noqa: N815
        description="The `offer` reference of the buyer's link (the `offerLinkId` of their offers)."
    )
    buyerName: str | None = Field(  # noqa: N815
        description="The buyer's name from their latest offer, else the one the link was "
        "made with; null when neither is known."
    )
    createdAt: datetime  # noqa: N815
    lastMessageAt: datetime  # noqa: N815
    sellerBlocked: bool = Field(  # noqa: N815
        description="Support stopped the seller writing on this deal."
    )
    buyerBlocked: bool = Field(  # noqa: N815
        description="Support stopped this buyer writing here."
    )
    messages: list[MessageOut] = Field(description="Oldest first.")


class ConversationPage(BaseModel):
    model_config = examples(
        {
            "page": {"pageSize": 10, "pageNumber": 1, "totalPages": 1, "totalCount": 1},
            "items": [CONVERSATION_EXAMPLE],
        }
    )

    page: Page
    items: list[ConversationOut]


def message_out(message: ConversationMessage) -> dict[str, object]:
    """The JSON body of a message (the shape of ``MessageOut``): a hidden one without its
    words or what they were warned about."""
    hidden = message.hidden_at is not None
    return {
        "id": message.id,
        "from": message.author,
        "text": None if hidden else message.body,
        "sentAt": message.created_at,
        "warnings": [] if hidden else list(message.warnings),
        "reported": message.reported_at is not None,
        "hidden": hidden,
    }


def conversation_out(
    conversation: Conversation, messages: list[ConversationMessage], buyer_name: str | None
) -> dict[str, object]:
    """The JSON body of a conversation (the shape of ``ConversationOut``)."""
    return {
        "id": conversation.id,
        "offerLinkId": conversation.offer_link_id,
        "buyerName": buyer_name,
        "createdAt": conversation.created_at,
        "lastMessageAt": conversation.last_message_at,
        "sellerBlocked": conversation.seller_blocked_at is not None,
        "buyerBlocked": conversation.buyer_blocked_at is not None,
        "messages": [message_out(m) for m in messages],
    }
