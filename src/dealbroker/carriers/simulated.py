"""The sandbox's carrier: no network, no parcel. It books at once, with a real label PDF (marked
as the sandbox's) and a code to show at the counter; its events come from the sandbox (buttons
and triggers) as a signed push, signed with the deployment's ``DEALBROKER_SECRET_KEY``
(HMAC-SHA256 of the body, ``X-Dealbroker-Signature: sha256=<hex>``), read back by
``read_push`` and taken by the one handler of a real carrier's pushes
(``parcels.service.take_events``), in the sandbox's own transaction: not over HTTP, so a
sandbox trigger answers with the deal as the event left it.

A booking repeated with the same reference gives the same parcel in any process: the shipment
and tracking numbers are derived from the reference and the secret key, and nothing else is
kept. The services and sizes are Bring's C2C ones (a mailbox takes Small and Medium, a locker up
to Large, a pickup point every size), at the fixed prices of ``PRICES``.
"""

import hashlib
import hmac
import json
from collections.abc import Mapping
from datetime import UTC, datetime

from fpdf import FPDF

from dealbroker.carriers.base import (
    Booking,
    BookingRequest,
    CarrierRefused,
    Delivery,
    PackageSize,
    ParcelEvent,
    ParcelEventKind,
    PushRejected,
    Quote,
)
from dealbroker.core.settings import Settings

NAME = "simulated"
SIGNATURE_HEADER = "X-Dealbroker-Signature"
MAX_PUSH_BYTES = 64 * 1024
# NOK øre: the sandbox's fixed prices, by size and delivery (absent: not offered).
PRICES: dict[PackageSize, dict[Delivery, int]] = {
    PackageSize.SMALL: {
        Delivery.MAILBOX: 6900,
        Delivery.PARCEL_LOCKER: 7900,
        Delivery.PICKUP_POINT: 8900,
    },
    PackageSize.MEDIUM: {
        Delivery.MAILBOX: 8900,
        Delivery.PARCEL_LOCKER: 9900,
        Delivery.PICKUP_POINT: 10900,
    },
    PackageSize.LARGE: {Delivery.PARCEL_LOCKER: 14900, Delivery.PICKUP_POINT: 15900},
    PackageSize.XL: {Delivery.PICKUP_POINT: 29900},
}
WEIGHT_LIMIT_GRAMS = {
    PackageSize.SMALL: 5000,
    PackageSize.MEDIUM: 5000,
    PackageSize.LARGE: 10000,
    PackageSize.XL: 20000,
}


def _latin1(text: str) -> str:
    """The label's core font writes Latin-1 only (æøå included); anything else is a ``?``."""
    return text.encode("latin-1", "replace").decode("latin-1")


def label_pdf(booking_numbers: tuple[str, str], request: BookingRequest, service: str) -> bytes:
    """A one-page A6 label: sender, recipient, size, service, the tracking number as text and
    as a Code 39 bar code, and "SANDBOX" in plain words: it carries no parcel."""
    shipment_id, tracking_number = booking_numbers
    pdf = FPDF(format=(105, 148))
    pdf.set_auto_page_break(False)
    pdf.set_title(f"Label {tracking_number}")
    pdf.set_creator("dealbroker sandbox")
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 14)
    pdf.cell(0, 8, "SANDBOX - NOT A REAL LABEL", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 9)
    for heading, address in (("From", request.sender), ("To", request.recipient)):
        pdf.set_font("Helvetica", "B", 9)
        pdf.cell(0, 5, heading, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Helvetica", "", 9)
        for line in (
            address.name,
            address.street,
            f"{address.postcode} {address.city}",
            address.country,
        ):
            pdf.cell(0, 4.5, _latin1(line)[:60], new_x="LMARGIN", new_y="NEXT")
        pdf.ln(2)
    pdf.cell(
        0,
        5,
        f"{request.size} - {request.delivery.replace('_', ' ')} - {service}",
        new_x="LMARGIN",
        new_y="NEXT",
    )
    pdf.cell(0, 5, f"Shipment {shipment_id}", new_x="LMARGIN", new_y="NEXT")
    pdf.cell(0, 5, f"Reference {request.reference}", new_x="LMARGIN", new_y="NEXT")
    pdf.code39(f"*{tracking_number}*", x=8, y=pdf.get_y() + 3, w=0.8, h=14)
    pdf.set_y(pdf.get_y() + 19)
    pdf.set_font("Helvetica", "B", 11)
    pdf.cell(0, 6, tracking_number, align="C", new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())


class SimulatedCarrier:
    """The Carrier protocol with nothing behind it (see the module's docstring)."""

    name = NAME

    def __init__(self, settings: Settings) -> None:
        self._key = settings.secret_key.encode()
        self._base_url = settings.base_url

    def _digits(self, purpose: str, reference: str, count: int) -> str:
        digest = hmac.new(self._key, f"{purpose}:{reference}".encode(), hashlib.sha256)
        return str(int.from_bytes(digest.digest(), "big"))[-count:].rjust(count, "0")

    async def quote(
        self, size: PackageSize, from_postcode: str, to_postcode: str, country: str = "NO"
    ) -> list[Quote]:
        for field, postcode in (
            ("sender.postcode", from_postcode),
            ("recipient.postcode", to_postcode),
        ):
            if not (len(postcode) == 4 and postcode.isdigit()) or postcode == "0000":
                raise CarrierRefused("invalid_address", f"no postcode {postcode!r}", field=field)
        return sorted(
            (
                Quote(
                    carrier=NAME,
                    service=f"sim-{delivery}",
                    size=size,
                    delivery=delivery,
                    price_minor=price,
                    currency="NOK",
                    working_days=2,
                )
                for delivery, price in PRICES[size].items()
            ),
            key=lambda quoted: quoted.price_minor,
        )

    async def book(self, request: BookingRequest) -> Booking:
        price = PRICES[request.size].get(request.delivery)
        if price is None:
            raise CarrierRefused(
                "too_heavy", f"no {request.size} parcel to a {request.delivery}", field="size"
            )
        if (
            request.weight_grams is not None
            and request.weight_grams > WEIGHT_LIMIT_GRAMS[request.size]
        ):
            raise CarrierRefused(
                "too_heavy", f"over the weight limit of {request.size}", field="size"
            )
        shipment_id = "SIM" + self._digits("shipment", request.reference, 14)
        tracking_number = "SIM" + self._digits("package", request.reference, 15)
        service = f"sim-{request.delivery}"
        return Booking(
            carrier=NAME,
            service=service,
            shipment_id=shipment_id,
            tracking_number=tracking_number,
            tracking_url=f"{self._base_url}/sandbox/parcels/{tracking_number}",
            label_pdf=label_pdf((shipment_id, tracking_number), request, service),
            qr_code=f"SIM-{self._digits('code', request.reference, 4)}-"
            f"{self._digits('code2', request.reference, 4)}",
            price_minor=price,
        )

    async def cancel(self, shipment_id: str) -> None:
        """Nothing to undo: the sandbox's parcels move only when the sandbox says."""

    async def book_return(self, request: BookingRequest) -> Booking:
        if not request.return_of:
            raise ValueError("a return names the shipment it sends back")
        return await self.book(request)

    async def track(self, tracking_number: str) -> list[ParcelEvent]:
        """The sandbox's events are pushed (``signed_push``), never polled."""
        return []

    # --- pushes ---------------------------------------------------------------------------

    def _signature(self, body: bytes) -> str:
        return "sha256=" + hmac.new(self._key, body, hashlib.sha256).hexdigest()

    def signed_push(self, event: ParcelEvent) -> tuple[dict[str, str], bytes]:
        """The headers and body with which the sandbox pushes ``event`` to
        ``POST /carriers/v1/simulated/events``."""
        body = json.dumps(
            {
                "id": event.event_id,
                "kind": str(event.kind),
                "shipment": event.shipment_id,
                "package": event.tracking_number,
                "occurredAt": event.occurred_at.astimezone(UTC).isoformat(),
                "location": event.location,
                "description": event.description,
                "pickupPoint": event.pickup_point,
            },
            separators=(",", ":"),
        ).encode()
        return {SIGNATURE_HEADER: self._signature(body), "Content-Type": "application/json"}, body

    def read_push(self, headers: Mapping[str, str], body: bytes) -> list[ParcelEvent]:
        given = next((v for k, v in headers.items() if k.lower() == SIGNATURE_HEADER.lower()), "")
        if not hmac.compare_digest(given.encode(), self._signature(body).encode()):
            raise PushRejected("a push not signed with this deployment's key", signature=True)
        if len(body) > MAX_PUSH_BYTES:
            raise PushRejected("a push over 64 KB", signature=False)
        try:
            data = json.loads(body)
            kind = ParcelEventKind(data["kind"])
            occurred_at = datetime.fromisoformat(data["occurredAt"])
            if occurred_at.tzinfo is None:
                raise ValueError("a time without its offset")
            occurred_at = occurred_at.astimezone(UTC)
            fields = {
                name: data[key]
                for name, key in (
                    ("event_id", "id"),
                    ("shipment_id", "shipment"),
                    ("tracking_number", "package"),
                )
            }
            texts = {
                name: data.get(key)
                for name, key in (
                    ("location", "location"),
                    ("description", "description"),
                    ("pickup_point", "pickupPoint"),
                )
            }
        except (ValueError, KeyError, TypeError) as exc:
            raise PushRejected("a push without its fields", signature=False) from exc
        if not all(isinstance(value, str) and 0 < len(value) <= 100 for value in fields.values()):
            raise PushRejected("a push without its fields", signature=False)
        bounded = {k: v[:300] if isinstance(v, str) else None for k, v in texts.items()}
        return [
            ParcelEvent(
                event_id=fields["event_id"],
                kind=kind,
                shipment_id=fields["shipment_id"],
                tracking_number=fields["tracking_number"],
                occurred_at=occurred_at,
                location=bounded["location"],
                description=bounded["description"],
                pickup_point=bounded["pickup_point"],
            )
        ]
