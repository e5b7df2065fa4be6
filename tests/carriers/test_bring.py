"""The Bring adapter against the Bring emulator, a process of its own on loopback: prices per
size, bookings with their label, the failures Bring really gives, tracking, cancelling, and
Event Cast pushes checked for their secret header."""

import io
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from PIL import Image

from dealbroker.carriers.base import (
    Address,
    BookingRequest,
    CarrierRefused,
    CarrierUnavailable,
    Delivery,
    PackageSize,
    ParcelEventKind,
    PushRejected,
)
from dealbroker.carriers.bring import BringCarrier
from dealbroker.carriers.registry import carrier_for
from tests.carriers.emulator import EVENT_CAST_SECRET, SECRET_HEADER, BringEmulator
from tests.conftest import make_settings

SELLER = Address("Siri Selger", "Testsvingen 12", "0263", "Oslo", phone="+4712345678")
BUYER = Address("Kari Kjøper", "Mottakerveien 14", "5004", "Bergen", email="kari@example.com")


@pytest.fixture
def emulator(bring_emulator: BringEmulator) -> BringEmulator:
    bring_emulator.reset()
    return bring_emulator


def carrier(emulator: BringEmulator, **overrides: object) -> BringCarrier:
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in emulator.settings().items()}
    found = carrier_for(make_settings("sqlite+aiosqlite://", **{**values, **overrides}))
    assert isinstance(found, BringCarrier)
    return found


def later(hours: float) -> str:
    """A time after the booking, as Event Cast writes it."""
    return (datetime.now(UTC) + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%S+0000")


def parcel(reference: str, **fields: Any) -> BookingRequest:
    values: dict[str, Any] = {
        "reference": reference,
        "size": PackageSize.MEDIUM,
        "delivery": Delivery.PICKUP_POINT,
        "sender": SELLER,
        "recipient": BUYER,
        **fields,
    }
    return BookingRequest(**values)


async def test_a_quote_per_size_lists_the_services_that_take_it_cheapest_first(emulator):
    bring = carrier(emulator)
    small = await bring.quote(PackageSize.SMALL, "0263", "5004")
    assert [(q.service, q.delivery, q.price_minor) for q in small] == [
        ("5900", Delivery.MAILBOX, 6900),
        ("5901", Delivery.PARCEL_LOCKER, 7900),
        ("5902", Delivery.PICKUP_POINT, 8900),
    ]
    assert {q.currency for q in small} == {"NOK"}
    assert small[0].working_days == 2
    large = await bring.quote(PackageSize.LARGE, "0263", "5004")
    assert [q.service for q in large] == ["5901", "5902"]
    xl = await bring.quote(PackageSize.XL, "0263", "5004")
    assert [(q.service, q.price_minor) for q in xl] == [("5902", 29900)]


async def test_a_quote_to_an_unknown_postcode_or_off_the_routes_is_refused(emulator):
    bring = carrier(emulator)
    with pytest.raises(CarrierRefused) as unknown:
        await bring.quote(PackageSize.SMALL, "0263", "0000")
    assert (unknown.value.reason, unknown.value.field) == ("invalid_address", "recipient.postcode")
    with pytest.raises(CarrierRefused) as sender:
        await bring.quote(PackageSize.SMALL, "0000", "5004")
    assert (sender.value.reason, sender.value.field) == ("invalid_address", "sender.postcode")
    with pytest.raises(CarrierRefused) as svalbard:
        await bring.quote(PackageSize.SMALL, "0263", "9170")
    assert svalbard.value.reason == "route_not_served"


async def test_a_booking_gives_the_shipment_its_label_pdf_and_says_it_is_a_test(emulator):
    booking = await carrier(emulator).book(parcel("ref-label"))
    assert booking.carrier == "bring"
    assert booking.service == "5902"
    assert booking.label_pdf.startswith(b"%PDF")
    assert len(booking.label_pdf) < 2 * 1024 * 1024
    assert booking.tracking_url.startswith("https://sporing.bring.no/")
    [booked] = emulator.bookings("ref-label")
    assert booked["consignmentNumber"] == booking.shipment_id
    assert booked["packageNumber"] == booking.tracking_number
    assert booked["product"] == "5902"
    assert booked["sizeVas"] == "2529"
    assert booked["senderReference"] == "ref-label"
    assert booked["weightInKg"] == 5.0  # the size's limit, when no weight is given
    assert booked["testIndicator"] == "true"
    assert {
        r["testIndicator"] for r in emulator.requests() if r["path"].startswith("/booking")
    } == {"true"}
    # Bring's QR code (generateQrCodes), fetched with the booking as the PNG Bring drew: its
    # pickup points scan the code in it. No label-free code is given in Norway.
    assert booked["qrCode"] is True
    assert booking.qr_png is not None
    assert booking.qr_png.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(booking.qr_png)) as image:
        assert image.format == "PNG"
        assert image.width == image.height >= 21 * 6  # a QR code's modules, at the scale drawn
    assert booking.qr_code is None


async def test_a_qr_code_that_cannot_be_had_leaves_the_booking_with_its_label(emulator):
    """The parcel is booked by the time the QR image is fetched: a failing, oversized or
    hanging QR answer leaves it out (the seller prints the label), and books nothing twice."""
    bring = carrier(emulator, bring_timeout_seconds=2)
    for mode, reference in (
        ("500", "ref-qr-500"),
        ("huge", "ref-qr-huge"),
        ("hang", "ref-qr-hang"),
    ):
        emulator.fail(mode, path="/qr/", hang_seconds=4)
        booking = await bring.book(parcel(reference))
        assert booking.qr_png is None
        assert booking.label_pdf.startswith(b"%PDF")
        assert len(emulator.bookings(reference)) == 1


async def test_a_booking_repeated_after_a_timeout_makes_one_parcel(emulator):
    bring = carrier(emulator, bring_timeout_seconds=1)
    emulator.fail("hang", path="/booking", hang_seconds=3)
    with pytest.raises(CarrierUnavailable) as timed_out:
        await bring.book(parcel("ref-timeout"))
    assert timed_out.value.retry_after == 120  # time for Bring's tracking to show it
    again = await bring.book(parcel("ref-timeout"))
    [booked] = emulator.bookings("ref-timeout")
    assert (again.shipment_id, again.tracking_number) == (
        booked["consignmentNumber"],
        booked["packageNumber"],
    )
    # Bring has no way to fetch the label again: Mybring's order history has it.
    assert again.label_pdf == b""
    assert (await bring.book(parcel("ref-timeout"))).shipment_id == again.shipment_id
    assert len(emulator.bookings("ref-timeout")) == 1


async def test_a_rate_limit_or_a_failing_bring_is_a_passing_failure(emulator):
    bring = carrier(emulator)
    emulator.fail("429", path="/booking", retry_after=7)
    with pytest.raises(CarrierUnavailable) as limited:
        await bring.book(parcel("ref-429"))
    assert limited.value.retry_after == 7
    for status in ("500", "503"):
        emulator.fail(status, path="/shippingguide")
        with pytest.raises(CarrierUnavailable, match=status):
            await bring.quote(PackageSize.SMALL, "0263", "5004")
    emulator.fail("502", path="/tracking")
    with pytest.raises(CarrierUnavailable):
        await bring.track("370438101000000001")
    assert emulator.bookings("ref-429") == []
    # Each passed: the next try works.
    assert (await bring.book(parcel("ref-429"))).label_pdf.startswith(b"%PDF")


async def test_an_oversized_answer_is_refused_before_it_is_read(emulator):
    bring = carrier(emulator)
    emulator.fail("huge", path="/_storage")
    with pytest.raises(CarrierUnavailable, match="over"):
        await bring.book(parcel("ref-huge-label"))
    emulator.fail("huge", path="/shippingguide")
    with pytest.raises(CarrierUnavailable, match="over"):
        await bring.quote(PackageSize.SMALL, "0263", "5004")


async def test_wrong_credentials_are_the_operators_to_fix_not_a_refusal(emulator):
    bring = carrier(emulator, bring_api_key="not-the-key")
    with pytest.raises(CarrierUnavailable, match="credentials"):
        await bring.book(parcel("ref-creds"))
    assert emulator.bookings("ref-creds") == []


async def test_bookings_bring_refuses_name_the_reason_and_the_field(emulator):
    bring = carrier(emulator)
    unknown = Address("Kari Kjøper", "Mottakerveien 14", "0000", "Bergen")
    with pytest.raises(CarrierRefused) as postcode:
        await bring.book(parcel("ref-postcode", recipient=unknown))
    assert (postcode.value.reason, postcode.value.field) == (
        "invalid_address",
        "recipient.postcode",
    )
    assert "BOOK_INPUT-057" in str(postcode.value)
    svalbard = Address("Kari Kjøper", "Vei 1", "9170", "Longyearbyen")
    with pytest.raises(CarrierRefused) as route:
        await bring.book(parcel("ref-route", recipient=svalbard))
    assert route.value.reason == "route_not_served"
    with pytest.raises(CarrierRefused) as heavy:
        await bring.book(parcel("ref-heavy", size=PackageSize.SMALL, weight_grams=6000))
    assert heavy.value.reason == "too_heavy"
    with pytest.raises(CarrierRefused) as mailbox:  # a mailbox takes no Large parcel
        await bring.book(parcel("ref-big", size=PackageSize.LARGE, delivery=Delivery.MAILBOX))
    assert mailbox.value.reason == "too_heavy"
    with pytest.raises(CarrierRefused) as locker:
        await bring.book(parcel("ref-locker", delivery=Delivery.PARCEL_LOCKER))
    assert locker.value.field == "pickup_point_id"
    assert emulator.bookings() == []
    booked = await bring.book(
        parcel("ref-locker", delivery=Delivery.PARCEL_LOCKER, pickup_point_id="122608")
    )
    assert booked.service == "5901"
    [at_locker] = emulator.bookings("ref-locker")
    assert at_locker["pickupPoint"] == {"id": "122608", "countryCode": "NO"}


async def test_cancel_twice_changes_nothing_and_after_the_hand_in_is_refused(emulator):
    bring = carrier(emulator)
    booking = await bring.book(parcel("ref-cancel"))
    await bring.cancel(booking.shipment_id)
    await bring.cancel(booking.shipment_id)
    emulator.event(booking.tracking_number, "HANDED_IN", push=False)
    with pytest.raises(CarrierRefused) as refused:
        await bring.cancel(booking.shipment_id)
    assert refused.value.reason == "not_cancellable"


async def test_a_return_is_a_parcel_of_its_own_back_to_the_seller(emulator):
    bring = carrier(emulator)
    outbound = await bring.book(parcel("ref-out"))
    back = await bring.book_return(
        parcel("ref-back", sender=BUYER, recipient=SELLER, return_of=outbound.shipment_id)
    )
    assert back.shipment_id != outbound.shipment_id
    assert back.label_pdf.startswith(b"%PDF")
    [returned] = emulator.bookings("ref-back")
    assert (returned["senderPostalCode"], returned["recipientPostalCode"]) == ("5004", "0263")
    with pytest.raises(ValueError, match="names the shipment"):
        await bring.book_return(parcel("ref-nothing"))


async def test_tracking_gives_our_events_oldest_first_with_the_pickup_point(emulator):
    bring = carrier(emulator)
    booking = await bring.book(parcel("ref-track"))
    assert await bring.track("370000000000000000") == []
    emulator.event(booking.tracking_number, "HANDED_IN", push=False, created=later(1))
    emulator.event(booking.shipment_id, "NOTIFICATION_SENT", push=False, created=later(1.5))
    emulator.event("ref-track", "IN_TRANSIT", push=False, created=later(4))
    emulator.event(
        booking.tracking_number,
        "READY_FOR_PICKUP",
        push=False,
        created=later(20),
        description="The shipment has arrived at pickup point.",
        unitId="122608",
        postalCode="5004",
        city="BERGEN",
    )
    events = await bring.track(booking.tracking_number)
    assert [e.kind for e in events] == [
        ParcelEventKind.BOOKED,
        ParcelEventKind.PICKED_UP,
        ParcelEventKind.IN_TRANSIT,
        ParcelEventKind.READY_FOR_PICKUP,
    ]
    ready = events[-1]
    assert ready.shipment_id == booking.shipment_id
    assert ready.tracking_number == booking.tracking_number
    assert ready.pickup_point == "122608 5004 BERGEN"
    assert ready.location == "5004 BERGEN"
    assert ready.description == "The shipment has arrived at pickup point."
    assert len({e.event_id for e in events}) == 4
    assert [e.event_id for e in await bring.track(booking.tracking_number)] == [
        e.event_id for e in events
    ]


class _Receiver(BaseHTTPRequestHandler):
    pushes: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.pushes.append((dict(self.headers.items()), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def receiver(emulator: BringEmulator) -> Iterator[list[tuple[dict[str, str], bytes]]]:
    """Where the emulator's Event Cast pushes land: a plain HTTP server on loopback."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    _Receiver.pushes = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    emulator.push_to(f"http://127.0.0.1:{server.server_port}/carriers/v1/bring/events")
    try:
        yield _Receiver.pushes
    finally:
        server.shutdown()
        server.server_close()


async def test_a_push_is_read_only_with_our_secret_header(emulator, receiver):
    bring = carrier(emulator)
    booking = await bring.book(parcel("ref-push"))
    answer = emulator.event(booking.tracking_number, "DELIVERED", created=later(48))
    assert answer["pushed"] == 200
    headers, body = receiver[-1]
    assert headers["X-Bring-Application"] == "BMEC"
    assert headers[SECRET_HEADER] == EVENT_CAST_SECRET
    [event] = bring.read_push(headers, body)
    assert event.kind is ParcelEventKind.DELIVERED
    assert (event.shipment_id, event.tracking_number) == (
        booking.shipment_id,
        booking.tracking_number,
    )
    # The same event polled has the same id: the handler sees it once.
    polled = await bring.track(booking.tracking_number)
    assert polled[-1].event_id == event.event_id
    # Lower-case header names (as an ASGI server gives them) are read too.
    assert bring.read_push({k.lower(): v for k, v in headers.items()}, body) == [event]

    for signature in ("bad", "none"):
        emulator.event(booking.tracking_number, "DELIVERED", signature=signature)
        headers, body = receiver[-1]
        with pytest.raises(PushRejected) as rejected:
            bring.read_push(headers, body)
        assert rejected.value.signature is True
    # A status we do not map is taken as nothing; a body not Event Cast's is refused.
    emulator.event(booking.tracking_number, "NOTIFICATION_SENT")
    assert bring.read_push(*receiver[-1]) == []
    good = {SECRET_HEADER: EVENT_CAST_SECRET}
    for bad in (b"[]", b"not json", json.dumps({"status": "DELIVERED"}).encode()):
        with pytest.raises(PushRejected) as shape:
            bring.read_push(good, bad)
        assert shape.value.signature is False
    huge = json.dumps({"status": "DELIVERED", "pad": "x" * 70_000}).encode()
    with pytest.raises(PushRejected, match="64 KB"):
        bring.read_push(good, huge)
    # Without a secret configured, no push is ever taken.
    with pytest.raises(PushRejected):
        carrier(emulator, bring_event_cast_secret="").read_push({SECRET_HEADER: ""}, body)
