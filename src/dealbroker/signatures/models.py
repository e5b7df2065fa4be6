"""A party's signature with eID: the flow from its start to the verified ID token, and the
minimal evidence kept of it."""

import uuid
from datetime import date, datetime

from sqlalchemy import Date, ForeignKey, Index, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.types import UTCDateTime


class EidSignature(Base):
    """One eID signing flow of one party on one deal. ``status`` goes ``Initiated``, then
    ``Completed`` or ``Failed`` once. ``terms_salt`` and the deal's terms give the flow's
    ``nonce`` (``signatures.eid.nonce``), so a token for other terms does not verify.

    The evidence is the verified token's: the issuer, its ``sub``, ``acr``, token id and time,
    the person's name and birth date, and the national identity number only as a keyed hash;
    never the token itself (it carries the number in clear)."""

    __tablename__ = "eid_signatures"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    deal_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("deals.id", ondelete="CASCADE"))
    signature_type: Mapped[str] = mapped_column(String(10))
    # "sign": the party signs the deal; "payout": the seller confirms a payout account change
    # (``payout_change_id``), which needs the identity that signed for the seller.
    purpose: Mapped[str] = mapped_column(String(10), default="sign", server_default="sign")
    payout_change_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    status: Mapped[str] = mapped_column(String(10))
    terms_salt: Mapped[str] = mapped_column(String(64))
    # sha256 of the state sent to the issuer: set when the browser is sent there, once.
    state_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Why it failed, for the operator (never shown to the party in these words).
    failure: Mapped[str | None] = mapped_column(String(300))
    issuer: Mapped[str | None] = mapped_column(String(500))
    subject: Mapped[str | None] = mapped_column(String(300))
    acr: Mapped[str | None] = mapped_column(String(200))
    token_id: Mapped[str | None] = mapped_column(String(300))
    token_issued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    name: Mapped[str | None] = mapped_column(String(300))
    birthdate: Mapped[date | None] = mapped_column(Date)
    national_id_hash: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        Index("ix_eid_signatures_deal", "deal_id", "signature_type"),
        # The retention job's scans (``dealbroker.retention``).
        Index("ix_eid_signatures_started_at", "started_at"),
        Index("ix_eid_signatures_finished_at", "finished_at"),
    )
