"""Each party's hourly pixel budget for the photos they upload to a dispute.

Decoding a photo takes memory and CPU in proportion to its pixels, and an upload that is
refused once decoded (a file that does not decode to the end) takes no place among the party's
photos, so without a budget a party could have the server decode 50-megapixel files without
end. Every upload is charged the pixels its header claims (``intake.pixels``) before a pixel is
decoded, whether the photo is then kept or refused; a charge that would take the party's
charges of the last hour (a sliding hour) past ``DEALBROKER_EVIDENCE_PIXELS_PER_PARTY_PER_HOUR``
is refused with 429 and ``Retry-After``, the seconds until enough of them are an hour old.

The charges are rows (``evidence_pixel_charges``), so the budget holds across the server
processes and restarts. A charge is counted under the deal's row lock (PostgreSQL; SQLite's
writers queue anyway), so two uploads at once cannot both take the last of the budget; the
caller commits it at once, before decoding, so a refusal that follows still counts.
"""

import math
import uuid
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.errors import TooManyRequests
from dealbroker.core.i18n import ngettext
from dealbroker.deals.models import Deal
from dealbroker.evidence.models import EvidencePixelCharge

WINDOW = timedelta(hours=1)


class PixelBudgetSpent(TooManyRequests):
    """The party's photos of the last hour hold as many pixels as they may have decoded."""

    reason = "pixel_budget"

    def __init__(self, retry_after: int) -> None:
        super().__init__("This party has sent as many photo pixels as an hour allows.", retry_after)
        minutes = math.ceil(retry_after / 60)
        self.page_detail = ngettext(
            "You have sent more large photos in the last hour than we can take. Try again in "
            "%(minutes)s minute.",
            "You have sent more large photos in the last hour than we can take. Try again in "
            "%(minutes)s minutes.",
            minutes,
        ) % {"minutes": minutes}


async def _charges(
    session: AsyncSession, deal_id: uuid.UUID, party: str, now: datetime
) -> list[tuple[datetime, int]]:
    """The party's charges of the last hour, oldest first: (when, pixels)."""
    rows = await session.execute(
        select(EvidencePixelCharge.created_at, EvidencePixelCharge.pixels)
        .where(
            EvidencePixelCharge.deal_id == deal_id,
            EvidencePixelCharge.party == party,
            EvidencePixelCharge.created_at > now - WINDOW,
        )
        .order_by(EvidencePixelCharge.created_at)
    )
    return [(at, int(pixels)) for at, pixels in rows.all()]


def _wait(charges: list[tuple[datetime, int]], pixels: int, budget: int, now: datetime) -> int:
    """Seconds until ``pixels`` more fit in ``budget`` beside ``charges``: 0 if they fit now."""
    left = sum(p for _at, p in charges)
    if left + pixels <= budget:
        return 0
    for at, charged in charges:  # oldest first: the first to leave the hour
        left -= charged
        if left + pixels <= budget:
            return max(1, math.ceil((at + WINDOW - now).total_seconds()))
    return math.ceil(WINDOW.total_seconds())  # a charge larger than the budget: never


async def check(session: AsyncSession, deal: Deal, party: str, budget: int) -> None:
    """``PixelBudgetSpent`` if the party has no pixel of its budget left: asked before the
    upload's body is read."""
    now = clock.now()
    wait = _wait(await _charges(session, deal.id, party, now), 1, budget, now)
    if wait:
        raise PixelBudgetSpent(wait)


async def charge(
    session: AsyncSession, deal_id: uuid.UUID, party: str, pixels: int, budget: int
) -> None:
    """Charge the party ``pixels`` (the deal's row locked meanwhile), or ``PixelBudgetSpent``.
    The caller commits before decoding. The party's charges past the hour are deleted."""
    await session.execute(select(Deal.id).where(Deal.id == deal_id).with_for_update())
    now = clock.now()
    wait = _wait(await _charges(session, deal_id, party, now), pixels, budget, now)
    if wait:
        raise PixelBudgetSpent(wait)
    await session.execute(
        delete(EvidencePixelCharge).where(
            EvidencePixelCharge.deal_id == deal_id,
            EvidencePixelCharge.party == party,
            EvidencePixelCharge.created_at <= now - WINDOW,
        )
    )
    session.add(
        EvidencePixelCharge(
            id=uuid.uuid4(), deal_id=deal_id, party=party, pixels=pixels, created_at=clock.now()
        )
    )
    await session.flush()
