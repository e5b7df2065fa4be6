"""What the carrier says about a deal's parcel: the one entry point for carrier events.

The integration, which books the shipment for its users, reports each carrier event through the
API (``POST /deals/v1/deals/{dealId}/shipment-events``); the sandbox's simulated carrier (the
seller page's sandbox buttons) reports through the same function. ``report`` records the event
on the deal (both parties' pages list them with their times), emits it as a ``deal.shipment``
event and, where the event moves the deal, fires the lifecycle's transition as the carrier
(``Actor.PROVIDER``):

- ``picked_up``: the hand-over when the deal is still ``Shipping_Pending``
  (``Shipping_In_Progress``, the transit deadline starts); recorded when already in transit;
- ``in_transit``: recorded while the parcel is in transit;
- ``delivered``: ``Shipping_Arrived`` (the buyer's 24 hours to review start);
- ``returned``: ``Shipping_Returned``, then ``Refunded`` (the whole amount back to the buyer).

An event that makes no sense for the deal's status is refused as an illegal transition (409,
with the current status). The same event reported again (same type, carrier, tracking number
and time) changes nothing and emits nothing: carriers and integrations retry.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.clock import to_millis
from dealbroker.core.errors import FieldError
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import flows
from dealbroker.deals import service as deals
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.events import service as events
from dealbroker.events.envelope import EventKind, deal_shipment


class ShipmentEventType(StrEnum):
    PICKED_UP = "picked_up"
    IN_TRANSIT = "in_transit"
    DELIVERED = "delivered"
    RETURNED = "returned"


# How far from now a carrier's event time may be: a scan from the future (beyond clock skew)
# or from long before any deal could have been paid is a mistake, not news.
MAX_AHEAD = timedelta(hours=1)
MAX_BEHIND = timedelta(days=90)
# Events kept on a deal (the oldest dropped beyond it): a parcel's whole journey fits.
MAX_EVENTS = 50
MAX_CARRIER = 100
MAX_TRACKING = 100

_MOVES = {
    ShipmentEventType.DELIVERED: Trigger.CARRIER_DELIVERED,
    ShipmentEventType.RETURNED: Trigger.CARRIER_RETURNED,
}


@dataclass(frozen=True)
class CarrierEvent:
    type: ShipmentEventType
    carrier: str
    tracking_number: str
    occurred_at: datetime


def _record(event: CarrierEvent) -> dict[str, Any]:
    return {
        "type": event.type.value,
        "carrier": event.carrier,
        "trackingNumber": event.tracking_number,
        "occurredAt": to_millis(event.occurred_at),
    }


def events_of(deal: Deal) -> list[dict[str, Any]]:
    """The carrier events recorded on ``deal``, oldest first: what the pages show."""
    return list((deal.shipment or {}).get("events") or [])


def _check_time(event: CarrierEvent) -> None:
    now = clock.now()
    if event.occurred_at > now + MAX_AHEAD or event.occurred_at < now - MAX_BEHIND:
        raise FieldError(
            "occurredAt",
            "occurredAt must lie between 90 days ago and one hour from now.",
            "out of range",
        )


def _trigger(deal: Deal, event: CarrierEvent) -> Trigger | None:
    """The transition ``event`` fires on ``deal``, None if it is only recorded; refused (409)
    when it makes no sense for the deal's status."""
    status = DealStatus(deal.status)
    if event.type in _MOVES:
        return _MOVES[event.type]
    if event.type is ShipmentEventType.PICKED_UP and status is DealStatus.SHIPPING_PENDING:
        return Trigger.CARRIER_PICKED_UP
    if status is DealStatus.SHIPPING_IN_PROGRESS:
        return None
    raise deals.illegal(deal, f"{event.type.value} (a carrier event)", Actor.PROVIDER)


async def report(
    session: AsyncSession, deal: Deal, event: CarrierEvent, settings: Settings
) -> Deal:
    """The carrier's ``event`` about ``deal`` (row locked by the caller): recorded, emitted and,
    where it moves the deal, fired as the carrier."""
    _check_time(event)
    record = _record(event)
    recorded = events_of(deal)
    if record in recorded:
        return deal  # a retry of an event already taken
    trigger = _trigger(deal, event)
    deal.shipment = {
        **(deal.shipment or {}),
        "carrier": event.carrier,
        "tracking": event.tracking_number,
        "events": [*recorded, record][-MAX_EVENTS:],
    }
    # The carrier's news first, then the status change it causes (if any), in the deal's order.
    data = deal_shipment(deal.id, record)
    await events.emit(session, deal.integration_id, EventKind.DEAL_SHIPMENT, data, deal_id=deal.id)
    if trigger is None:
        await deals.touch(session, deal)
        return deal
    return await flows.fire(session, deal, trigger, Actor.PROVIDER, settings)


async def report_for(
    session: AsyncSession,
    integration_id: uuid.UUID,
    deal_id: uuid.UUID,
    event: CarrierEvent,
    settings: Settings,
) -> Deal:
    """The integration reports ``event`` about its deal (another's deal is 404)."""
    deal = await deals.get_for(session, integration_id, deal_id, for_update=True)
    return await report(session, deal, event, settings)
