"""The carrier boundary: what dealbroker asks of a carrier, and what a carrier tells it.

One small interface, ``Carrier``, with one adapter per carrier (``carriers.bring`` first; the
sandbox's ``carriers.simulated``); ``carriers.registry`` picks the deployment's. A carrier knows
no deals: it quotes a size between two postcodes, books a parcel for a ``BookingRequest``,
cancels a booking, books a return, and turns its own tracking events into ``ParcelEvent``s of a
handful of our kinds. A deal reaches a carrier through ``parcels.service``; carrier events reach
a deal through one handler (``parcels.service.take_events``), whether pushed by the carrier or
polled.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol


class PackageSize(StrEnum):
    """The interface's ``packageType``: each carrier maps it to its own size class."""

    SMALL = "Small"
    MEDIUM = "Medium"
    LARGE = "Large"
    XL = "XL"


class Delivery(StrEnum):
    """Where the parcel is delivered to the buyer."""

    MAILBOX = "mailbox"
    PARCEL_LOCKER = "parcel_locker"
    PICKUP_POINT = "pickup_point"


class ParcelEventKind(StrEnum):
    """A carrier's tracking event, in our words. ``ready_for_pickup`` and ``delivered`` both
    mean the buyer can have the parcel (at a pickup point or locker; in their mailbox)."""

    BOOKED = "booked"
    PICKED_UP = "picked_up"
    IN_TRANSIT = "in_transit"
    READY_FOR_PICKUP = "ready_for_pickup"
    DELIVERED = "delivered"
    RETURNED = "returned"
    LOST = "lost"
    DAMAGED = "damaged"


@dataclass(frozen=True)
class Address:
    name: str
    street: str
    postcode: str
    city: str
    country: str = "NO"  # ISO 3166-1 alpha-2
    phone: str | None = None
    email: str | None = None


@dataclass(frozen=True)
class Quote:
    """What sending ``size`` costs with ``delivery``: the carrier's price, in minor units of
    ``currency``, and the days it usually takes."""

    carrier: str
    service: str  # the carrier's product or service code
    size: PackageSize
    delivery: Delivery
    price_minor: int
    currency: str
    working_days: int | None = None


@dataclass(frozen=True)
class BookingRequest:
    """A parcel to book. ``reference`` is ours and unique per parcel (at most 35 characters):
    a booking repeated with the same reference (after a timeout) must not make a second
    parcel."""

    reference: str
    size: PackageSize
    delivery: Delivery
    sender: Address
    recipient: Address
    # A return: the parcel it sends back (its carrier shipment id); sender and recipient are
    # then the buyer and the seller.
    return_of: str | None = None
    # What the parcel weighs, when the seller said (grams); else the size's weight limit is
    # declared. A carrier refuses a weight over its limit for the size ("too_heavy").
    weight_grams: int | None = None
    # The pickup point or parcel locker the buyer chose (the carrier's id of it), where the
    # carrier needs one: Bring's parcel-locker service books only to a locker named here.
    pickup_point_id: str | None = None


@dataclass(frozen=True)
class Booking:
    carrier: str
    service: str
    shipment_id: str  # the carrier's id of the shipment (Bring: the shipment number)
    tracking_number: str  # the parcel's number, what the carrier's tracking page takes
    tracking_url: str
    # The label, a PDF of at most 2 MB. Empty only when a booking was found again after its
    # answer was lost (a timeout) and the carrier offers no way to fetch its label again
    # (Bring: see carriers.bring); the carrier's own portal then has it.
    label_pdf: bytes
    # What the sender may show at the counter instead of a printed label, where the carrier
    # offers it: the carrier's own QR image (a PNG of at most 256 KB: Bring's, which its pickup
    # points scan to print the label), or the text a QR code encodes (we draw it).
    qr_code: str | None = None
    qr_png: bytes | None = None
    price_minor: int | None = None


@dataclass(frozen=True)
class ParcelEvent:
    """One tracking event. ``event_id`` is the carrier's own id when it has one, else one the
    adapter derives from the event's fields: the same event told twice has the same id."""

    event_id: str
    kind: ParcelEventKind
    shipment_id: str
    tracking_number: str
    occurred_at: datetime
    # Where it happened, and the carrier's own words (shown to the parties as the carrier gave
    # them), both bounded by the adapter.
    location: str | None = None
    description: str | None = None
    # Where the buyer collects the parcel (ready_for_pickup): the pickup point's name and
    # address.
    pickup_point: str | None = None


class CarrierError(Exception):
    """The carrier could not do what was asked. ``str()`` is for the log, never a page."""


class CarrierRefused(CarrierError):
    """The carrier refused the request for good: trying again will not help. ``reason`` is one
    of ``REFUSALS``; ``field`` names what was refused (``recipient.postcode``...)."""

    def __init__(self, reason: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field


REFUSALS = (
    "invalid_address",  # an address or postcode the carrier does not know
    "route_not_served",  # the service is not offered between these postcodes
    "too_heavy",  # over the service's weight or size limit
    "not_cancellable",  # a booking already in the carrier's hands
    "rejected",  # any other refusal the carrier documents
)


class CarrierUnavailable(CarrierError):
    """A passing failure: a timeout, a 5xx, a 429 at the carrier's rate limit, a network error.
    The outcome of a booking may be unknown: repeat it with the same reference.
    ``retry_after``: seconds the carrier asked us to wait, if it said."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class PushRejected(CarrierError):
    """A pushed event that is not the carrier's: a wrong or missing signature, a body that is
    not the documented shape. Answered 401 (signature) or 400 (shape); nothing is taken."""

    def __init__(self, message: str, *, signature: bool) -> None:
        super().__init__(message)
        self.signature = signature


class Carrier(Protocol):
    name: str  # "bring", "simulated"

    async def quote(
        self, size: PackageSize, from_postcode: str, to_postcode: str, country: str = "NO"
    ) -> list[Quote]:
        """The services (one per delivery option) that carry ``size`` between the postcodes,
        cheapest first; ``CarrierRefused`` when none does."""
        ...

    async def book(self, request: BookingRequest) -> Booking:
        """Book the parcel and return its label. Repeated with the same ``request.reference``
        after an unknown outcome, it returns the parcel booked the first time, never books a
        second. ``CarrierRefused`` or ``CarrierUnavailable`` otherwise."""
        ...

    async def cancel(self, shipment_id: str) -> None:
        """Cancel a booking not yet handed over; cancelling it again changes nothing.
        ``CarrierRefused("not_cancellable")`` once the carrier has the parcel."""
        ...

    async def book_return(self, request: BookingRequest) -> Booking:
        """Book the return of ``request.return_of`` (a return label for the buyer)."""
        ...

    async def track(self, tracking_number: str) -> list[ParcelEvent]:
        """Every event the carrier has for the parcel, oldest first (the fallback to pushes)."""
        ...

    def read_push(self, headers: Mapping[str, str], body: bytes) -> list[ParcelEvent]:
        """The events in a body the carrier pushed to us, its signature verified first:
        ``PushRejected`` for anything not the carrier's. Does no I/O."""
        ...
