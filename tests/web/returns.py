"""A deal the buyer disputes through the pages, and the operator's return-then-refund decision."""

import uuid

from dealbroker.deals import flows
from tests.lifecycle_helpers import SETTINGS
from tests.web.pages import (
    paid,
    signed_deal,
    status_of,
    submit,
)


async def disputed(client, caller) -> tuple[dict, str, str]:
    """A paid pickup deal the buyer reported a problem with, through the pages."""
    deal, seller, buyer = await signed_deal(client, caller, "Pickup")
    await paid(client, seller, buyer)
    assert (await submit(client, buyer, "deny", reason="The frame is cracked")).status_code == 303
    assert await status_of(client, caller, deal) == ("Pickup_Denied", "Paid")
    return deal, seller, buyer


async def decide_return(sessionmaker, deal: dict, reason: str | None = None) -> None:
    """The operator's decision, as ``dealbroker disputes resolve --return-then-refund``."""
    async with sessionmaker() as session, session.begin():
        await flows.resolve_dispute(
            session,
            uuid.UUID(deal["id"]),
            flows.DisputeOutcome.RETURN_THEN_REFUND,
            SETTINGS,
            reason=reason,
            return_address=ADDRESS,
        )


ADDRESS = "Kari Nordmann, Storgata 1, 0155 Oslo"
