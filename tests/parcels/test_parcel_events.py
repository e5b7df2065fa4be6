"""A parcel dealbroker books moves its deal on the carrier's word alone: each event once, late
and out-of-order events recorded without a second change, unknown shipments ignored, and the
marketplace's own reports refused for it. Driven with the sandbox's carrier, through the same
push reading and handler as Bring's (``parcels.service.simulate``)."""

import json
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from dealbroker.carriers.base import ParcelEvent, ParcelEventKind
from dealbroker.core import clock
from dealbroker.core.errors import Conflict
from dealbroker.core.settings import Settings
from dealbroker.deals import lifecycle, shipments
from dealbroker.deals.models import DealStatusChange, DealTimer
from dealbroker.deals.shipments import CarrierEvent, ShipmentEventType
from dealbroker.disputes.dossier import dossier
from dealbroker.parcels import service as parcels
from dealbroker.parcels.models import BOOKED, CANCELLED, ParcelEventSeen
from dealbroker.parcels.tasks import ParcelJob
from tests.lifecycle_helpers import DealDriver, assert_events_match_changes
from tests.parcels.deals import book, carrier_settings, messages, parcels_of, shipping_pending


@pytest.fixture
def settings(db_url: str) -> Settings:
    return carrier_settings(db_url)


async def _booked(sessionmaker, settings: Settings) -> DealDriver:  # type: ignore[no-untyped-def]
    d = await shipping_pending(sessionmaker)
    await book(d, settings)
    assert await ParcelJob(sessionmaker, settings).run_once() == 1
    [parcel] = await parcels_of(d)
    assert parcel.status == BOOKED
    return d


async def _simulate(d: DealDriver, settings: Settings, kind: ParcelEventKind) -> parcels.Taken:
    return await d.step(lambda s, deal: parcels.simulate(s, deal, kind, settings))


async def test_a_booking_gives_a_label_and_tells_both(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    [parcel] = await parcels_of(d)
    assert parcel.label_pdf is not None
    assert parcel.label_pdf.startswith(b"%PDF")
    assert parcel.tracking_number
    assert parcel.tracking_url
    assert parcel.qr_code
    deal = await d.deal()
    assert deal.status == "Shipping_Pending"
    assert deal.shipment["source"] == "carrier"
    assert [e["type"] for e in shipments.events_of(deal)] == ["booked"]
    assert len(await messages(d, "parcel_booked")) == 2  # the seller and the buyer


async def test_a_second_request_books_once(sessionmaker, settings) -> None:
    d = await shipping_pending(sessionmaker)
    first = await book(d, settings)
    assert await book(d, settings) == first
    assert len(await parcels_of(d)) == 1


async def test_the_carrier_moves_the_deal_to_arrived_then_completed(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    await _simulate(d, settings, ParcelEventKind.PICKED_UP)
    assert await d.status() == "Shipping_In_Progress"
    await _simulate(d, settings, ParcelEventKind.IN_TRANSIT)
    await _simulate(d, settings, ParcelEventKind.READY_FOR_PICKUP)
    deal = await d.deal()
    # Waiting at the pickup point is not the arrival: it may go back unclaimed.
    assert deal.status == "Shipping_In_Progress"
    assert shipments.events_of(deal)[-1]["pickupPoint"] == parcels.SIMULATED_POINT
    await _simulate(d, settings, ParcelEventKind.DELIVERED)
    assert await d.status() == "Shipping_Arrived"
    await assert_events_match_changes(d)


async def test_each_event_is_taken_once(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    [parcel] = await parcels_of(d)
    event = ParcelEvent(
        event_id="bring-1",
        kind=ParcelEventKind.PICKED_UP,
        shipment_id=parcel.shipment_id or "",
        tracking_number=parcel.tracking_number or "",
        occurred_at=clock.now(),
    )
    first = await d.step(lambda s, deal: parcels.take_events(s, "simulated", [event], settings))
    again = await d.step(
        lambda s, deal: parcels.take_events(s, "simulated", [event, event], settings)
    )
    assert (first.applied, again.applied, again.duplicates) == (1, 0, 2)
    async with sessionmaker() as session:
        changes = await session.scalar(
            select(func.count())
            .select_from(DealStatusChange)
            .where(DealStatusChange.deal_id == d.deal_id)
        )
        seen = await session.scalar(select(func.count()).select_from(ParcelEventSeen))
    assert seen >= 1
    assert [h.to_status for h in await d.history()][-1] == "Shipping_In_Progress"
    assert changes == len(await d.history())


async def test_late_and_out_of_order_events_change_nothing_twice(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    # Delivered before any scan of the hand-in: the hand-over is made first, then the arrival.
    await _simulate(d, settings, ParcelEventKind.DELIVERED)
    assert await d.status() == "Shipping_Arrived"
    triggers = [h.trigger for h in await d.history()][-2:]
    assert triggers == ["carrier_picked_up", "carrier_delivered"]
    before = len(await d.history())
    # The hand-in scan comes late, then a second delivery: recorded, never refused or re-applied.
    await _simulate(d, settings, ParcelEventKind.PICKED_UP)
    await _simulate(d, settings, ParcelEventKind.DELIVERED)
    assert len(await d.history()) == before
    assert await d.status() == "Shipping_Arrived"
    kinds = [e["type"] for e in shipments.events_of(await d.deal())]
    assert kinds == ["booked", "delivered", "picked_up", "delivered"]


async def test_an_unknown_shipment_is_ignored(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    stranger = ParcelEvent(
        event_id="x-1",
        kind=ParcelEventKind.DELIVERED,
        shipment_id="NOT-OURS",
        tracking_number="NOT-OURS",
        occurred_at=clock.now(),
    )
    taken = await d.step(lambda s, deal: parcels.take_events(s, "simulated", [stranger], settings))
    assert (taken.applied, taken.unknown) == (0, 1)
    assert await d.status() == "Shipping_Pending"


async def test_returned_refunds_the_buyer(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    await _simulate(d, settings, ParcelEventKind.PICKED_UP)
    await _simulate(d, settings, ParcelEventKind.RETURNED)
    assert await d.status() == "Refunded"
    assert (await d.payment()).status == "Refunded"  # type: ignore[union-attr]


async def test_a_parcel_not_collected_goes_back_and_refunds(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    # The first scan is in transit (no hand-in scan): the hand-over is made of it.
    await _simulate(d, settings, ParcelEventKind.IN_TRANSIT)
    assert await d.status() == "Shipping_In_Progress"
    await _simulate(d, settings, ParcelEventKind.READY_FOR_PICKUP)
    await _simulate(d, settings, ParcelEventKind.RETURNED)
    assert await d.status() == "Refunded"


async def test_lost_opens_the_dispute_with_the_claim(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    await _simulate(d, settings, ParcelEventKind.PICKED_UP)
    await _simulate(d, settings, ParcelEventKind.LOST)
    deal = await d.deal()
    assert deal.status == "Shipping_Review_Denied"
    assert deal.dispute_reason == lifecycle.LOST_REASON
    assert deal.decide_by is not None
    lost = await messages(d, "deal_disputed")
    assert len(lost) == 2
    assert all("lost" in m.subject for m in lost)
    assert all("We claim the loss from Sandbox Post" in m.body for m in lost)
    assert (await d.payment()).status == "Paid"  # type: ignore[union-attr]  # held
    # The operator's dossier says the carrier opened it, and what to claim the loss with.
    [parcel] = await parcels_of(d)
    async with d.sessionmaker() as session:
        found = (await dossier(session, d.deal_id))["deal"]
    assert found["disputeOpenedBy"] == "carrier"
    claim = found["carrierClaim"]
    assert claim["carrier"] == "Sandbox Post"
    assert claim["shipmentId"] == parcel.shipment_id
    assert claim["trackingNumber"] == parcel.tracking_number
    assert claim["valueMinor"] == deal.price_minor
    assert claim["lastEvent"] == "lost"


async def test_damage_tells_the_buyer_of_their_window(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    await _simulate(d, settings, ParcelEventKind.PICKED_UP)
    await _simulate(d, settings, ParcelEventKind.DAMAGED)
    assert await d.status() == "Shipping_In_Progress"
    told = await messages(d, "parcel_damaged")
    assert len(told) == 2
    assert any("24 hours" in m.body for m in told)


async def test_a_carrier_deal_refuses_the_marketplaces_reports(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    report = CarrierEvent(ShipmentEventType.DELIVERED, "Posten", "123", clock.now())
    with pytest.raises(Conflict):
        await d.step(
            lambda s, deal: shipments.report_for(s, d.integration_id, d.deal_id, report, settings)
        )
    assert await d.status() == "Shipping_Pending"


async def test_a_reported_shipment_cannot_be_booked(sessionmaker, settings) -> None:
    d = await shipping_pending(sessionmaker)
    report = CarrierEvent(ShipmentEventType.PICKED_UP, "Posten", "123", clock.now())
    await d.step(
        lambda s, deal: shipments.report_for(s, d.integration_id, d.deal_id, report, settings)
    )
    assert await d.status() == "Shipping_In_Progress"
    with pytest.raises(Conflict):
        await book(d, settings)


async def test_a_deal_expiring_unshipped_cancels_its_booking(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    await d.fire(lifecycle.Trigger.SHIPPING_EXPIRED, lifecycle.Actor.TIMER)
    assert await d.status() == "Refunded"
    [parcel] = await parcels_of(d)
    assert parcel.status == "cancelling"
    assert await ParcelJob(sessionmaker, settings).run_once() == 1
    [parcel] = await parcels_of(d)
    assert parcel.status == CANCELLED


async def test_a_carrier_parcel_is_lost_after_the_carriers_days(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    await _simulate(d, settings, ParcelEventKind.PICKED_UP)
    async with sessionmaker() as session:
        due = await session.scalar(
            select(DealTimer.due_at).where(
                DealTimer.deal_id == d.deal_id, DealTimer.trigger == "transit_expired"
            )
        )
    expected = clock.now() + timedelta(days=settings.carrier_lost_after_days)
    assert due is not None
    assert abs(due - expected) < timedelta(minutes=5)
    await d.fire(lifecycle.Trigger.TRANSIT_EXPIRED, lifecycle.Actor.TIMER)
    assert (await d.deal()).dispute_reason == lifecycle.LOST_REASON
    async with d.sessionmaker() as session:
        found = (await dossier(session, d.deal_id))["deal"]
    assert found["disputeOpenedBy"] == "carrier"
    assert found["carrierClaim"]["lastEvent"] == "picked_up"


async def test_the_deal_events_carry_the_carriers_news(sessionmaker, settings) -> None:
    d = await _booked(sessionmaker, settings)
    await _simulate(d, settings, ParcelEventKind.PICKED_UP)
    news = [json.loads(e.payload)["data"] for e in await d.events("deal.shipment")]
    assert [n["type"] for n in news] == ["booked", "picked_up"]
    assert news[-1]["carrier"] == "Sandbox Post"
    assert uuid.UUID(news[-1]["dealId"]) == d.deal_id
