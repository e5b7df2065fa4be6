"""An emulator of Bring's APIs for the tests: ``python -m tests.carriers.bring_emulator PORT
STATE_DIR`` serves, on 127.0.0.1 only, the requests and answers of Bring's published
documentation that ``dealbroker.carriers.bring`` uses. It is a test part: nothing in
production ever answers with it (``DEALBROKER_BRING_API_BASE`` points at it only in tests).

It follows these pages, as seen on 2026-12-06:

- Getting started (``X-Mybring-API-Uid``, ``X-Mybring-API-Key``, ``X-Bring-Client-URL``):
  https://developer.bring.com/api/
- Booking API, ``POST /booking/api/create`` (``X-Bring-Test-Indicator``; one consignment of
  one package; answers ``consignments[].confirmation`` with ``consignmentNumber``, ``links``
  (``labels``, ``tracking``) and ``packages[].packageNumber``, or ``consignments[].errors``
  of ``uniqueId``, ``code``, ``messages``): https://developer.bring.com/api/booking/ ; its error
  codes (BOOK-INPUT-002 ... BOOK_INPUT-057, suffixed ``-SENDER`` / ``-RECIPIENT`` where
  suffixable) as listed by ``GET /booking/api/errors``.
- Labels: the label URL answers 302 to the storage, which serves the PDF:
  https://developer.bring.com/api/booking/labels/
- QR codes: ``generateQrCodes`` at the consignment level answers one ``qrCodeLink`` per
  package, a URL to a PNG image of the QR code: https://developer.bring.com/api/booking/labels/qr/
- C2C platforms: services 5900 (mailbox: Small, Medium), 5901 (locker: up to Large; a locker
  ``pickupPoint`` required), 5902 (pickup point: every size); size VAS 2528, 2529, 1377, 1378
  with their dimensions and weight limits (5, 5, 10, 20 kg); a size VAS is required:
  https://developer.bring.com/api/pickup/c2c-platforms/
- Shipping Guide API, ``POST /shippingguide/api/v2/products`` (``price.listPrice``,
  ``priceWithAdditionalServices.amountWithVAT``, ``currencyCode``):
  https://developer.bring.com/api/shipping-guide_2/ ("Calling Shipping Guide API", "Error and
  warning handling").
- Tracking API, ``GET /tracking/api/v2/tracking.json?q=`` (a reference, shipment or package
  number; ``consignmentSet[].packageSet[].eventSet[]`` newest first; "No shipments found" as
  a 404 error object): https://developer.bring.com/api/tracking/
- Event Cast pushes (the body ``status``, ``id``, ``shipment``, ``package``, ``created``,
  ``pushed``; the headers ``X-Bring-Application``, ``X-bring-Correlation``, ``X-bring-Version``
  and those registered with the webhook): https://developer.bring.com/api/event-cast/
- Bring's test customer number 5 and its test tracking numbers:
  https://developer.bring.com/api/testing/

Where the pages are silent it chooses, plainly: a postcode is known when it is four digits
and not ``0000``; Svalbard (``9170``-``9179``) is not served by the C2C services; the Shipping
Guide's service-level error object is ``{"code", "description"}``; the prices are a fixed table;
the 401 answer's body is a short text; a label URL and a QR code link need no credentials; the
QR code encodes the package number.

Control endpoints (JSON), for the tests only, under ``/_emulator/``:

- ``POST /_emulator/fail`` ``{"mode": "429"|"500"|"502"|"503"|"hang"|"huge", "count": N,
  "retry_after": s, "hang_seconds": s, "path": "/booking"}``: the next ``count`` requests whose
  path starts with ``path`` (default: any Bring path) fail so. ``429`` carries ``Retry-After``;
  ``hang`` does the request (a booking is made) and answers only after ``hang_seconds``;
  ``huge`` answers 200 with a 3 MB body.
- ``POST /_emulator/push-url`` ``{"url": ..., "header": ..., "secret": ...}``: where Event Cast
  pushes, with the header it was registered with (a customer-number subscription).
- ``POST /_emulator/events`` ``{"number": shipment, package or reference, "status": "HANDED_IN",
  "created": ISO time (default now), "signature": "good"|"bad"|"none", "push": true,
  "description", "city", "postalCode", "unitId"}``: adds the event to the parcel's tracking and
  pushes it; answers ``{"event": body pushed, "pushed": the receiver's status or null}``.
- ``GET /_emulator/bookings[?reference=]``: the bookings made, oldest first.
- ``GET /_emulator/requests``: every request to a Bring path (method, path, test indicator).
- ``POST /_emulator/reset``: forget every booking, event, failure and push URL.
"""

import asyncio
import io
import json
import random
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import segno
from aiohttp import ClientError, ClientSession, ClientTimeout, web
from fpdf import FPDF

UID = "dealbroker@example.com"
API_KEY = "emulator-api-key-0123456789"
CUSTOMER_NUMBER = "5"  # Bring's test customer number, Parcel Norway domestic
SIZES = {  # size VAS: (length, width, height) cm, limit kg
    "2528": ((35, 25, 11), 5.0),
    "2529": ((45, 30, 15), 5.0),
    "1377": ((58, 43, 23), 10.0),
    "1378": ((120, 60, 60), 20.0),
}
SERVICE_SIZES = {
    "5900": {"2528", "2529"},
    "5901": {"2528", "2529", "1377"},
    "5902": {"2528", "2529", "1377", "1378"},
}
PRICES = {  # NOK with VAT, by service and size VAS (the emulator's own table)
    "5900": {"2528": "69.00", "2529": "89.00"},
    "5901": {"2528": "79.00", "2529": "99.00", "1377": "149.00"},
    "5902": {"2528": "89.00", "2529": "109.00", "1377": "159.00", "1378": "299.00"},
}
BRING_PATHS = ("/booking/", "/shippingguide/", "/tracking/", "/labels/", "/_storage/", "/qr/")
MAX_REQUEST = 256 * 1024


def known(postcode: Any) -> bool:
    return (
        isinstance(postcode, str)
        and len(postcode) == 4
        and postcode.isdigit()
        and postcode != "0000"
    )


def svalbard(postcode: str) -> bool:
    return postcode.startswith("917")


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S+0000")


@dataclass
class Failure:
    mode: str
    count: int
    path: str
    retry_after: int
    hang_seconds: float


@dataclass
class State:
    directory: Path
    bookings: list[dict[str, Any]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    push: dict[str, str] | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    sequence: int = 0

    def save(self) -> None:
        data = {"bookings": self.bookings, "push": self.push, "sequence": self.sequence}
        (self.directory / "state.json").write_text(json.dumps(data, indent=1))

    def load(self) -> None:
        path = self.directory / "state.json"
        if path.exists():
            data = json.loads(path.read_text())
            self.bookings, self.push, self.sequence = (
                data["bookings"],
                data["push"],
                data["sequence"],
            )

    def find(self, number: str) -> dict[str, Any] | None:
        for booking in self.bookings:
            if number in (
                booking["consignmentNumber"],
                booking["packageNumber"],
                booking["reference"],
            ):
                return booking
        return None


def error_body(code: str, message: str, correlation: Any = None) -> dict[str, Any]:
    return {
        "consignments": [
            {
                "confirmation": None,
                "errors": [
                    {
                        "uniqueId": str(uuid.uuid4()),
                        "code": code,
                        "messages": [{"lang": "en", "message": message}],
                    }
                ],
                "correlationId": correlation,
            }
        ]
    }


def label(booking: dict[str, Any]) -> bytes:
    pdf = FPDF(format=(105, 148))
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 14)
    pdf.cell(0, 8, "Bring emulator label", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", "", 10)
    for line in (
        f"Service {booking['product']} size {booking['sizeVas']}",
        f"Shipment {booking['consignmentNumber']}",
        f"Reference {booking['reference']}",
        f"To {booking['recipientPostalCode']}",
    ):
        pdf.cell(0, 6, line, new_x="LMARGIN", new_y="NEXT")
    pdf.code39(f"*{booking['packageNumber']}*", x=8, y=60, w=0.6, h=14)
    return bytes(pdf.output())


class Emulator:
    def __init__(self, directory: Path) -> None:
        self.state = State(directory)
        self.state.load()
        (directory / "labels").mkdir(exist_ok=True)

    # --- the plumbing: credentials, failures --------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not request.path.startswith(BRING_PATHS):
            return await handler(request)
        self.state.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": request.query_string,
                "testIndicator": request.headers.get("X-Bring-Test-Indicator"),
            }
        )
        failure = next((f for f in self.state.failures if request.path.startswith(f.path)), None)
        if failure is not None:
            failure.count -= 1
            if failure.count <= 0:
                self.state.failures.remove(failure)
            if failure.mode == "429":
                return web.Response(
                    status=429,
                    text="Too Many Requests",
                    headers={"Retry-After": str(failure.retry_after)},
                )
            if failure.mode in ("500", "502", "503"):
                return web.Response(status=int(failure.mode), text="Service unavailable")
            if failure.mode == "huge":  # an answer far over any size the client takes
                return web.Response(
                    body=b"%PDF" + b" " * (3 * 1024 * 1024), content_type="application/json"
                )
            if failure.mode == "hang":
                response = await handler(request)  # done, as a request that timed out is
                await asyncio.sleep(failure.hang_seconds)
                return response
        if not request.path.startswith(("/labels/", "/_storage/", "/qr/")):
            if (
                request.headers.get("X-Mybring-API-Uid") != UID
                or request.headers.get("X-Mybring-API-Key") != API_KEY
            ):
                return web.Response(status=401, text="Authentication failed")
            if not request.headers.get("X-Bring-Client-URL"):
                return web.Response(status=400, text="X-Bring-Client-URL is required")
        return await handler(request)

    async def _json(self, request: web.Request) -> Any:
        body = await request.content.read(MAX_REQUEST + 1)
        if len(body) > MAX_REQUEST:
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_REQUEST, actual_size=len(body))
        try:
            return json.loads(body)
        except ValueError:
            return None

    # --- Booking API ----------------------------------------------------------------------

    async def create(self, request: web.Request) -> web.Response:
        data = await self._json(request)
        if not isinstance(data, dict):
            return web.json_response(
                error_body("BOOK_INPUT-059", "Not able to parse the input"), status=400
            )
        if data.get("schemaVersion") != 1:
            return web.json_response(
                error_body("BOOK-INPUT-003", "Schema version must be present"), status=400
            )
        consignments = data.get("consignments")
        if not isinstance(consignments, list) or not consignments:
            return web.json_response(
                error_body("BOOK-INPUT-004", "At least one consignment must be specified"),
                status=400,
            )
        if len(consignments) > 1:
            return web.json_response(
                error_body(
                    "BOOK-INPUT-005", "Multiple consignments in one booking is not supported"
                ),
                status=400,
            )
        consignment = consignments[0]
        correlation = consignment.get("correlationId")
        refused = self._check(consignment)
        if refused is not None:
            return web.json_response(error_body(*refused, correlation), status=400)
        product = consignment["product"]
        sizes = [s["id"] for s in product.get("additionalServices") or [] if s.get("id") in SIZES]
        package = consignment["packages"][0]
        self.state.sequence += 1
        number = f"{random.randint(10**7, 10**8 - 1)}{self.state.sequence:09d}"
        booking = {
            "reference": correlation,
            "senderReference": consignment["parties"]["sender"].get("reference"),
            "consignmentNumber": f"70438101{number[-9:]}",
            "packageNumber": f"370438101{number[-9:]}",
            "product": product["id"],
            "sizeVas": sizes[0],
            "weightInKg": package["weightInKg"],
            "pickupPoint": consignment["parties"].get("pickupPoint"),
            "senderPostalCode": consignment["parties"]["sender"]["postalCode"],
            "recipientPostalCode": consignment["parties"]["recipient"]["postalCode"],
            "testIndicator": request.headers.get("X-Bring-Test-Indicator"),
            "labelId": str(uuid.uuid4()),
            "qrCode": consignment.get("generateQrCodes") is True,
            "bookedAt": now_iso(),
            # EDI pre-notification is part of the booking (Booking API page)
            "events": [
                {"status": "PRE_NOTIFIED", "dateIso": now_iso(), "description": "EDI received"}
            ],
        }
        (self.state.directory / "labels" / f"{booking['labelId']}.pdf").write_bytes(label(booking))
        self.state.bookings.append(booking)
        self.state.save()
        base = f"{request.scheme}://{request.host}"
        return web.json_response(
            {
                "consignments": [
                    {
                        "confirmation": {
                            "consignmentNumber": booking["consignmentNumber"],
                            "productSpecificData": None,
                            "links": {
                                "labels": f"{base}/labels/id/{booking['labelId']}.pdf",
                                "waybill": None,
                                "tracking": "https://sporing.bring.no/sporing.html?q="
                                + booking["consignmentNumber"],
                            },
                            "dateAndTimes": {"earliestPickup": None, "expectedDelivery": None},
                            "packages": [
                                {
                                    "packageNumber": booking["packageNumber"],
                                    "correlationId": package.get("correlationId"),
                                    # generateQrCodes: one link to a PNG per package
                                    **(
                                        {"qrCodeLink": f"{base}/qr/{booking['labelId']}.png"}
                                        if booking["qrCode"]
                                        else {}
                                    ),
                                }
                            ],
                        },
                        "errors": None,
                        "correlationId": correlation,
                    }
                ]
            }
        )

    def _check(self, consignment: Any) -> tuple[str, str] | None:
        """Bring's validation of one consignment, as its error codes name it."""
        if not isinstance(consignment, dict):
            return "BOOK-INPUT-001", "Bad request"
        if not consignment.get("shippingDateTime"):
            return "BOOK-INPUT-012", "Shipping date and time must be provided"
        product = consignment.get("product")
        if not isinstance(product, dict):
            return "BOOK-INPUT-008", "Product must be set"
        if not product.get("id"):
            return "BOOK-INPUT-018", "Product ID must be provided"
        if product["id"] not in SERVICE_SIZES:
            return "BOOK-INPUT-020", "Invalid product ID"
        if not product.get("customerNumber"):
            return "BOOK-INPUT-019", "Customer number must be provided"
        if product["customerNumber"] != CUSTOMER_NUMBER:
            return "BOOK-INPUT-021", "Invalid customer number"
        parties = consignment.get("parties")
        if not isinstance(parties, dict) or not isinstance(parties.get("sender"), dict):
            return "BOOK-INPUT-006", "Sender must be specified"
        if not isinstance(parties.get("recipient"), dict):
            return "BOOK-INPUT-007", "Recipient must be specified"
        for role in ("sender", "recipient"):
            party, suffix = parties[role], role.upper()
            if not party.get("name"):
                return f"BOOK-INPUT-014-{suffix}", "Name must be provided"
            if not party.get("addressLine"):
                return f"BOOK-INPUT-015-{suffix}", "Address must be provided"
            if not party.get("city"):
                return f"BOOK-INPUT-016-{suffix}", "City must be provided"
            if not party.get("countryCode"):
                return f"BOOK-INPUT-017-{suffix}", "ISO Country code must be provided"
            if str(party["countryCode"]).upper() != "NO":
                return "BOOK-INPUT-022", "Illegal product for country"
            if not known(party.get("postalCode")):
                return f"BOOK_INPUT-057-{suffix}", "Invalid postal Code"
            for text in ("name", "addressLine", "city", "reference"):
                if isinstance(party.get(text), str) and len(party[text]) > 35:
                    return "BOOK-INPUT-001", f"{text} can be maximum 35 characters long"
        if svalbard(parties["sender"]["postalCode"]) or svalbard(
            parties["recipient"]["postalCode"]
        ):
            return (
                "BOOK-INPUT-024",
                "The product is not available between the given addresses (outside coverage)",
            )
        sizes = [
            s.get("id") for s in product.get("additionalServices") or [] if isinstance(s, dict)
        ]
        size = next((s for s in sizes if s in SIZES), None)
        if size is None or size not in SERVICE_SIZES[product["id"]]:
            return "BOOK-INPUT-027", "Failed because of product specific requirements"
        if product["id"] == "5901" and not parties.get("pickupPoint"):
            return "BOOK-INPUT-045", "Could not find a pickup point for the provided recipient"
        packages = consignment.get("packages")
        if not isinstance(packages, list) or not packages:
            return "BOOK-INPUT-009", "Package or Package Group must be specified"
        if len(packages) > 1:
            return "BOOK-INPUT-032", "Multiple packages are not supported for this product"
        package = packages[0]
        weight = package.get("weightInKg") if isinstance(package, dict) else None
        if not isinstance(weight, (int, float)) or weight <= 0:
            return "BOOK-INPUT-002", "Weight is required"
        dimensions = package.get("dimensions")
        if not isinstance(dimensions, dict):
            return "BOOK-INPUT-013", "Package dimensions must be provided"
        (length, width, height), limit = SIZES[size]
        given = sorted(
            int(dimensions.get(k) or 0) for k in ("lengthInCm", "widthInCm", "heightInCm")
        )
        if weight > limit or given > sorted((length, width, height)):
            return "BOOK-INPUT-023", "The shipment is too big to send with the given product"
        reference = consignment.get("correlationId")
        if isinstance(reference, str) and len(reference) > 35:
            return "BOOK-INPUT-001", "correlationId can be maximum 35 characters long"
        return None

    async def label_link(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(f"/_storage/{request.match_info['id']}.pdf")

    async def storage(self, request: web.Request) -> web.Response:
        name = request.match_info["id"]
        try:
            uuid.UUID(name)
        except ValueError:
            raise web.HTTPNotFound() from None
        path = self.state.directory / "labels" / f"{name}.pdf"
        if not path.exists():
            raise web.HTTPNotFound()
        return web.Response(body=path.read_bytes(), content_type="application/pdf")

    async def qr_image(self, request: web.Request) -> web.Response:
        """The package's QR code as a PNG (what the code encodes is Bring's and unpublished:
        here, the package number)."""
        name = request.match_info["id"]
        booking = next((b for b in self.state.bookings if b["labelId"] == name), None)
        if booking is None or not booking.get("qrCode"):
            raise web.HTTPNotFound()
        out = io.BytesIO()
        segno.make(booking["packageNumber"], error="m").save(out, kind="png", scale=6, border=4)
        return web.Response(body=out.getvalue(), content_type="image/png")

    # --- Shipping Guide API ---------------------------------------------------------------

    async def products(self, request: web.Request) -> web.Response:
        data = await self._json(request)
        if not isinstance(data, dict) or not isinstance(data.get("consignments"), list):
            return web.json_response(
                {"errors": [{"code": "BAD_REQUEST", "description": "Bad request"}]}, status=400
            )
        answers = []
        for consignment in data["consignments"]:
            origin, target = consignment.get("fromPostalCode"), consignment.get("toPostalCode")
            sizes = [s.get("id") for s in consignment.get("additionalServices") or []]
            size = next((s for s in sizes if s in SIZES), None)
            products = []
            for wanted in consignment.get("products") or []:
                code = wanted.get("id")
                answer: dict[str, Any] = {"id": code}
                if not known(origin):
                    answer["errors"] = [
                        {
                            "code": "INVALID_FROM_POSTAL_CODE",
                            "description": "Invalid from postal code",
                        }
                    ]
                elif not known(target):
                    answer["errors"] = [
                        {"code": "INVALID_TO_POSTAL_CODE", "description": "Invalid to postal code"}
                    ]
                elif (
                    code not in PRICES
                    or size not in PRICES[code]
                    or svalbard(origin)
                    or svalbard(target)
                ):
                    answer["errors"] = [
                        {
                            "code": "PRODUCT_NOT_AVAILABLE",
                            "description": "Not available for this shipment",
                        }
                    ]
                else:
                    with_vat = PRICES[code][size]
                    without = f"{float(with_vat) / 1.25:.2f}"
                    amounts = {
                        "amountWithoutVAT": without,
                        "vat": f"{float(with_vat) - float(without):.2f}",
                        "amountWithVAT": with_vat,
                    }
                    answer["price"] = {
                        "listPrice": {
                            "priceWithoutAdditionalServices": amounts,
                            "additionalServices": [],
                            "priceWithAdditionalServices": amounts,
                            "currencyCode": "NOK",
                        }
                    }
                    answer["expectedDelivery"] = {"workingDays": "2"}
                products.append(answer)
            answers.append({"products": products})
        return web.json_response(
            {"traceMessages": [], "consignments": answers, "uniqueId": str(uuid.uuid4())}
        )

    # --- Tracking API ---------------------------------------------------------------------

    async def tracking(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "")
        if not query:
            return web.json_response(
                {
                    "apiVersion": "2",
                    "consignmentSet": [{"error": {"code": 400, "message": "Invalid query"}}],
                },
                status=400,
            )
        booking = self.state.find(query)
        if booking is None:
            return web.json_response(
                {
                    "apiVersion": "2",
                    "consignmentSet": [{"error": {"code": 404, "message": "No shipments found"}}],
                },
                status=404,
            )
        events = [
            {
                "description": event.get("description", ""),
                "status": event["status"],
                "unitId": event.get("unitId", ""),
                "postalCode": event.get("postalCode", ""),
                "city": event.get("city", ""),
                "countryCode": "NO",
                "dateIso": event["dateIso"].replace("+0000", "+00:00"),
                "consignmentEvent": False,
                "insignificant": False,
            }
            for event in reversed(booking["events"])
        ]
        return web.json_response(
            {
                "apiVersion": "2",
                "consignmentSet": [
                    {
                        "consignmentId": booking["consignmentNumber"],
                        "senderReference": booking["senderReference"],
                        "packageSet": [
                            {
                                "packageNumber": booking["packageNumber"],
                                "productCode": booking["product"],
                                "statusDescription": events[0]["description"],
                                "eventSet": events,
                            }
                        ],
                    }
                ],
            }
        )

    # --- control --------------------------------------------------------------------------

    async def fail(self, request: web.Request) -> web.Response:
        data = await self._json(request)
        self.state.failures.append(
            Failure(
                mode=str(data["mode"]),
                count=int(data.get("count", 1)),
                path=str(data.get("path", "/")),
                retry_after=int(data.get("retry_after", 1)),
                hang_seconds=float(data.get("hang_seconds", 5)),
            )
        )
        return web.json_response({"failures": len(self.state.failures)})

    async def push_url(self, request: web.Request) -> web.Response:
        data = await self._json(request)
        self.state.push = {"url": data["url"], "header": data["header"], "secret": data["secret"]}
        self.state.save()
        return web.json_response({"ok": True})

    async def events(self, request: web.Request) -> web.Response:
        data = await self._json(request)
        booking = self.state.find(str(data.get("number", "")))
        if booking is None:
            return web.json_response({"error": "no such shipment"}, status=404)
        created = data.get("created") or now_iso()
        event = {
            "status": data["status"],
            "dateIso": created,
            **{k: data[k] for k in ("description", "city", "postalCode", "unitId") if k in data},
        }
        booking["events"].append(event)
        self.state.save()
        body = {
            "status": data["status"],
            "id": str(uuid.uuid4()),
            "shipment": booking["consignmentNumber"],
            "package": booking["packageNumber"],
            "created": created,
            "pushed": now_iso(),
        }
        pushed = None
        if data.get("push", True) and self.state.push is not None:
            headers = {
                "Accept": "application/json",
                "Content-Type": "application/json",
                "User-Agent": "Bringcast-Webhook/v1.0.34",
                "X-Bring-Application": "BMEC",
                "X-bring-Correlation": uuid.uuid4().hex[:5],
                "X-bring-Version": "1",
            }
            signature = data.get("signature", "good")
            if signature == "good":
                headers[self.state.push["header"]] = self.state.push["secret"]
            elif signature == "bad":
                headers[self.state.push["header"]] = "not-the-secret"
            try:
                async with ClientSession(timeout=ClientTimeout(total=10)) as session:
                    async with session.post(
                        self.state.push["url"], data=json.dumps(body), headers=headers
                    ) as answer:
                        pushed = answer.status
            except (ClientError, TimeoutError) as exc:  # Event Cast would retry later
                return web.json_response({"event": body, "pushed": None, "error": str(exc)})
        return web.json_response({"event": body, "pushed": pushed})

    async def bookings(self, request: web.Request) -> web.Response:
        reference = request.query.get("reference")
        found = [b for b in self.state.bookings if reference is None or b["reference"] == reference]
        return web.json_response({"bookings": found})

    async def requests(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.state.requests})

    async def reset(self, request: web.Request) -> web.Response:
        self.state.bookings.clear()
        self.state.failures.clear()
        self.state.requests.clear()
        self.state.push = None
        self.state.save()
        return web.json_response({"ok": True})

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.middleware], client_max_size=MAX_REQUEST)
        app.add_routes(
            [
                web.post("/booking/api/create", self.create),
                web.get("/labels/id/{id}.pdf", self.label_link),
                web.get("/_storage/{id}.pdf", self.storage),
                web.get("/qr/{id}.png", self.qr_image),
                web.post("/shippingguide/api/v2/products", self.products),
                web.get("/tracking/api/v2/tracking.json", self.tracking),
                web.post("/_emulator/fail", self.fail),
                web.post("/_emulator/push-url", self.push_url),
                web.post("/_emulator/events", self.events),
                web.get("/_emulator/bookings", self.bookings),
                web.get("/_emulator/requests", self.requests),
                web.post("/_emulator/reset", self.reset),
            ]
        )
        return app


def main() -> None:
    port, directory = int(sys.argv[1]), Path(sys.argv[2])
    directory.mkdir(parents=True, exist_ok=True)
    web.run_app(Emulator(directory).app(), host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main()
