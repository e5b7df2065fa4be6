"""A deal's parcels at the deployment's carrier: booked, cancelled, returned, and followed.

A deal reaches its carrier through here alone, and the carrier's events reach the deal through
``take_events`` alone, whether the carrier pushed them (``parcels.api``), the parcel job polled
them (``parcels.tasks``) or the sandbox simulated them. The carriers know no deals
(``carriers.base``); this module knows both and keeps the two apart:

- ``request_booking``: the seller asks for a label (``Shipping_Pending``, shipping type
  Carrier). A ``Parcel`` row is written in the deal's transaction with our ``reference``, and
  the parcel job books it outside any transaction (``parcels.tasks``), so a slow carrier never
  holds the deal's lock. A booking whose outcome is unknown (a timeout) is repeated with the
  same reference: the carrier makes one parcel (``Carrier.book``'s contract). A passing failure
  is retried with backoff, and the seller is told once that we keep trying; a refusal (an
  address the carrier does not know) is final and the seller may choose another delivery.
- ``take_events``: each carrier event once (``ParcelEventSeen``), applied to the deal through
  ``deals.shipments.report`` as the carrier, leniently (late and out-of-order events are
  recorded, never refused). An event for a shipment we did not book is logged and ignored.
- ``deal_moved``: what the deal's transitions do to its parcels: a deal that expires unshipped
  has its booking cancelled at the carrier; a return then refund books the buyer a return
  label, paid by the service.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.carriers.base import (
    Address,
    Booking,
    BookingRequest,
    Carrier,
    Delivery,
    PackageSize,
    ParcelEvent,
    ParcelEventKind,
)
from dealbroker.carriers.registry import carrier_for
from dealbroker.core import clock, wakeup
from dealbroker.core.errors import Conflict, NotFound
from dealbroker.core.i18n import _
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.deals import lifecycle, shipments
from dealbroker.deals import repository as deal_rows
from dealbroker.deals import service as deals
from dealbroker.deals.flows import return_sent
from dealbroker.deals.lifecycle import FINAL_STATUSES, Trigger
from dealbroker.deals.models import Deal
from dealbroker.deals.shipments import CarrierEvent, ShipmentEventType, Source
from dealbroker.notifications import service as notifications
from dealbroker.parcels import repository
from dealbroker.parcels.models import (
    BOOKED,
    BOOKING,
    CANCELLED,
    CANCELLING,
    FAILED,
    Parcel,
    ParcelEventSeen,
)

log = logging.getLogger("dealbroker.parcels")

OUTBOUND, RETURN = "outbound", "return"
# The size a deal without a packageType is booked and priced as.
DEFAULT_SIZE = PackageSize.MEDIUM
# How a carrier is named to the parties.
CARRIER_NAMES = {"bring": "Bring", "simulated": "Sandbox Post"}
# The events after which the carrier is done with a parcel (it is no longer followed).
FINISHING = frozenset({ParcelEventKind.DELIVERED, ParcelEventKind.RETURNED, ParcelEventKind.LOST})
# Bounds of what a carrier hands us, checked before anything is stored.
MAX_LABEL_BYTES = 2 * 1024 * 1024
MAX_TEXT = 500


def carrier_name(carrier: str) -> str:
    return CARRIER_NAMES.get(carrier, carrier.capitalize())


def size_of(deal: Deal) -> PackageSize:
    return PackageSize(deal.package_type) if deal.package_type else DEFAULT_SIZE


async def parcels_of(session: AsyncSession, deal: Deal) -> list[Parcel]:
    """The deal's parcels, oldest first: what its pages and its resource show."""
    return await repository.of_deal(session, deal.id)


def latest(parcels: list[Parcel], kind: str) -> Parcel | None:
    """The newest parcel of ``kind`` (``outbound`` or ``return``), if any."""
    return next((p for p in reversed(parcels) if p.kind == kind), None)


async def lost_claim(session: AsyncSession, deal: Deal) -> dict[str, object] | None:
    """What the operator claims a lost parcel's loss from its carrier with, for a deal in
    dispute as ``lost`` whose parcel dealbroker booked: the carrier, its shipment id and
    tracking number, the service, when it was booked and last heard of, and the value to claim
    (the deal's price; the carrier's terms cap what it pays). The dispute's dossier shows it,
    and the messages to both parties say the loss is claimed (docs/shipping.md)."""
    if deal.dispute_reason != lifecycle.LOST_REASON:
        return None
    parcel = latest(await parcels_of(session, deal), "outbound")
    if parcel is None or parcel.shipment_id is None:
        return None
    return {
        "carrier": carrier_name(parcel.carrier),
        "shipmentId": parcel.shipment_id,
        "trackingNumber": parcel.tracking_number,
        "service": parcel.service,
        "bookedAt": parcel.booked_at,
        "lastEvent": parcel.last_event,
        "lastEventAt": parcel.last_event_at,
        "valueMinor": deal.price_minor,
    }


def deliveries(settings: Settings, size: PackageSize) -> list[Delivery]:
    """The deliveries the seller may book a parcel of ``size`` with: those the carrier's
    services carry at that size, without Bring's parcel locker, which it books only to a
    locker the buyer chose (we ask for none)."""
    if settings.carrier == "bring":
        from dealbroker.carriers.bring import SERVICES, SIZES_OF_SERVICE

        return [
            delivery
            for delivery, service in SERVICES.items()
            if size in SIZES_OF_SERVICE[service] and delivery is not Delivery.PARCEL_LOCKER
        ]
    if settings.carrier == "simulated":
        from dealbroker.carriers.simulated import PRICES

        return list(PRICES[size])
    return []


# --- the seller books ---------------------------------------------------------------------


async def request_booking(
    session: AsyncSession, deal: Deal, delivery: Delivery, settings: Settings
) -> Parcel:
    """The seller asks for a label for ``deal`` (row locked by the caller), delivered to the
    buyer by ``delivery``. The parcel is booked by the parcel job as soon as this commits. A
    second request while one is booking or booked returns that one (a double click books
    once); one after a refusal books anew."""
    carrier = bookable(deal, settings)
    current = latest(await repository.of_deal(session, deal.id), OUTBOUND)
    if current is not None and current.status in (BOOKING, BOOKED):
        return current
    parcel = _new_parcel(deal, OUTBOUND, carrier.name, size_of(deal), delivery)
    repository.add(session, parcel)
    deal.shipment = {"source": Source.CARRIER.value, "carrier": carrier_name(carrier.name)}
    await deals.touch(session, deal)
    await wakeup.mark(session, wakeup.PARCELS)
    await session.flush()
    return parcel


def bookable(deal: Deal, settings: Settings) -> Carrier:
    """The carrier ``deal``'s parcel is booked at now; a ``Conflict`` saying why there is none
    (the marketplace ships, the deal is not waiting to be shipped by carrier, or its shipment is
    reported by the marketplace)."""
    carrier = carrier_for(settings)
    if carrier is None:
        raise Conflict(
            "This deployment books no parcels: the marketplace ships them.",
            page_detail=_("Parcels are not booked here: hand the item to the carrier yourself."),
        )
    if deal.status != DealStatus.SHIPPING_PENDING or deal.shipping_type != "Carrier":
        raise Conflict(
            f"A deal in status {deal.status} has no parcel to book.",
            page_detail=_("There is no parcel to book for this deal now."),
            extra={"currentStatus": deal.status},
        )
    shipments.refuse_second_source(deal, Source.CARRIER)
    return carrier


def _new_parcel(
    deal: Deal, kind: str, carrier: str, size: PackageSize, delivery: Delivery
) -> Parcel:
    now = clock.now()
    parcel_id = uuid.uuid4()
    return Parcel(
        id=parcel_id,
        deal_id=deal.id,
        integration_id=deal.integration_id,
        kind=kind,
        carrier=carrier,
        size=size.value,
        delivery=delivery.value,
        status=BOOKING,
        reference=parcel_id.hex,
        attempts=0,
        next_attempt_at=now,
        created_at=now,
        updated_at=now,
    )


async def label(session: AsyncSession, deal: Deal, parcel_id: uuid.UUID) -> Parcel:
    """The deal's booked parcel ``parcel_id``, with its label (another deal's is 404)."""
    parcel = await repository.by_id(session, parcel_id)
    if (
        parcel is None
        or parcel.deal_id != deal.id
        or parcel.label_pdf is None
        or parcel.status in (CANCELLING, CANCELLED)
    ):
        raise NotFound("No such label.")
    return parcel


# --- the parcel job's side: what to ask the carrier, and what its answer does --------------


def _seller_address(deal: Deal) -> Address:
    seller = deal.seller or {}
    name = " ".join(filter(None, (seller.get("firstname"), seller.get("lastname"))))
    return Address(
        name=name or "-",
        street=str(seller.get("address") or ""),
        postcode=str(seller.get("postcode") or ""),
        city=str(seller.get("town") or ""),
        phone=seller.get("phone"),
        email=seller.get("email"),
    )


def _buyer_address(deal: Deal, name: str | None) -> Address:
    contact = deal.buyer_contact or {}
    return Address(
        name=str(contact.get("name") or name or "-"),
        street=str(contact.get("address") or ""),
        postcode=str(contact.get("postcode") or ""),
        city=str(contact.get("town") or ""),
        phone=contact.get("phone"),
        email=contact.get("email"),
    )


def country_of(settings: Settings) -> str:
    """The country parcels are sent within: the deployment's currency's."""
    return {"SEK": "SE", "DKK": "DK"}.get(settings.currency, "NO")


async def booking_request(
    session: AsyncSession, parcel: Parcel, buyer_name: str | None, settings: Settings
) -> BookingRequest:
    """What the carrier is asked to book for ``parcel``: the seller to the buyer, or for a
    return the buyer to the seller (``return_of`` the outbound parcel)."""
    deal = await deal_rows.by_id(session, parcel.deal_id)
    assert deal is not None  # the parcel's foreign key
    country = country_of(settings)
    seller, buyer = _seller_address(deal), _buyer_address(deal, buyer_name)
    seller, buyer = _in(seller, country), _in(buyer, country)
    if parcel.kind == RETURN:
        outbound = latest(await repository.of_deal(session, deal.id), OUTBOUND)
        return BookingRequest(
            reference=parcel.reference,
            size=PackageSize(parcel.size),
            delivery=Delivery(parcel.delivery),
            sender=buyer,
            recipient=seller,
            return_of=None if outbound is None else outbound.shipment_id,
        )
    return BookingRequest(
        reference=parcel.reference,
        size=PackageSize(parcel.size),
        delivery=Delivery(parcel.delivery),
        sender=seller,
        recipient=buyer,
    )


def _in(address: Address, country: str) -> Address:
    return Address(
        address.name,
        address.street,
        address.postcode,
        address.city,
        country,
        address.phone,
        address.email,
    )


async def _locked(session: AsyncSession, parcel_id: uuid.UUID) -> tuple[Deal, Parcel] | None:
    """The parcel's deal, then the parcel, both locked (the order every writer takes)."""
    parcel = await repository.by_id(session, parcel_id)
    if parcel is None:
        return None
    deal = await deals.by_id_for_update(session, parcel.deal_id)
    parcel = await repository.for_update(session, parcel_id)
    if deal is None or parcel is None:
        return None
    return deal, parcel


async def pending_deadline(session: AsyncSession, deal: Deal, trigger: Trigger) -> datetime | None:
    """When the deal's pending deadline that fires ``trigger`` falls due, if it has one."""
    due = [
        t.due_at
        for t in await deal_rows.timers_of(session, deal.id)
        if t.fired_at is None and t.trigger == trigger.value
    ]
    return max(due) if due else None


async def shipping_deadline(session: AsyncSession, deal: Deal) -> datetime | None:
    """When the seller must have handed the parcel in (the deal's pending shipping deadline)."""
    return await pending_deadline(session, deal, Trigger.SHIPPING_EXPIRED)


async def booked(
    session: AsyncSession, parcel_id: uuid.UUID, booking: Booking, settings: Settings
) -> None:
    """The carrier booked the parcel: its label and tracking are kept, the parties told."""
    locked = await _locked(session, parcel_id)
    if locked is None:
        return
    deal, parcel = locked
    if parcel.status == CANCELLED and parcel.shipment_id is None and parcel.booked_at is None:
        # The deal moved on (expired) while the booking was on its way: the carrier made it
        # all the same, so it is kept, and cancelled at the carrier.
        parcel.shipment_id = booking.shipment_id[:100]
        parcel.tracking_number = booking.tracking_number[:100]
        parcel.booked_at = parcel.updated_at = clock.now()
        parcel.status, parcel.finished_at, parcel.next_attempt_at = CANCELLING, None, clock.now()
        parcel.attempts = 0
        await wakeup.mark(session, wakeup.PARCELS)
        return
    if parcel.status != BOOKING:
        return  # taken already (a worker whose lease ran out)
    label = booking.label_pdf or None
    if label is not None and (len(label) > MAX_LABEL_BYTES or not label.startswith(b"%PDF")):
        await _refuse(session, deal, parcel, "the carrier's label is not a PDF within 2 MB")
        return
    if label is None:
        # A booking found again after its answer was lost (a timeout): the carrier gives no
        # label twice. The parcel is booked; support prints the label from the carrier's portal.
        log.error(
            "parcel %s booked at %s without a label: fetch it from the carrier's portal",
            parcel.id,
            parcel.carrier,
            extra={"deal_id": str(deal.id)},
        )
    now = clock.now()
    parcel.status = BOOKED
    parcel.service = booking.service[:40]
    parcel.shipment_id = booking.shipment_id[:100]
    parcel.tracking_number = booking.tracking_number[:100]
    parcel.tracking_url = booking.tracking_url[:MAX_TEXT]
    parcel.qr_code = None if booking.qr_code is None else booking.qr_code[:MAX_TEXT]
    parcel.qr_png = booking.qr_png
    parcel.label_pdf = label
    parcel.price_minor = booking.price_minor
    parcel.booked_at = parcel.updated_at = now
    parcel.last_event, parcel.last_event_at = ParcelEventKind.BOOKED.value, now
    parcel.next_attempt_at = parcel.leased_until = None
    name = carrier_name(parcel.carrier)
    if parcel.kind == RETURN:
        returning = deal.dispute_return or {}
        deal.dispute_return = {**returning, "carrier": name, "tracking": parcel.tracking_number}
        await deals.touch(session, deal)
        due = await pending_deadline(session, deal, Trigger.RETURN_NOT_SENT)
        await notifications.return_label_ready(session, deal, name, due)
        return
    event = CarrierEvent(ShipmentEventType.BOOKED, name, parcel.tracking_number, now)
    await shipments.report(session, deal, event, settings, lenient=True)
    deal.shipment = {**(deal.shipment or {}), "trackingUrl": parcel.tracking_url}
    deadline = await shipping_deadline(session, deal)
    await notifications.parcel_booked(
        session, deal, parcel.tracking_url, bool(parcel.qr_code or parcel.qr_png), deadline
    )


async def booking_refused(
    session: AsyncSession, parcel_id: uuid.UUID, reason: str, message: str
) -> None:
    """The carrier refused the booking for good (``reason``, one of ``carriers.base.REFUSALS``):
    the seller is told why and may choose another delivery."""
    locked = await _locked(session, parcel_id)
    if locked is None or locked[1].status != BOOKING:
        return
    deal, parcel = locked
    log.warning(
        "carrier refused parcel %s: %s", parcel.id, message, extra={"deal_id": str(deal.id)}
    )
    await _refuse(session, deal, parcel, f"{reason}: {message}")


async def _refuse(session: AsyncSession, deal: Deal, parcel: Parcel, error: str) -> None:
    parcel.status = FAILED
    parcel.last_error = error[:MAX_TEXT]
    parcel.next_attempt_at = parcel.leased_until = None
    parcel.updated_at = clock.now()
    if parcel.kind == OUTBOUND:
        await notifications.parcel_refused(session, deal, refusal_words(error.split(":", 1)[0]))


def refusal_words(reason: str) -> str:
    """A carrier's refusal in the reader's words (the current locale)."""
    words = {
        "invalid_address": _("it does not know the delivery address or its postcode."),
        "route_not_served": _("it does not deliver this way between your postcodes."),
        "too_heavy": _("the parcel is over its size or weight limit."),
    }
    return words.get(reason, _("it refused the booking."))


async def booking_delayed(
    session: AsyncSession, parcel_id: uuid.UUID, error: str, retry_at: datetime
) -> None:
    """A passing failure (a timeout, the carrier down or at its rate limit): tried again at
    ``retry_at`` with the same reference; the seller is told once."""
    locked = await _locked(session, parcel_id)
    if locked is None or locked[1].status not in (BOOKING, CANCELLING):
        return
    deal, parcel = locked
    parcel.last_error = error[:MAX_TEXT]
    parcel.next_attempt_at, parcel.leased_until = retry_at, None
    parcel.updated_at = clock.now()
    if parcel.status == BOOKING and parcel.kind == OUTBOUND and parcel.delay_told_at is None:
        parcel.delay_told_at = clock.now()
        await notifications.parcel_delayed(session, deal, await shipping_deadline(session, deal))


async def cancelled(session: AsyncSession, parcel_id: uuid.UUID, error: str | None) -> None:
    """The carrier cancelled the booking (or, ``error``, refused to: the parcel is in its
    hands already, and its events will tell)."""
    locked = await _locked(session, parcel_id)
    if locked is None or locked[1].status != CANCELLING:
        return
    parcel = locked[1]
    parcel.status = BOOKED if error else CANCELLED
    parcel.last_error = None if error is None else error[:MAX_TEXT]
    parcel.next_attempt_at = parcel.leased_until = None
    parcel.finished_at = None if error else clock.now()
    parcel.updated_at = clock.now()


async def remind_drop_off(session: AsyncSession, parcel_id: uuid.UUID) -> None:
    """Remind the seller, once, to hand in a booked parcel the carrier has not scanned."""
    locked = await _locked(session, parcel_id)
    if locked is None:
        return
    deal, parcel = locked
    if parcel.reminded_at is not None or parcel.status != BOOKED or parcel.last_event != "booked":
        return
    parcel.reminded_at = clock.now()
    if deal.status == DealStatus.SHIPPING_PENDING:
        await notifications.drop_off_reminder(session, deal, await shipping_deadline(session, deal))


# --- the carrier's events -------------------------------------------------------------------


@dataclass
class Taken:
    """What ``take_events`` did with a batch of events."""

    applied: int = 0
    duplicates: int = 0
    unknown: int = 0


async def take_events(
    session: AsyncSession, carrier: str, events: list[ParcelEvent], settings: Settings
) -> Taken:
    """The carrier's ``events``, each applied once to its parcel's deal, oldest first."""
    taken = Taken()
    for event in sorted(events, key=lambda e: e.occurred_at):
        if await repository.seen(session, carrier, event.event_id[:200]):
            taken.duplicates += 1
            continue
        parcel = await repository.by_shipment(session, carrier, event.shipment_id)
        if parcel is None:
            log.info(
                "%s event %s for unknown shipment %s ignored",
                carrier,
                event.event_id[:200],
                event.shipment_id[:100],
            )
            taken.unknown += 1
            continue
        locked = await _locked(session, parcel.id)
        if locked is None:
            taken.unknown += 1
            continue
        if await repository.seen(session, carrier, event.event_id[:200]):
            taken.duplicates += 1  # another request took it while this one waited for the lock
            continue
        await _apply(session, *locked, event, settings)
        taken.applied += 1
    await session.flush()
    return taken


async def _apply(
    session: AsyncSession, deal: Deal, parcel: Parcel, event: ParcelEvent, settings: Settings
) -> None:
    now = clock.now()
    repository.mark_seen(
        session,
        ParcelEventSeen(
            carrier=parcel.carrier,
            event_id=event.event_id[:200],
            parcel_id=parcel.id,
            kind=event.kind.value,
            occurred_at=event.occurred_at,
            seen_at=now,
        ),
    )
    if parcel.last_event_at is None or event.occurred_at >= parcel.last_event_at:
        parcel.last_event, parcel.last_event_at = event.kind.value, event.occurred_at
    if event.kind in FINISHING:
        parcel.finished_at = parcel.finished_at or now
    parcel.updated_at = now
    if parcel.status == CANCELLING and event.kind is not ParcelEventKind.BOOKED:
        parcel.status = BOOKED  # handed in after all: the carrier has it, follow it
    if parcel.kind == RETURN:
        await _return_event(session, deal, event, settings)
        return
    if event.kind is ParcelEventKind.BOOKED:
        return  # our own booking said it already (the carrier's pre-notification)
    if DealStatus(deal.status) in FINAL_STATUSES:
        return  # a late scan of a deal that has ended: kept on the parcel, not the deal
    report = CarrierEvent(
        ShipmentEventType(event.kind.value),
        carrier_name(parcel.carrier),
        parcel.tracking_number or event.tracking_number[:100],
        min(event.occurred_at, now),
        description=_bounded(event.description),
        location=_bounded(event.location),
        pickup_point=_bounded(event.pickup_point),
    )
    await shipments.report(session, deal, report, settings, lenient=True)
    if event.kind is ParcelEventKind.DAMAGED:
        await notifications.parcel_damaged(session, deal)
    elif event.kind is ParcelEventKind.READY_FOR_PICKUP and report.pickup_point:
        await notifications.parcel_ready(session, deal, report.pickup_point)


def _bounded(text: str | None) -> str | None:
    return None if text is None else text.strip()[:200] or None


async def _return_event(
    session: AsyncSession, deal: Deal, event: ParcelEvent, settings: Settings
) -> None:
    """The return parcel's events: its hand-in is the buyer's sending (the seller's deadline to
    confirm starts); the rest the seller's page shows from the parcel."""
    returning = deal.dispute_return or {}
    if DealStatus(deal.status) not in lifecycle.DISPUTES:
        return  # the dispute was decided meanwhile: the scan changes nothing
    if event.kind is ParcelEventKind.PICKED_UP and returning and not returning.get("sentAt"):
        await return_sent(
            session,
            deal,
            str(returning.get("carrier") or ""),
            str(returning.get("tracking") or event.tracking_number[:100]),
            settings,
        )


# --- what the deal's transitions do to its parcels ------------------------------------------


async def deal_moved(
    session: AsyncSession, deal: Deal, trigger: Trigger, settings: Settings
) -> None:
    """A transition of ``deal`` (locked, in its transaction), for its parcels: the booking of a
    deal that expired unshipped is cancelled at the carrier; a return then refund of a parcel
    we booked books the buyer's return label."""
    if trigger is Trigger.RETURN_REQUESTED:
        await _book_return(session, deal, settings)
        return
    if trigger is not Trigger.SHIPPING_EXPIRED:
        return
    for parcel in await repository.of_deal(session, deal.id):
        if parcel.kind != OUTBOUND:
            continue
        if parcel.status == BOOKING:
            parcel.status, parcel.finished_at = CANCELLED, clock.now()
            parcel.last_error = "the deal moved on before the booking was made"
        elif parcel.status == BOOKED and parcel.last_event in (None, "booked"):
            parcel.status, parcel.next_attempt_at = CANCELLING, clock.now()
            parcel.attempts = 0
            await wakeup.mark(session, wakeup.PARCELS)


async def _book_return(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    carrier = carrier_for(settings)
    parcels = await repository.of_deal(session, deal.id)
    outbound = latest(parcels, OUTBOUND)
    if carrier is None or outbound is None or outbound.status != BOOKED:
        return  # the buyer sends it back themselves and gives the tracking number
    parcel = _new_parcel(
        deal, RETURN, carrier.name, PackageSize(outbound.size), Delivery.PICKUP_POINT
    )
    repository.add(session, parcel)
    await wakeup.mark(session, wakeup.PARCELS)


def due_in(attempts: int, retry_after: float | None) -> timedelta:
    """When a booking that failed for a passing reason is tried again: the carrier's word if it
    gave one, else backoff doubling from 5 seconds (after the first attempt) to an hour."""
    backoff = min(timedelta(seconds=5 * 2 ** min(max(attempts - 1, 0), 20)), timedelta(hours=1))
    if retry_after is not None:
        return max(timedelta(seconds=min(retry_after, 3600)), timedelta(seconds=1))
    return backoff


# --- the sandbox's carrier -------------------------------------------------------------------

# What the sandbox's carrier says with each event it simulates (its own words, in English as a
# carrier's are; the pages show them as the carrier's).
SIMULATED_WORDS = {
    ParcelEventKind.PICKED_UP: "The parcel has been handed in",
    ParcelEventKind.IN_TRANSIT: "The parcel is on its way",
    ParcelEventKind.READY_FOR_PICKUP: "The parcel is ready for pickup",
    ParcelEventKind.DELIVERED: "The parcel has been delivered to the mailbox",
    ParcelEventKind.RETURNED: "The parcel has been returned to the sender",
    ParcelEventKind.LOST: "The parcel is lost",
    ParcelEventKind.DAMAGED: "The parcel was damaged in transit",
}
SIMULATED_POINT = "Sandbox pickup point, Storgata 1, 0155 Oslo"


async def simulate(
    session: AsyncSession, deal: Deal, kind: ParcelEventKind, settings: Settings
) -> Taken:
    """The sandbox's carrier reports ``kind`` about the deal's parcel (or its return parcel,
    once one is booked): the event is pushed as the carrier pushes, signed, read back by the
    carrier's adapter and taken by the one handler, as Bring's pushes are."""
    carrier = carrier_for(settings)
    if carrier is None or carrier.name != "simulated" or not settings.is_sandbox:
        raise NotFound("The simulated carrier exists only in the sandbox.")
    from dealbroker.carriers.simulated import SimulatedCarrier

    assert isinstance(carrier, SimulatedCarrier)
    parcels = await repository.of_deal(session, deal.id)
    parcel = latest(parcels, RETURN) or latest(parcels, OUTBOUND)
    if parcel is None or parcel.status != BOOKED or parcel.shipment_id is None:
        raise Conflict(
            "The deal has no booked parcel to move.",
            page_detail=_("Book the parcel first."),
            extra={"currentStatus": deal.status},
        )
    event = ParcelEvent(
        event_id=uuid.uuid4().hex,
        kind=kind,
        shipment_id=parcel.shipment_id,
        tracking_number=parcel.tracking_number or "",
        occurred_at=clock.now(),
        location="Oslo",
        description=SIMULATED_WORDS.get(kind),
        pickup_point=SIMULATED_POINT if kind is ParcelEventKind.READY_FOR_PICKUP else None,
    )
    headers, body = carrier.signed_push(event)
    return await take_events(session, carrier.name, carrier.read_push(headers, body), settings)


async def simulate_booked(session: AsyncSession, deal: Deal, settings: Settings) -> None:
    """The sandbox's triggers: the deal's parcel booked at once with the sandbox's carrier
    (which books without a network), as the parcel job would, when it has none booked yet."""
    carrier = carrier_for(settings)
    if carrier is None or carrier.name != "simulated" or not settings.is_sandbox:
        raise NotFound("The simulated carrier exists only in the sandbox.")
    parcels = await repository.of_deal(session, deal.id)
    if any(p.status == BOOKED for p in parcels):
        return
    size = size_of(deal)
    parcel = await request_booking(session, deal, deliveries(settings, size)[-1], settings)
    request = await booking_request(session, parcel, None, settings)
    await booked(session, parcel.id, await carrier.book(request), settings)


async def sandbox_tracking(
    session: AsyncSession, tracking_number: str, settings: Settings
) -> tuple[Parcel, list[ParcelEventSeen]] | None:
    """The sandbox carrier's tracking page: its parcel ``tracking_number`` and the events taken
    for it, oldest first (None for a number it did not give, or outside the sandbox)."""
    carrier = carrier_for(settings)
    if carrier is None or carrier.name != "simulated" or not settings.is_sandbox:
        return None
    parcel = await repository.by_tracking(session, carrier.name, tracking_number[:100])
    if parcel is None:
        return None
    return parcel, await repository.events_seen(session, parcel.id)
