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

A parcel dealbroker booked itself (``parcels``, ``source`` "carrier" in ``deal.shipment``) is
followed on the carrier's word alone: the integration's reports are refused for it (409), and
the carrier's events come through ``parcels.service.take_events`` with more kinds
(``lost`` opens the dispute; ``ready_for_pickup``, ``damaged`` and ``booked`` are recorded: a
parcel at a pickup point has not reached the buyer until they collect it, ``delivered``). A
carrier's event that comes late or out of order (a scan after the delivery) is recorded
without moving the deal, never refused: the carrier cannot be answered 409. One that skips the
hand-over scan (in transit or delivered while ``Shipping_Pending``) makes the hand-over first.
A deal whose buyer paid a carrier's price (``shipping_minor``) is dealbroker's to book: nobody
reports another parcel for it.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock
from dealbroker.core.clock import to_millis
from dealbroker.core.errors import Conflict, FieldError
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import flows, lifecycle
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
    # Only from a carrier dealbroker booked (``parcels``), never through the API.
    BOOKED = "booked"
    READY_FOR_PICKUP = "ready_for_pickup"
    LOST = "lost"
    DAMAGED = "damaged"


class Source(StrEnum):
    """Who tells us about a deal's parcel: one of them for each deal."""

    INTEGRATION = "integration"  # the marketplace (or the seller typing a tracking number)
    CARRIER = "carrier"  # a carrier dealbroker booked the parcel at


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
    ShipmentEventType.LOST: Trigger.CARRIER_LOST,
}
# Recorded only, in any status where a parcel may be on its way or arrived. A parcel ready at a
# pickup point has not reached the buyer yet: it may wait there for days and go back unclaimed,
# so the buyer's 24 hours start when they collect it (the carrier's ``delivered``).
_NEWS = frozenset(
    {ShipmentEventType.BOOKED, ShipmentEventType.DAMAGED, ShipmentEventType.READY_FOR_PICKUP}
)
# A carrier's scan that shows it has the parcel: the hand-over, if none was scanned.
_HANDED_OVER = frozenset(
    {
        ShipmentEventType.IN_TRANSIT,
        ShipmentEventType.READY_FOR_PICKUP,
        ShipmentEventType.DAMAGED,
    }
)


@dataclass(frozen=True)
class CarrierEvent:
    type: ShipmentEventType
    carrier: str
    tracking_number: str
    occurred_at: datetime
    # The carrier's own words, where it happened, and where the buyer collects the parcel:
    # given by a carrier dealbroker booked (bounded by its adapter), shown to the parties.
    description: str | None = None
    location: str | None = None
    pickup_point: str | None = None


def _record(event: CarrierEvent) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": event.type.value,
        "carrier": event.carrier,
        "trackingNumber": event.tracking_number,
        "occurredAt": to_millis(event.occurred_at),
    }
    for key, value in (
        ("description", event.description),
        ("location", event.location),
        ("pickupPoint", event.pickup_point),
    ):
        if value:
            record[key] = value
    return record


def source_of(deal: Deal) -> Source | None:
    """Who tells us about the deal's parcel; None before anyone has."""
    shipment = deal.shipment or {}
    if not shipment:
        return None
    return Source(shipment.get("source") or Source.INTEGRATION)


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


def _triggers(deal: Deal, event: CarrierEvent, lenient: bool) -> list[Trigger]:
    """The transitions ``event`` fires on ``deal``, in order (none if it is only recorded);
    refused (409) when it makes no sense for the deal's status, unless ``lenient`` (the
    carrier's own word): then it is only recorded."""
    status = DealStatus(deal.status)
    pending = status is DealStatus.SHIPPING_PENDING
    if event.type in _MOVES:
        trigger = _MOVES[event.type]
        if lenient and pending:
            return [Trigger.CARRIER_PICKED_UP, trigger]  # the hand-over was not scanned
        if lenient and lifecycle.transition_for(status, trigger, Actor.PROVIDER) is None:
            return []
        return [trigger]
    if event.type is ShipmentEventType.PICKED_UP and pending:
        return [Trigger.CARRIER_PICKED_UP]
    if lenient and pending and event.type in _HANDED_OVER:
        return [Trigger.CARRIER_PICKED_UP]  # the hand-over was not scanned
    if status is DealStatus.SHIPPING_IN_PROGRESS or lenient:
        return []
    if event.type in _NEWS and status is DealStatus.SHIPPING_PENDING:
        return []
    raise deals.illegal(deal, f"{event.type.value} (a carrier event)", Actor.PROVIDER)


async def report(
    session: AsyncSession,
    deal: Deal,
    event: CarrierEvent,
    settings: Settings,
    *,
    lenient: bool = False,
) -> Deal:
    """The carrier's ``event`` about ``deal`` (row locked by the caller): recorded, emitted and,
    where it moves the deal, fired as the carrier. ``lenient`` for the carrier's own word (a
    parcel dealbroker booked): an event that cannot move the deal now is recorded only."""
    _check_time(event)
    record = _record(event)
    recorded = events_of(deal)
    if record in recorded:
        return deal  # a retry of an event already taken
    triggers = _triggers(deal, event, lenient)
    deal.shipment = {
        **(deal.shipment or {}),
        "carrier": event.carrier,
        "tracking": event.tracking_number,
        "events": [*recorded, record][-MAX_EVENTS:],
    }
    # The carrier's news first, then the status change it causes (if any), in the deal's order.
    data = deal_shipment(deal.id, record)
    await events.emit(session, deal.integration_id, EventKind.DEAL_SHIPMENT, data, deal_id=deal.id)
    if not triggers:
        await deals.touch(session, deal)
        return deal
    for trigger in triggers:
        deal = await flows.fire(session, deal, trigger, Actor.PROVIDER, settings)
    return deal


async def report_for(
    session: AsyncSession,
    integration_id: uuid.UUID,
    deal_id: uuid.UUID,
    event: CarrierEvent,
    settings: Settings,
) -> Deal:
    """The integration reports ``event`` about its deal (another's deal is 404); refused (409)
    for a parcel dealbroker booked, which the carrier reports itself."""
    deal = await deals.get_for(session, integration_id, deal_id, for_update=True)
    refuse_second_source(deal, Source.INTEGRATION)
    return await report(session, deal, event, settings)


def refuse_second_source(deal: Deal, source: Source) -> None:
    """One source of shipment truth per deal: ``source`` may not report about a parcel the other
    one follows (409 with the deal's status)."""
    current = source_of(deal)
    if source is Source.INTEGRATION and current is None and deal.shipping_minor is not None:
        # The buyer paid a carrier's price for a parcel dealbroker books: nobody else ships it.
        raise Conflict(
            "This deal's shipping was paid for a parcel dealbroker books: the seller books it "
            "on the deal's page.",
            page_detail=_("Book the parcel on this page: the buyer paid for its shipping."),
            extra={"currentStatus": deal.status},
        )
    if current is None or current is source:
        return
    if current is Source.CARRIER:
        raise Conflict(
            "This deal's parcel was booked through dealbroker: its carrier reports its events.",
            page_detail=_("This parcel was booked through us: the carrier tells us where it is."),
            extra={"currentStatus": deal.status},
        )
    raise Conflict(
        "This deal's shipment is reported by the marketplace: it cannot be booked here.",
        page_detail=_("This parcel was handed over already: the marketplace tells us where it is."),
        extra={"currentStatus": deal.status},
    )
