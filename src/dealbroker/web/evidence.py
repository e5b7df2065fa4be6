"""The evidence section of both parties' pages (``_evidence.html``): what it shows, reading an
uploaded photo from a form, and serving a photo to a party.

The rules (who may add what, when, how many) live in ``evidence.service``; the pages' routes
(``web.seller``, ``web.buyer``) check the capability link and lock the deal.
"""

import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import FormData, UploadFile
from starlette.responses import Response

from dealbroker.core.errors import DomainError, FieldError
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.deals.models import Deal
from dealbroker.evidence import intake
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


async def uploaded_photo(form: FormData) -> intake.Photo:
    """The form's ``photo`` file, read (at most one byte past the bound) and re-encoded."""
    upload = form.get(intake.FIELD)
    if not isinstance(upload, UploadFile):
        raise FieldError(intake.FIELD, _("Choose a photo to send."))
    data = await upload.read(intake.MAX_PHOTO_BYTES + 1)
    if len(data) > intake.MAX_PHOTO_BYTES:
        raise intake.too_large()
    return await intake.prepare(data)


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
