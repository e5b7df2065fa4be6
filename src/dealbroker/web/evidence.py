"""The evidence section of both parties' pages (``_evidence.html``): what it shows, taking an
uploaded photo from a form (``PhotoUpload``), and serving a photo to a party.

The rules (who may add what, when, how many) live in ``evidence.service``; the pages' routes
(``web.seller``, ``web.buyer``) check the capability link and lock the deal.
"""

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import FormData, UploadFile
from starlette.responses import Response

from dealbroker import parties
from dealbroker.core.errors import BadRequest, DealSuspended, DomainError, FieldError
from dealbroker.core.i18n import _
from dealbroker.core.metrics import evidence_photo_refusals
from dealbroker.core.settings import Settings
from dealbroker.deals.models import Deal
from dealbroker.evidence import budget, intake
from dealbroker.evidence import service as evidence
from dealbroker.evidence.service import Party

# The photo upload's own body cap: the photo's bound and room for the form around it (the
# CSRF token, the version, the multipart boundaries and headers). Every other request keeps
# the app's small cap.
UPLOAD_CAP = intake.MAX_PHOTO_BYTES + 64 * 1024
UPLOAD_PATHS = (
    (r"/d/[^/]+/[^/]+/-/evidence-photo", UPLOAD_CAP),
    (r"/o/[^/]+/-/evidence-photo", UPLOAD_CAP),
)
# How a photo is served: to the two parties only (capability links), never cached, always as
# the JPEG we wrote (whatever was uploaded), never sniffed as anything else, shown inline.
PHOTO_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Disposition": "inline",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex",
    "Content-Security-Policy": "default-src 'none'; sandbox",
}


async def section(session: AsyncSession, deal: Deal, party: Party) -> dict[str, Any] | None:
    """What the page's evidence section shows ``party``: both sides' statements and photos,
    and whether (and how much) they may still add. None when there is nothing to show: a deal
    never in dispute."""
    found = await evidence.of_deal(session, deal.id)
    is_open = evidence.open_for_evidence(deal)
    if found.empty and not is_open:
        return None
    return {
        "party": party.value,
        "open": is_open,
        "statements": found.statements,
        "photos": found.photos,
        "photos_left": found.photos_left(party),
        "photos_max": evidence.MAX_PHOTOS_PER_PARTY,
        "statements_left": found.statements_left(party),
        "statement_max": evidence.MAX_STATEMENT_CHARS,
    }


class PhotoUpload:
    """One photo ``party`` posts to their deal's page, in three steps, each refusal counted by
    its reason (``dealbroker_evidence_photo_refusals_total``):

    - ``admit``, before the body is read (the multipart form is not even parsed): the deal is
      in dispute and not suspended, the party has a place left and pixels of the hour left.
      A photo that could not be kept is refused here, at the cost of two queries, whatever
      it holds.
    - ``prepare``, once the form is read, outside the deal's lock: the file's bytes and its
      header's pixels bounded, the pixels charged to the party's hourly budget (committed at
      once, so a refusal that follows counts), then decoded and written anew (``Decoder``).
    - ``add``, under the deal's lock: the photo kept, its place counted again.

    Each step ends the request's transaction before what takes time (the body's arrival, the
    decoding), so neither holds a database lock (SQLite's write lock) meanwhile."""

    def __init__(self, request: Request, session: AsyncSession, party: Party) -> None:
        self.session = session
        self.party = party
        self.settings: Settings = request.app.state.settings
        self.decoder: intake.Decoder = request.app.state.photo_decoder
        self.photo: intake.Photo | None = None

    async def admit(self, shown: Deal, before: Callable[[], Awaitable[None]] | None = None) -> None:
        """Refuse before the body is read, ``before`` (the page's own check) first."""
        async with counted():
            if before is not None:
                await before()
            if await parties.suspended(self.session, shown):
                raise DealSuspended(_(parties.SUSPENDED))
            await evidence.photo_admissible(self.session, shown, self.party, self.settings)
        await self.session.commit()

    async def prepare(self, shown: Deal, form: FormData) -> None:
        """Read, bound, charge and decode the form's photo (kept for ``add``)."""
        async with counted():
            upload = form.get(intake.FIELD)
            if not isinstance(upload, UploadFile):
                raise intake.PhotoRefused("no_photo", _("Choose a photo to send."))
            data = await upload.read(intake.MAX_PHOTO_BYTES + 1)
            if len(data) > intake.MAX_PHOTO_BYTES:
                raise intake.too_large()
            pixels = await self.decoder.pixels(data)
            budget_ = self.settings.evidence_pixels_per_party_per_hour
            await budget.charge(self.session, shown.id, self.party.value, pixels, budget_)
            await self.session.commit()
            self.photo = await self.decoder.reencode(data)

    async def add(self, deal: Deal) -> None:
        """Keep the photo on ``deal``, row locked by the caller."""
        assert self.photo is not None
        async with counted():
            await evidence.add_photo(self.session, deal, self.party, self.photo, self.settings)


@asynccontextmanager
async def counted() -> AsyncIterator[None]:
    """Count a refusal of a photo upload by its reason (the refusal's ``reason``; "not_a_party"
    for the buyer's page's own check, "suspended"; "other" for anything else)."""
    try:
        yield
    except DomainError as exc:
        evidence_photo_refusals.labels(refusal_reason(exc)).inc()
        raise


def refusal_reason(exc: DomainError) -> str:
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str):
        return reason
    if isinstance(exc, DealSuspended):
        return "suspended"
    if isinstance(exc, BadRequest) and not isinstance(exc, FieldError):
        return "not_a_party"  # the buyer's page's check: an offer that was not approved
    return "other"


async def photo_response(
    session: AsyncSession, deal_id: uuid.UUID, photo: str, settings: Settings
) -> Response | None:
    """The photo ``photo`` of ``deal_id`` as a response; None (the caller's 404) for a photo
    id that is not one, or not of this deal."""
    try:
        photo_id = uuid.UUID(photo)
    except ValueError:
        return None
    try:
        _row, data = await evidence.read_photo(session, deal_id, photo_id, settings)
    except DomainError:
        return None
    return Response(data, media_type=intake.CONTENT_TYPE, headers=PHOTO_HEADERS)
