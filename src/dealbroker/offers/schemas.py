"""The offer-link request and response, as the interface names them."""

from pydantic import BaseModel, ConfigDict, EmailStr, Field

from dealbroker.core.validation import HttpUrl, Price, RequestModel, text


class OfferBuyer(RequestModel):
    name: str | None = text(200)
    email: EmailStr | None = Field(default=None, max_length=254)


class OfferLinkCreate(RequestModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "price": 4200.0,
                    "buyer": {"name": "Ola Nordmann", "email": "ola@example.com"},
                    "buyerRedirectUrl": "https://marketplace.example.com/offer-sent",
                    "sellerRedirectUrl": "https://marketplace.example.com/offer-approved",
                }
            ]
        },
    )

    price: Price | None = Field(default=None, description="Defaults to the deal's price.")
    buyer: OfferBuyer | None = None
    buyerRedirectUrl: HttpUrl | None = None  # noqa: N815
    sellerRedirectUrl: HttpUrl | None = None  # noqa: N815


class OfferLinkOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"url": "http://127.0.0.1:8000/o/q3J…Xw?offer=7d1c2b9a-5f7e-4d8c-8a51-0e2f4b6c9d13"}
            ]
        }
    )

    url: str
