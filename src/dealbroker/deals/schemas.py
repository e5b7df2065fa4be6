"""Request and response bodies of the deal endpoints, exactly as the interface names them."""

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, EmailStr, Field

from dealbroker.core import money
from dealbroker.core.validation import HttpUrl, Price, RequestModel, text
from dealbroker.deals.lifecycle import DealStatus

if TYPE_CHECKING:
    from dealbroker.deals.models import Deal

PackageType = Literal["Small", "Medium", "Large", "XL"]
MAX_IMAGES = 20


class Seller(RequestModel):
    """The seller's details; every field is optional, ``email`` is needed for offer links."""

    firstname: str | None = text(100)
    lastname: str | None = text(100)
    phone: str | None = Field(default=None, min_length=3, max_length=32, pattern=r"^\+?[0-9 ()-]+$")
    email: EmailStr | None = Field(default=None, max_length=254)
    address: str | None = text(200)
    postcode: str | None = text(20)
    town: str | None = text(100)


class DealCreate(RequestModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "Road bike",
                    "description": "Aluminium frame, 56 cm, lightly used.",
                    "price": 4500.0,
                    "images": ["https://cdn.example.com/bike-1.jpg"],
                    "packageType": "Large",
                    "seller": {
                        "firstname": "Kari",
                        "lastname": "Nordmann",
                        "phone": "+47 400 00 000",
                        "email": "kari@example.com",
                        "address": "Storgata 1",
                        "postcode": "0155",
                        "town": "Oslo",
                    },
                }
            ]
        },
    )

    name: str | None = text(200)
    description: str | None = text(5000)
    price: Price | None = None
    images: Annotated[list[HttpUrl], Field(max_length=MAX_IMAGES)] | None = None
    packageType: PackageType | None = None  # noqa: N815 - the interface's field name
    seller: Seller | None = None


class SellerOut(BaseModel):
    firstname: str | None
    lastname: str | None
    phone: str | None
    email: str | None
    address: str | None
    postcode: str | None
    town: str | None


class DealOut(BaseModel):
    """A deal as every deal endpoint returns it: the interface's fields, then additions."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10",
                    "name": "Road bike",
                    "description": "Aluminium frame, 56 cm, lightly used.",
                    "price": 4500,
                    "status": "Draft",
                    "seller": {
                        "firstname": "Kari",
                        "lastname": "Nordmann",
                        "phone": "+47 400 00 000",
                        "email": "kari@example.com",
                        "address": "Storgata 1",
                        "postcode": "0155",
                        "town": "Oslo",
                    },
                    "url": "http://127.0.0.1:8000/d/3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10/Zk9…",
                    "images": ["https://cdn.example.com/bike-1.jpg"],
                    "packageType": "Large",
                    "currency": "NOK",
                    "paymentStatus": None,
                    "createdAt": "2026-11-22T10:00:00.000Z",
                    "updatedAt": "2026-11-22T10:00:00.000Z",
                }
            ]
        }
    )

    id: UUID
    name: str | None
    description: str | None
    price: float | None
    status: DealStatus
    seller: SellerOut | None
    url: str = Field(
        description="The seller's page for this deal: a capability link, keep it private."
    )
    images: list[str]
    packageType: PackageType | None  # noqa: N815
    currency: str
    paymentStatus: str | None  # noqa: N815
    createdAt: datetime  # noqa: N815
    updatedAt: datetime  # noqa: N815


class Page(BaseModel):
    pageSize: int  # noqa: N815
    pageNumber: int  # noqa: N815
    totalPages: int  # noqa: N815
    totalCount: int  # noqa: N815


class DealPage(BaseModel):
    page: Page
    items: list[DealOut]


class StatusChange(RequestModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "Cancelled"}]})

    # Lax for this one field so the JSON string converts to the enum; only its values pass.
    status: DealStatus = Field(strict=False)


SELLER_FIELDS = tuple(SellerOut.model_fields)


def deal_out(deal: "Deal", url: str) -> dict[str, object]:
    """The JSON body of a deal (the shape of ``DealOut``), built directly for speed."""
    seller = deal.seller
    return {
        "id": deal.id,
        "name": deal.name,
        "description": deal.description,
        "price": None if deal.price_minor is None else money.to_number(deal.price_minor),
        "status": deal.status,
        "seller": None if seller is None else {f: seller.get(f) for f in SELLER_FIELDS},
        "url": url,
        "images": deal.images,
        "packageType": deal.package_type,
        "currency": deal.currency,
        "paymentStatus": deal.payment_status,
        "createdAt": deal.created_at,
        "updatedAt": deal.updated_at,
    }
