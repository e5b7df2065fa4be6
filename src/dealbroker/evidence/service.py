"""Dispute evidence: what the two parties of a disputed deal add until the operator decides.

Each party (the seller, the approved buyer) may add statements (append-only, each timestamped:
nothing the other party or the operator has read changes under them) and up to
``MAX_PHOTOS_PER_PARTY`` photos, only while the deal is in a dispute status
(``lifecycle.DISPUTES``); once the operator has decided, the deal has left it and every addition
is refused. A photo is refused before its upload is read when it could not be kept
(``photo_admissible``), and each party's photos are bounded in pixels per hour
(``budget``). Both parties see both sides. The callers are the parties' pages, which lock the
deal first (``parties.locked``), so the counts are taken under that row lock; the operator's
tools read through ``of_deal`` and ``read_photo``.
"""

import uuid
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.errors import Conflict, FieldError, NotFound, found
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle
from dealbroker.deals.models import Deal
from dealbroker.evidence import budget, storage
from dealbroker.evidence.intake import Photo
from dealbroker.evidence.models import EvidencePhoto, EvidenceStatement
from dealbroker.notifications import service as notifications

MAX_PHOTOS_PER_PARTY = 6
MAX_STATEMENTS_PER_PARTY = 20
MAX_STATEMENT_CHARS = 4000
STATEMENT_FIELD = "statement"


class Party(StrEnum):
    SELLER = "seller"
    BUYER = "buyer"


class EvidenceClosed(Conflict):
    """The deal is not in dispute (any more): nothing can be added."""

    reason = "closed"


class PhotosFull(Conflict):
    """The party has added as many photos as a dispute takes."""

    reason = "no_places"


def open_for_evidence(deal: Deal) -> bool:
    """Whether evidence may be added: the deal is in dispute, not yet decided."""
    return DealStatus(deal.status) in lifecycle.DISPUTES


def _check_open(deal: Deal) -> None:
    if not open_for_evidence(deal):
        raise EvidenceClosed(
            f"Evidence can be added only while the deal is in dispute; it is {deal.status}.",
            extra={"currentStatus": deal.status},
            page_detail=_(
                "Evidence can no longer be added: the dispute has been decided or the deal is "
                "not in dispute."
            ),
        )


async def _count(
    session: AsyncSession,
    model: type[EvidenceStatement] | type[EvidencePhoto],
    deal_id: uuid.UUID,
    party: Party,
) -> int:
    """How many statements or photos ``party`` has added to the deal."""
    query = (
        select(func.count())
        .select_from(model)
        .where(model.deal_id == deal_id, model.party == party.value)
    )
    return int(await session.scalar(query) or 0)


async def add_statement(
    session: AsyncSession, deal: Deal, party: Party, text: str | None
) -> EvidenceStatement:
    """``party`` adds a statement to the dispute of ``deal`` (row locked by the caller); the
    other party is told, in their language."""
    _check_open(deal)
    text = (text or "").strip()
    if not text:
        raise FieldError(STATEMENT_FIELD, _("Write what you want us to know."))
    if len(text) > MAX_STATEMENT_CHARS:
        too_long = _("This is too long (at most %(max)s characters).")
        raise FieldError(STATEMENT_FIELD, too_long % {"max": MAX_STATEMENT_CHARS})
    if await _count(session, EvidenceStatement, deal.id, party) >= MAX_STATEMENTS_PER_PARTY:
        raise Conflict(
            "This party has added the most statements a dispute takes.",
            page_detail=_(
                "You have added %(max)s statements, the most a dispute takes. Contact us if "
                "there is more we should know."
            )
            % {"max": MAX_STATEMENTS_PER_PARTY},
        )
    statement = EvidenceStatement(
        id=uuid.uuid4(), deal_id=deal.id, party=party.value, text=text, created_at=clock.now()
    )
    session.add(statement)
    await notifications.evidence_added(session, deal, party.value)
    return statement


async def _check_place(session: AsyncSession, deal: Deal, party: Party) -> None:
    if await _count(session, EvidencePhoto, deal.id, party) >= MAX_PHOTOS_PER_PARTY:
        raise PhotosFull(
            "This party has added the most photos a dispute takes.",
            page_detail=_("You have added %(max)s photos, the most a dispute takes.")
            % {"max": MAX_PHOTOS_PER_PARTY},
        )


async def photo_admissible(
    session: AsyncSession, deal: Deal, party: Party, settings: Settings
) -> None:
    """Refuse a photo of ``party`` from what is known before its upload is read: the deal is
    not in dispute (``EvidenceClosed``), the party's places are taken (``PhotosFull``), or
    their pixels of the hour are spent (``budget.PixelBudgetSpent``). Only a photo that could
    be kept is read and decoded; ``add_photo`` checks again under the deal's lock."""
    _check_open(deal)
    await _check_place(session, deal, party)
    await budget.check(session, deal, party.value, settings.evidence_pixels_per_party_per_hour)


async def add_photo(
    session: AsyncSession, deal: Deal, party: Party, photo: Photo, settings: Settings
) -> EvidencePhoto:
    """``party`` adds ``photo`` (already re-encoded by ``intake``) to the dispute of ``deal``,
    row locked by the caller: two uploads racing for the last place are counted one after the
    other, so a party never has more than ``MAX_PHOTOS_PER_PARTY``. No message: the other
    party reads the photos on their page (a message per photo would be noise)."""
    _check_open(deal)
    await _check_place(session, deal, party)
    store = storage.configured(settings)
    photo_id = uuid.uuid4()
    key = f"evidence/{deal.id}/{photo_id}.jpg"
    row = EvidencePhoto(
        id=photo_id,
        deal_id=deal.id,
        party=party.value,
        storage=store.name,
        storage_key=key,
        content_type=photo.content_type,
        width=photo.width,
        height=photo.height,
        byte_size=len(photo.data),
        sha256=photo.sha256,
        created_at=clock.now(),
    )
    session.add(row)
    await session.flush()  # the row before its bytes' row (which refers to it)
    await store.put(session, photo_id, key, photo.data)
    return row


@dataclass(frozen=True)
class Evidence:
    """A deal's evidence, oldest first."""

    statements: list[EvidenceStatement]
    photos: list[EvidencePhoto]

    def photos_left(self, party: Party) -> int:
        added = sum(1 for p in self.photos if p.party == party.value)
        return max(0, MAX_PHOTOS_PER_PARTY - added)

    def statements_left(self, party: Party) -> int:
        added = sum(1 for s in self.statements if s.party == party.value)
        return max(0, MAX_STATEMENTS_PER_PARTY - added)

    @property
    def empty(self) -> bool:
        return not self.statements and not self.photos


async def of_deal(session: AsyncSession, deal_id: uuid.UUID) -> Evidence:
    """Every statement and photo (without its bytes) of a deal, oldest first."""
    statements = await session.scalars(
        select(EvidenceStatement)
        .where(EvidenceStatement.deal_id == deal_id)
        .order_by(EvidenceStatement.created_at, EvidenceStatement.id)
    )
    photos = await session.scalars(
        select(EvidencePhoto)
        .where(EvidencePhoto.deal_id == deal_id)
        .order_by(EvidencePhoto.created_at, EvidencePhoto.id)
    )
    return Evidence(list(statements), list(photos))


async def read_photo(
    session: AsyncSession, deal_id: uuid.UUID, photo_id: uuid.UUID, settings: Settings
) -> tuple[EvidencePhoto, bytes]:
    """One photo of ``deal_id`` and its JPEG bytes; ``NotFound`` for a photo of another deal
    (or none), so a link to one deal never reaches another's evidence."""
    row = await session.scalar(
        select(EvidencePhoto).where(EvidencePhoto.id == photo_id, EvidencePhoto.deal_id == deal_id)
    )
    if row is None:
        raise NotFound("No such photo on this deal.")
    data = found(
        await storage.store_named(row.storage, settings).get(session, row.storage_key),
        "The photo's bytes are missing from its store.",
    )
    return row, data
