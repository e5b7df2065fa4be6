"""The developer portal's members, their one-time login links and their sessions.

A member is an e-mail address in one integration with one role; a person in several
integrations is several members (one per integration) with one address. A login link and a
session belong to the address (the person): after logging in they choose the integration,
and the session then holds the member they act as. Links and sessions are ``core.login``'s
tokens, stored only as their SHA-256.
"""

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from dealbroker.core.db import Base
from dealbroker.core.login import LinkColumns, SessionColumns
from dealbroker.core.types import UTCDateTime

# Each role may do what the ones before it may, and more: read-only reads the integration's
# pages; developer also manages its webhooks and sandbox; owner also its secrets and members.
ROLES = ("read-only", "developer", "owner")


def at_least(role: str, needed: str) -> bool:
    """Whether ``role`` may do what ``needed`` may (owner ⊇ developer ⊇ read-only)."""
    return ROLES.index(role) >= ROLES.index(needed)


class PortalMember(Base):
    __tablename__ = "portal_members"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    integration_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("integrations.id", ondelete="CASCADE")
    )
    email: Mapped[str] = mapped_column(String(254))
    # The address lower-cased: Ann@x and ann@x are one person.
    email_key: Mapped[str] = mapped_column(String(254), index=True)
    role: Mapped[str] = mapped_column(String(20))
    # The language the member last used the portal in (their e-mails' language); None until
    # they have.
    locale: Mapped[str | None] = mapped_column(String(10), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (UniqueConstraint("integration_id", "email_key"),)


class PortalLoginLink(LinkColumns, Base):
    """A one-time link e-mailed to an address that is a member somewhere."""

    __tablename__ = "portal_login_links"

    email_key: Mapped[str] = mapped_column(String(254))

    # The per-address bound counts an address's recent links.
    __table_args__ = (Index("ix_portal_login_links_email", "email_key", "created_at"),)


class PortalSession(SessionColumns, Base):
    """A logged-in portal browser: the person (``email_key``), and the member they chose to
    act as (None until they have chosen among their integrations)."""

    __tablename__ = "portal_sessions"

    email_key: Mapped[str] = mapped_column(String(254))
    member_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("portal_members.id", ondelete="CASCADE"), nullable=True, index=True
    )

    __table_args__ = (Index("ix_portal_sessions_expires_at", "expires_at"),)
