"""Offer links: what the integration prepared for a buyer, reached by an unguessable URL."""

import uuid
from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, ForeignKey, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime, enum_column


class OfferLink(Base):
    __tablename__ = "offer_links"

    # The public offer reference, carried in the link's ``offer`` query parameter.
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("deals.id", ondelete="CASCADE"), index=True
    )
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    # SHA-256 of the link's path token; the token is only in the URL given to the integration.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    price_minor: Mapped[int | None] = mapped_column(BigInteger)
    buyer_name: Mapped[str | None] = mapped_column(String(200))
    buyer_email: Mapped[str | None] = mapped_column(String(254))
    buyer_redirect_url: Mapped[str | None] = mapped_column(String(2048))
    seller_redirect_url: Mapped[str | None] = mapped_column(String(2048))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class OfferStatus(StrEnum):
    PENDING = "Pending"
    APPROVED = "Approved"
    DENIED = "Denied"
    # The buyer took the offer back before the seller answered.
    WITHDRAWN = "Withdrawn"
    # Every deal ends: approved, but its buyer did not sign and pay by the deadline.
    LAPSED = "Lapsed"


class Offer(Base):
    """A buyer's offer on a deal: ``Pending`` until the seller approves or denies it, or its
    buyer withdraws it."""

    __tablename__ = "offers"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("deals.id", ondelete="CASCADE"), index=True
    )
    integration_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    offer_link_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    price_minor: Mapped[int] = mapped_column(BigInteger)
    shipping_type: Mapped[str] = mapped_column(String(10))
    # The shipping price quoted to the buyer with a Carrier offer (``parcels.quotes``): what the
    # parcel costs, whoever pays it. None for Pickup, or when no carrier is configured.
    shipping_minor: Mapped[int | None] = mapped_column(BigInteger)
    buyer_user_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    buyer_name: Mapped[str | None] = mapped_column(String(200))
    buyer_email: Mapped[str] = mapped_column(String(254))
    buyer_redirect_url: Mapped[str | None] = mapped_column(String(2048))
    seller_redirect_url: Mapped[str | None] = mapped_column(String(2048))
    status: Mapped[OfferStatus] = mapped_column(enum_column(OfferStatus, 10))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The language the buyer reads their messages in: that of the page they made the offer on,
    # or last acted on (None for an offer made without a page: the deployment's default).
    locale: Mapped[str | None] = mapped_column(String(5))
