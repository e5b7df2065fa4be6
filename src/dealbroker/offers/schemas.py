"""The offer-link request and response, as the interface names them."""

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, Field

from dealbroker.core import money
from dealbroker.core.pagination import Page
from dealbroker.core.validation import Email, HttpUrl, Price, RequestModel, examples, text
from dealbroker.offers.models import Offer, OfferStatus


class OfferBuyer(RequestModel):
    name: str | None = text(200)
    email: Email | None = None


class OfferLinkCreate(RequestModel):
    model_config = examples(
        {
            "price": 4200.0,
            "buyer": {"name": "Ola Nordmann", "email": "ola@example.com"},
            "buyerRedirectUrl": "https://marketplace.example.com/offer-sent",
            "sellerRedirectUrl": "https://marketplace.example.com/offer-approved",
        }
    )

    price: Price | None = Field(default=None, description="Defaults to the deal's price.")
    buyer: OfferBuyer | None = None
    buyerRedirectUrl: HttpUrl | None = None  # noqa: N815
    sellerRedirectUrl: HttpUrl | None = None  # noqa: N815


class OfferLinkOut(BaseModel):
    model_config = examples(
        {"url": "http://127.0.0.1:8000/o/q3J…Xw?offer=7d1c2b9a-5f7e-4d8c-8a51-0e2f4b6c9d13"}
    )

    url: str


OFFER_EXAMPLE: dict[str, Any] = {
    "id": "5a7e3c1d-2b4f-4e6a-9c8d-1f2e3d4c5b6a",
    "dealId": "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10",
    "offerLinkId": "7d1c2b9a-5f7e-4d8c-8a51-0e2f4b6c9d13",
    "price": 4200,
    "shippingType": "Carrier",
    "buyerName": "Ola Nordmann",
    "buyerEmail": "ola@example.com",
    "status": "Pending",
    "createdAt": "2026-11-22T10:05:00.000Z",
    "decidedAt": None,
}


class OfferOut(BaseModel):
    """A buyer's offer on a deal."""

    model_config = examples(OFFER_EXAMPLE)

    id: UUID = Field(
        description="The offer's id: the `id` of its `deal.offer` event, and of "
        "its `deal.offerApproved` or `deal.offerDenied`."
    )
    dealId: UUID  # noqa: N815
    offerLinkId: UUID | None = Field(  # noqa: N815
        description="The `offer` reference of the link it was made through (the `offerLinkId` "
        "of its `deal.offer` event); null for an offer made without one (the sandbox's)."
    )
    price: float
    shippingType: Literal["Carrier", "Pickup"]  # noqa: N815
    buyerName: str | None  # noqa: N815
    buyerEmail: str  # noqa: N815
    status: OfferStatus = Field(
        description="`Pending` until the seller approves or denies it (approving one denies "
        "the other pending ones, so does cancelling the deal), or its buyer withdraws it; "
        "`Lapsed`: approved, but not signed and paid by the approval's deadline."
    )
    createdAt: datetime  # noqa: N815
    decidedAt: datetime | None = Field(  # noqa: N815
        description="When it stopped being `Pending`."
    )


class OfferPage(BaseModel):
    model_config = examples(
        {
            "page": {"pageSize": 20, "pageNumber": 1, "totalPages": 1, "totalCount": 1},
            "items": [OFFER_EXAMPLE],
        }
    )

    page: Page
    items: list[OfferOut]


def offer_out(offer: Offer) -> dict[str, object]:
    """The JSON body of an offer (the shape of ``OfferOut``)."""
    return {
        "id": offer.id,
        "dealId": offer.deal_id,
        "offerLinkId": offer.offer_link_id,
        "price": money.to_number(offer.price_minor),
        "shippingType": offer.shipping_type,
        "buyerName": offer.buyer_name,
        "buyerEmail": offer.buyer_email,
        "status": offer.status,
        "createdAt": offer.created_at,
        "decidedAt": offer.decided_at,
    }
