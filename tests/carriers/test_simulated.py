"""The sandbox's carrier: prices by size, a booking that is the same parcel in any process, a
real label PDF, pushes signed with the deployment's key; and the QR code we draw."""

from datetime import UTC, datetime

import pytest

from dealbroker.carriers.base import (
    Address,
    BookingRequest,
    CarrierRefused,
    Delivery,
    PackageSize,
    ParcelEvent,
    ParcelEventKind,
    PushRejected,
)
from dealbroker.carriers.qr import qr_svg
from dealbroker.carriers.registry import carrier_for
from dealbroker.carriers.simulated import SIGNATURE_HEADER, SimulatedCarrier
from tests.conftest import make_settings

SELLER = Address("Siri Selger", "Testsvingen 12", "0263", "Oslo")
BUYER = Address("Kari Kjøper", "Mottakerveien 14", "5004", "Bergen")


def simulated(**overrides: object) -> SimulatedCarrier:
    found = carrier_for(make_settings("sqlite+aiosqlite://", carrier="simulated", **overrides))
    assert isinstance(found, SimulatedCarrier)
    return found


def parcel(reference: str, **fields: object) -> BookingRequest:
    values: dict[str, object] = {
        "reference": reference,
        "size": PackageSize.SMALL,
        "delivery": Delivery.MAILBOX,
        "sender": SELLER,
        "recipient": BUYER,
        **fields,
    }
    return BookingRequest(**values)  # type: ignore[arg-type]


async def test_prices_per_size_cheapest_first_and_unknown_postcodes_refused():
    carrier = simulated()
    small = await carrier.quote(PackageSize.SMALL, "0263", "5004")
    assert [(q.delivery, q.price_minor) for q in small] == [
        (Delivery.MAILBOX, 6900),
        (Delivery.PARCEL_LOCKER, 7900),
        (Delivery.PICKUP_POINT, 8900),
    ]
    assert [q.delivery for q in await carrier.quote(PackageSize.XL, "0263", "5004")] == [
        Delivery.PICKUP_POINT
    ]
    with pytest.raises(CarrierRefused) as refused:
        await carrier.quote(PackageSize.SMALL, "0263", "0000")
    assert (refused.value.reason, refused.value.field) == ("invalid_address", "recipient.postcode")


async def test_a_booking_is_the_same_parcel_in_any_process_with_a_real_label():
    first = await simulated().book(parcel("0123456789abcdef"))
    again = await simulated().book(parcel("0123456789abcdef"))  # another instance: a restart
    assert (again.shipment_id, again.tracking_number, again.qr_code) == (
        first.shipment_id,
        first.tracking_number,
        first.qr_code,
    )
    other = await simulated().book(parcel("fedcba9876543210"))
    assert other.shipment_id != first.shipment_id
    elsewhere = await simulated(secret_key="another-deployment-key").book(
        parcel("0123456789abcdef")
    )
    assert elsewhere.shipment_id != first.shipment_id
    assert first.label_pdf.startswith(b"%PDF-")
    assert b"%%EOF" in first.label_pdf[-32:]
    assert len(first.label_pdf) < 2 * 1024 * 1024
    assert first.price_minor == 6900
    assert first.qr_code
    assert first.qr_code.startswith("SIM-")
    with pytest.raises(CarrierRefused):
        await simulated().book(parcel("big", size=PackageSize.LARGE))  # no mailbox takes it
    with pytest.raises(CarrierRefused):
        await simulated().book(parcel("heavy", weight_grams=5001))
    back = await simulated().book_return(
        parcel("back", sender=BUYER, recipient=SELLER, return_of=first.shipment_id)
    )
    assert back.shipment_id != first.shipment_id
    assert await simulated().track(first.tracking_number) == []
    await simulated().cancel(first.shipment_id)


def test_a_push_is_taken_only_signed_with_the_deployments_key():
    carrier = simulated()
    event = ParcelEvent(
        event_id="sandbox-1",
        kind=ParcelEventKind.READY_FOR_PICKUP,
        shipment_id="SIM1",
        tracking_number="SIM2",
        occurred_at=datetime(2026, 12, 6, 12, 0, tzinfo=UTC),
        pickup_point="Kiwi Bergen sentrum",
    )
    headers, body = carrier.signed_push(event)
    assert carrier.read_push(headers, body) == [event]
    assert carrier.read_push({k.lower(): v for k, v in headers.items()}, body) == [event]
    with pytest.raises(PushRejected) as tampered:
        carrier.read_push(headers, body.replace(b"SIM2", b"SIM3"))
    assert tampered.value.signature is True
    with pytest.raises(PushRejected):
        simulated(secret_key="another-deployment-key").read_push(headers, body)
    with pytest.raises(PushRejected):
        carrier.read_push({}, body)
    bad = b'{"kind":"teleported"}'
    with pytest.raises(PushRejected) as shape:
        carrier.read_push({SIGNATURE_HEADER: carrier._signature(bad)}, bad)
    assert shape.value.signature is False


def test_the_qr_code_is_an_accessible_svg():
    svg = qr_svg("BRING-1234-5678")
    assert svg.startswith('<svg role="img" ')
    assert "<title>BRING-1234-5678</title>" in svg
    assert "<?xml" not in svg
    assert "&lt;b&gt;" in qr_svg("<b>")  # the title is escaped
