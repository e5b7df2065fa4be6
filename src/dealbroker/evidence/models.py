"""Evidence rows: statements, photos, the photos' bytes when the database keeps them, and the
pixels decoded for each party (their hourly budget)."""

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, LargeBinary, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class EvidenceStatement(Base):
    """What one party wrote about the dispute. Append-only: a party adds another statement
    rather than changing one the other party and the operator may have read already."""

    __tablename__ = "evidence_statements"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    party: Mapped[str] = mapped_column(String(10))  # "seller" or "buyer"
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_evidence_statements_deal", "deal_id", "created_at"),)


class EvidencePhoto(Base):
    """One photo a party added: always a JPEG we re-encoded (``intake``), kept under
    ``storage_key`` in the store named by ``storage`` ("database" or "s3")."""

    __tablename__ = "evidence_photos"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    party: Mapped[str] = mapped_column(String(10))
    storage: Mapped[str] = mapped_column(String(10))
    storage_key: Mapped[str] = mapped_column(String(200))
    content_type: Mapped[str] = mapped_column(String(40))
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    byte_size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_evidence_photos_deal", "deal_id", "party", "created_at"),)


class EvidencePhotoData(Base):
    """A photo's bytes, when the database is the store (the default)."""

    __tablename__ = "evidence_photo_data"

    storage_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    photo_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("evidence_photos.id", ondelete="CASCADE")
    )
    data: Mapped[bytes] = mapped_column(LargeBinary)


class EvidencePixelCharge(Base):
    """Pixels decoded (or about to be) for one photo a party uploaded, refused or kept: what the
    party's hourly pixel budget counts (``evidence.budget``). Rows past the hour are deleted
    at the party's next upload."""

    __tablename__ = "evidence_pixel_charges"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    party: Mapped[str] = mapped_column(String(10))
    pixels: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_evidence_pixel_charges_deal", "deal_id", "party", "created_at"),)
