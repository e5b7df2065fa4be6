"""Bring (Posten Norge) as a carrier: its C2C platform parcel services, booked through the
Booking API, priced by the Shipping Guide API, followed by Event Cast pushes and, as the
fallback, the Tracking API.

Written from Bring's published documentation, as seen on 2026-12-06 (the developer site's own
sources, last changed 2025-11-14, and the live pages):

- Getting started (headers ``X-Mybring-API-Uid``, ``X-Mybring-API-Key``,
  ``X-Bring-Client-URL``): https://developer.bring.com/api/
- Booking API (``POST https://api.bring.com/booking/api/create``, ``X-Bring-Test-Indicator``,
  18 requests/s then 429; OpenAPI at https://api.bring.com/booking/api-docs):
  https://developer.bring.com/api/booking/
- Its error codes (``GET /api/errors``; ``uniqueId``, ``code``, ``messages``; codes marked
  suffixable end in ``-SENDER`` or ``-RECIPIENT``), as the Booking API reference lists them.
- Labels (a URL to a PDF; GET answers 302 to the storage, follow it):
  https://developer.bring.com/api/booking/labels/
- QR and label-free codes (``generateQrCodes``; one ``qrCodeLink`` per package, a URL to a
  PNG of the QR code; Norway uses QR codes for label-free hand-in, Sweden and Denmark also a
  label-free code ``BRING-1234-5678`` to write on the parcel):
  https://developer.bring.com/api/booking/labels/qr/
- C2C platforms (services 5900 to mailbox, 5901 to parcel locker, 5902 to a manned pickup
  point; size VAS 2528 Small 35x25x11 cm 5 kg, 2529 Medium 45x30x15 cm 5 kg, 1377 Large
  58x43x23 cm 10 kg, 1378 XL 120x60x60 cm 20 kg; which size each service takes; 5901 needs a
  locker as ``pickupPoint``): https://developer.bring.com/api/pickup/c2c-platforms/
- Shipping Guide API (``POST https://api.bring.com/shippingguide/api/v2/products``; prices in
  ``price.listPrice`` / ``netPrice``; "no applicable services" is an empty result):
  https://developer.bring.com/api/shipping-guide_2/ and its pages "Calling Shipping Guide API"
  and "Error and warning handling".
- Tracking API (``GET https://api.bring.com/tracking/api/v2/tracking.json?q=``; ``q`` is a
  reference, package or shipment number; event statuses; 404 "No shipments found"):
  https://developer.bring.com/api/tracking/
- Event Cast API (webhooks; the pushed body ``status``, ``id``, ``shipment``, ``package``,
  ``created``, ``pushed``; pushes carry the headers registered with the webhook; retried twice):
  https://developer.bring.com/api/event-cast/
- Test customer numbers and the test indicator: https://developer.bring.com/api/testing/

What the documentation does not give, and what this adapter chooses (each said again where it
is done):

- **Idempotency.** The Booking API has no idempotency key: a request repeated after a lost
  answer books a second parcel. So every booking carries our reference (at most 35
  characters, the documented limit) as the consignment's ``correlationId``, the package's
  ``correlationId`` and the sender's ``reference``; and ``book`` first asks the Tracking API
  for that reference (``q`` takes a reference, as documented). Found: the first booking is
  returned, never a second one made. A timed-out booking answers ``CarrierUnavailable`` with a
  ``retry_after`` of two minutes, the time we give Bring to show the booking in tracking
  before the repeat looks for it. Bring documents no way to fetch a label again: a booking
  found this way comes back with an empty ``label_pdf`` (the label is in Mybring's order
  history, where Booking API orders are listed: https://developer.bring.com/api/booking-shipment/).
- **Cancelling.** The Booking API documents no cancellation; a booked label nobody hands in
  carries nothing. ``cancel`` asks the Tracking API whether Bring has the parcel (any event past
  the EDI pre-notification): then ``CarrierRefused("not_cancellable")``; else there is nothing to
  undo at Bring, and a second cancel is the same.
- **Returns.** A return is booked as a new C2C parcel from the buyer to the seller (5902 unless
  asked otherwise), paid by the service; Bring's return services (9300...) need a business
  return agreement.
- **Pushes.** Event Cast signs nothing: it sends the headers registered with the webhook. The
  subscription is registered with the header ``X-Dealbroker-Event-Cast-Secret`` carrying
  ``DEALBROKER_BRING_EVENT_CAST_SECRET``, compared in constant time.
- **Events.** Bring has no "lost" or "damaged" status: lost is our 30-day rule, damage the
  buyer's word; ``DEVIATION``, notices and home-delivery changes are not mapped. An event's id
  is derived from its package, status and time, so the same event told by a push and by the
  Tracking API has the same id.
- **The Shipping Guide's error object** is described in words only ("an error object in the
  response that is on service level"): a product with ``errors`` and no price is not offered;
  an error naming a postal code is an invalid address.
"""

import asyncio
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from dealbroker.carriers.base import (
    Booking,
    BookingRequest,
    CarrierRefused,
    CarrierUnavailable,
    Delivery,
    PackageSize,
    ParcelEvent,
    ParcelEventKind,
    PushRejected,
    Quote,
)
from dealbroker.core.settings import Settings

log = logging.getLogger("dealbroker.carriers")

NAME = "bring"
SECRET_HEADER = "X-Dealbroker-Event-Cast-Secret"
# The C2C platform services, and the size VAS each takes (the C2C platforms page).
SERVICES: dict[Delivery, str] = {
    Delivery.MAILBOX: "5900",
    Delivery.PARCEL_LOCKER: "5901",
    Delivery.PICKUP_POINT: "5902",
}
SIZE_VAS: dict[PackageSize, str] = {
    PackageSize.SMALL: "2528",
    PackageSize.MEDIUM: "2529",
    PackageSize.LARGE: "1377",
    PackageSize.XL: "1378",
}
SIZES_OF_SERVICE: dict[str, frozenset[PackageSize]] = {
    "5900": frozenset({PackageSize.SMALL, PackageSize.MEDIUM}),
    "5901": frozenset({PackageSize.SMALL, PackageSize.MEDIUM, PackageSize.LARGE}),
    "5902": frozenset(PackageSize),
}
# Length, width, height (cm) and weight limit (grams) of each size class.
DIMENSIONS: dict[PackageSize, tuple[int, int, int, int]] = {
    PackageSize.SMALL: (35, 25, 11, 5000),
    PackageSize.MEDIUM: (45, 30, 15, 5000),
    PackageSize.LARGE: (58, 43, 23, 10000),
    PackageSize.XL: (120, 60, 60, 20000),
}
# Bring's tracking statuses (Tracking API, Event Cast) in our words; the others are not mapped.
KINDS: dict[str, ParcelEventKind] = {
    "PRE_NOTIFIED": ParcelEventKind.BOOKED,
    "HANDED_IN": ParcelEventKind.PICKED_UP,
    "COLLECTED": ParcelEventKind.PICKED_UP,
    "IN_TRANSIT": ParcelEventKind.IN_TRANSIT,
    "TERMINAL": ParcelEventKind.IN_TRANSIT,
    "TRANSPORT_TO_RECIPIENT": ParcelEventKind.IN_TRANSIT,
    "INTERNATIONAL": ParcelEventKind.IN_TRANSIT,
    "CUSTOMS": ParcelEventKind.IN_TRANSIT,
    "READY_FOR_PICKUP": ParcelEventKind.READY_FOR_PICKUP,
    "DELIVERED": ParcelEventKind.DELIVERED,
    "DELIVERED_SENDER": ParcelEventKind.RETURNED,
}
# Statuses that say Bring has the parcel in hand (``cancel`` refuses then).
IN_BRINGS_HANDS = frozenset(KINDS) - {"PRE_NOTIFIED"} | {
    "ATTEMPTED_DELIVERY",
    "DEVIATION",
    "RETURN",
}

MAX_JSON_BYTES = 1_000_000
MAX_LABEL_BYTES = 2 * 1024 * 1024
MAX_QR_BYTES = 256 * 1024
QR_SECONDS = 10.0  # the QR image is optional: it may not hold the booking up for long
# Where a QR image may come from besides the API's own host: Bring's domains, over HTTPS.
QR_HOSTS = ("bring.com", "mybring.com", "bring.no", "posten.no")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PUSH_BYTES = 64 * 1024
MAX_REFERENCE = 35  # every Booking API text field's documented limit
RETRY_AFTER_TIMEOUT = 120.0  # seconds: time for the booking to show in tracking (see above)
_NUMBER = re.compile(r"^[A-Za-z0-9-]{1,64}$")


def configuration_problem(settings: Settings) -> str | None:
    """Why a process may not run with ``DEALBROKER_CARRIER=bring`` (one line), or None. The
    sandbox may run with test credentials, or none (every call then fails as Bring would)."""
    if settings.is_sandbox:
        return None
    needed = (
        ("DEALBROKER_BRING_API_UID", settings.bring_api_uid),
        ("DEALBROKER_BRING_API_KEY", settings.bring_api_key.get_secret_value()),
        ("DEALBROKER_BRING_CUSTOMER_NUMBER", settings.bring_customer_number),
        ("DEALBROKER_BRING_EVENT_CAST_SECRET", settings.bring_event_cast_secret.get_secret_value()),
    )
    missing = [name for name, value in needed if not value.strip()]
    if missing:
        return f"{', '.join(missing)} needed in production with DEALBROKER_CARRIER=bring"
    if len(settings.bring_event_cast_secret.get_secret_value()) < 32:
        return "DEALBROKER_BRING_EVENT_CAST_SECRET must be at least 32 characters in production"
    if settings.bring_test_indicator:
        return (
            "DEALBROKER_BRING_TEST_INDICATOR=true books no real parcel; production refuses to "
            "start with it"
        )
    return None


def _clip(value: Any, limit: int) -> str | None:
    """A text from Bring, as a bounded single line (or None when empty or not text)."""
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())
    return text[:limit] or None


def _number(value: Any) -> str | None:
    return value if isinstance(value, str) and _NUMBER.match(value) else None


def _minor(amount: Any) -> int | None:
    try:
        value = Decimal(str(amount))
    except (InvalidOperation, ValueError):
        return None
    if not value.is_finite() or value < 0 or value > 1_000_000:
        return None
    return int((value * 100).to_integral_value())


def _when(value: Any) -> datetime | None:
    """Bring's times: ISO 8601 with an offset (``2010-10-01T08:30:25+02:00``, Tracking API) or
    ``yyyy-MM-dd'T'HH:mm:ssZ`` (``2019-03-16T14:58:48+0000``, Event Cast)."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    for layout in ("%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z"):
        try:
            return datetime.strptime(value, layout).astimezone(UTC)
        except ValueError:
            continue
    return None


def event_id(package: str, status: str, occurred_at: datetime) -> str:
    """The same event, pushed or polled, has the same id: Bring's push id is not in the
    Tracking API's answer."""
    key = f"{package}|{status}|{occurred_at.astimezone(UTC):%Y-%m-%dT%H:%M:%S}"
    return "bring-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "").strip()
    if value.isdigit():
        return min(float(value), 3600.0)
    try:
        when = datetime.strptime(value, "%a, %d %b %Y %H:%M:%S GMT").replace(tzinfo=UTC)
    except ValueError:
        return None
    return max(0.0, min((when - datetime.now(UTC)).total_seconds(), 3600.0))


def _header(headers: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


class BringCarrier:
    """The Carrier protocol on Bring's APIs (see the module's docstring)."""

    name = NAME

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._base = settings.bring_api_base.rstrip("/")
        self._origin = urlsplit(self._base)[:2]
        self._timeout = httpx.Timeout(settings.bring_timeout_seconds, connect=5.0)
        self._secret = settings.bring_event_cast_secret.get_secret_value().encode()

    # --- HTTP -----------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {
            "X-Mybring-API-Uid": self._settings.bring_api_uid,
            "X-Mybring-API-Key": self._settings.bring_api_key.get_secret_value(),
            "X-Bring-Client-URL": self._settings.base_url,
            "X-Bring-Test-Indicator": "true" if self._settings.bring_test_indicator else "false",
            "Accept": "application/json",
        }

    def _client(self) -> httpx.AsyncClient:
        # Redirects are followed by hand (labels): the API key must never go to another host.
        return httpx.AsyncClient(timeout=self._timeout, follow_redirects=False, trust_env=False)

    async def _send(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        *,
        limit: int = MAX_JSON_BYTES,
        what: str,
        **kwargs: Any,
    ) -> tuple[httpx.Response, bytes]:
        """One request; its body read up to ``limit`` bytes (more: ``CarrierUnavailable``).
        A timeout, a network error, a 429 or a 5xx: ``CarrierUnavailable``."""
        try:
            async with client.stream(method, url, **kwargs) as response:
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise CarrierUnavailable(f"Bring's answer to {what} is over {limit} bytes")
                body = bytearray()
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) > limit:
                        raise CarrierUnavailable(f"Bring's answer to {what} is over {limit} bytes")
        except httpx.TimeoutException as exc:
            retry = RETRY_AFTER_TIMEOUT if what == "a booking" else None
            raise CarrierUnavailable(f"Bring did not answer {what} in time", retry) from exc
        except httpx.HTTPError as exc:
            raise CarrierUnavailable(f"Bring could not be reached for {what}: {exc}") from exc
        if response.status_code == 429:
            raise CarrierUnavailable(
                f"Bring's rate limit refused {what} (429)", _retry_after(response)
            )
        if response.status_code >= 500:
            raise CarrierUnavailable(
                f"Bring failed {what} ({response.status_code})", _retry_after(response)
            )
        if response.status_code in (401, 403):
            # Credentials or rights: the operator's to fix; what was asked is not refused.
            raise CarrierUnavailable(
                f"Bring refused the credentials for {what} ({response.status_code}): check "
                "DEALBROKER_BRING_API_UID, DEALBROKER_BRING_API_KEY and the login's rights"
            )
        return response, bytes(body)

    @staticmethod
    def _json(body: bytes, what: str) -> dict[str, Any]:
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise CarrierUnavailable(f"Bring's answer to {what} is not JSON") from exc
        if not isinstance(data, dict):
            raise CarrierUnavailable(f"Bring's answer to {what} is not a JSON object")
        return data

    # --- quote ----------------------------------------------------------------------------

    async def quote(
        self, size: PackageSize, from_postcode: str, to_postcode: str, country: str = "NO"
    ) -> list[Quote]:
        length, width, height, grams = DIMENSIONS[size]
        services = [code for code, sizes in SIZES_OF_SERVICE.items() if size in sizes]
        request = {
            "language": "EN",
            "withPrice": True,
            "withExpectedDelivery": True,
            "withGuiInformation": False,
            "edi": True,
            "consignments": [
                {
                    "id": "1",
                    "products": [
                        {"id": code, "customerNumber": self._settings.bring_customer_number}
                        for code in services
                    ],
                    "fromCountryCode": country,
                    "toCountryCode": country,
                    "fromPostalCode": from_postcode,
                    "toPostalCode": to_postcode,
                    "packages": [
                        {
                            "id": "1",
                            "length": length,
                            "width": width,
                            "height": height,
                            "grossWeight": grams,
                        }
                    ],
                    "additionalServices": [{"id": SIZE_VAS[size]}],
                }
            ],
        }
        async with self._client() as client:
            response, body = await self._send(
                client,
                "POST",
                f"{self._base}/shippingguide/api/v2/products",
                json=request,
                headers=self._headers(),
                what="a price",
            )
        data = self._json(body, "a price")
        if response.status_code >= 400:
            self._refuse_quote(data, response.status_code)
        consignments = data.get("consignments")
        products = (
            consignments[0].get("products")
            if isinstance(consignments, list) and consignments and isinstance(consignments[0], dict)
            else None
        )
        quotes: list[Quote] = []
        errors: list[dict[str, Any]] = []
        for product in products if isinstance(products, list) else []:
            if not isinstance(product, dict):
                continue
            found = product.get("errors")
            if isinstance(found, list):
                errors += [error for error in found if isinstance(error, dict)]
            quoted = self._quote_of(product, size)
            if quoted is not None:
                quotes.append(quoted)
        if not quotes:
            for error in errors:
                self._refuse_if_postcode(error)
            raise CarrierRefused(
                "route_not_served",
                f"Bring offers no C2C service for {size} from {from_postcode} to {to_postcode}",
            )
        return sorted(quotes, key=lambda quoted: quoted.price_minor)

    def _quote_of(self, product: dict[str, Any], size: PackageSize) -> Quote | None:
        service = product.get("id")
        delivery = next((d for d, code in SERVICES.items() if code == service), None)
        price = product.get("price")
        if (
            not isinstance(service, str)
            or delivery is None
            or not isinstance(price, dict)
            or size not in SIZES_OF_SERVICE[service]
        ):
            return None
        # The agreement's price when Bring gives it, else the list price.
        for kind in ("netPrice", "listPrice"):
            offer = price.get(kind)
            if not isinstance(offer, dict):
                continue
            total = offer.get("priceWithAdditionalServices")
            amount = _minor(total.get("amountWithVAT")) if isinstance(total, dict) else None
            currency = offer.get("currencyCode")
            if amount is not None and isinstance(currency, str) and len(currency) == 3:
                expected = product.get("expectedDelivery")
                days = expected.get("workingDays") if isinstance(expected, dict) else None
                return Quote(
                    carrier=NAME,
                    service=service,
                    size=size,
                    delivery=delivery,
                    price_minor=amount,
                    currency=currency.upper(),
                    working_days=int(str(days))
                    if str(days).isdigit() and len(str(days)) < 3
                    else None,
                )
        return None

    @staticmethod
    def _refuse_if_postcode(error: dict[str, Any]) -> None:
        words = f"{error.get('code', '')} {error.get('description', '')}".lower()
        if "postal" in words or "postcode" in words:
            field = "sender.postcode" if "from" in words else "recipient.postcode"
            raise CarrierRefused("invalid_address", f"Bring: {_clip(words, 200)}", field=field)

    def _refuse_quote(self, data: dict[str, Any], status: int) -> None:
        for key in ("errors", "fieldErrors"):
            found = data.get(key)
            for error in found if isinstance(found, list) else []:
                if isinstance(error, dict):
                    self._refuse_if_postcode(error)
        raise CarrierRefused("rejected", f"Bring refused the price request ({status})")

    # --- book -----------------------------------------------------------------------------

    async def book(self, request: BookingRequest) -> Booking:
        """Book, unless the reference is already booked (see the module's docstring)."""
        reference = request.reference
        if not reference or len(reference) > MAX_REFERENCE:
            raise ValueError("a booking reference is 1 to 35 characters")
        service = SERVICES[request.delivery]
        if request.size not in SIZES_OF_SERVICE[service]:
            raise CarrierRefused(
                "too_heavy",
                f"Bring's service {service} takes no {request.size} parcel",
                field="size",
            )
        async with self._client() as client:
            found = await self._booked_before(client, reference, service)
            if found is not None:
                return found
            answer = await self._create(client, request, service)
            label = await self._label(client, answer["label_url"])
            qr_png = await self._qr_image(client, answer["qr_url"])
        return Booking(
            carrier=NAME,
            service=service,
            shipment_id=answer["shipment_id"],
            tracking_number=answer["tracking_number"],
            tracking_url=answer["tracking_url"],
            label_pdf=label,
            qr_code=answer["qr_code"],
            qr_png=qr_png,
            price_minor=None,
        )

    async def book_return(self, request: BookingRequest) -> Booking:
        """A return is a new C2C parcel from the buyer (the sender here) to the seller."""
        if not request.return_of:
            raise ValueError("a return names the shipment it sends back")
        return await self.book(request)

    def _body(self, request: BookingRequest, service: str) -> dict[str, Any]:
        length, width, height, limit = DIMENSIONS[request.size]
        grams = request.weight_grams if request.weight_grams is not None else limit
        now = datetime.now(UTC).replace(microsecond=0, tzinfo=None)

        def party(address: Any, reference: str | None) -> dict[str, Any]:
            return {
                "name": address.name[:MAX_REFERENCE],
                "addressLine": address.street[:MAX_REFERENCE],
                "addressLine2": None,
                "postalCode": address.postcode,
                "city": address.city[:MAX_REFERENCE],
                "countryCode": address.country,
                "reference": reference,
                "contact": {
                    "name": address.name[:MAX_REFERENCE],
                    "email": address.email,
                    "phoneNumber": address.phone,
                },
            }

        pickup_point = (
            {"id": request.pickup_point_id, "countryCode": request.recipient.country}
            if request.pickup_point_id
            else None
        )
        return {
            "schemaVersion": 1,
            "consignments": [
                {
                    "shippingDateTime": now.isoformat(),
                    "product": {
                        "id": service,
                        "customerNumber": self._settings.bring_customer_number,
                        "additionalServices": [{"id": SIZE_VAS[request.size]}],
                    },
                    "correlationId": request.reference,
                    "generateQrCodes": True,
                    "parties": {
                        "sender": party(request.sender, request.reference),
                        "recipient": party(request.recipient, None),
                        "pickupPoint": pickup_point,
                    },
                    "packages": [
                        {
                            "weightInKg": round(grams / 1000, 3),
                            "goodsDescription": None,
                            "dimensions": {
                                "heightInCm": height,
                                "widthInCm": width,
                                "lengthInCm": length,
                            },
                            "correlationId": request.reference,
                        }
                    ],
                }
            ],
        }

    async def _create(
        self, client: httpx.AsyncClient, request: BookingRequest, service: str
    ) -> dict[str, Any]:
        if request.delivery is Delivery.PARCEL_LOCKER and not request.pickup_point_id:
            raise CarrierRefused(
                "rejected",
                "Bring's parcel-locker service books only to a named locker",
                field="pickup_point_id",
            )
        response, body = await self._send(
            client,
            "POST",
            f"{self._base}/booking/api/create",
            json=self._body(request, service),
            headers={**self._headers(), "Content-Type": "application/json"},
            what="a booking",
        )
        data = self._json(body, "a booking")
        consignments = data.get("consignments")
        consignment = (
            consignments[0]
            if isinstance(consignments, list) and consignments and isinstance(consignments[0], dict)
            else {}
        )
        errors = consignment.get("errors") or data.get("errors")
        if isinstance(errors, list) and errors:
            self._refuse_booking(errors)
        if response.status_code >= 400:
            raise CarrierRefused("rejected", f"Bring refused the booking ({response.status_code})")
        confirmation = consignment.get("confirmation")
        if not isinstance(confirmation, dict):
            raise CarrierUnavailable("Bring's booking answer has no confirmation")
        found_links = confirmation.get("links")
        links: dict[str, Any] = found_links if isinstance(found_links, dict) else {}
        packages = confirmation.get("packages")
        package = (
            packages[0]
            if isinstance(packages, list) and packages and isinstance(packages[0], dict)
            else {}
        )
        shipment_id = _number(confirmation.get("consignmentNumber"))
        tracking_number = _number(package.get("packageNumber")) or shipment_id
        label_url = links.get("labels")
        if shipment_id is None or tracking_number is None or not isinstance(label_url, str):
            raise CarrierUnavailable("Bring's booking answer lacks its numbers or label")
        return {
            "shipment_id": shipment_id,
            "tracking_number": tracking_number,
            "tracking_url": self._tracking_url(links.get("tracking"), shipment_id),
            "label_url": label_url,
            # Bring's QR image (``generateQrCodes``: a link to a PNG its pickup points scan to
            # print the label; the code in it is Bring's, so the image is kept as given), and
            # its label-free code (``BRING-1234-5678``, Sweden and Denmark: written on the
            # parcel) when it gives one.
            "qr_url": package.get("qrCodeLink"),
            "qr_code": _clip(package.get("labelFreeCode"), 40),
        }

    @staticmethod
    def _tracking_url(value: Any, shipment_id: str) -> str:
        if isinstance(value, str) and value.startswith("https://") and len(value) <= 500:
            return value
        return f"https://sporing.bring.no/sporing.html?q={shipment_id}"

    @staticmethod
    def _refuse_booking(errors: list[Any]) -> None:
        """Bring's error codes as our refusals (or a passing failure for its internal ones)."""
        error = next((e for e in errors if isinstance(e, dict)), {})
        code = str(error.get("code", ""))[:60]
        messages = error.get("messages")
        message = (
            next(
                (
                    _clip(m.get("message"), 200)
                    for m in (messages if isinstance(messages, list) else [])
                    if isinstance(m, dict)
                ),
                None,
            )
            or "refused"
        )
        said = f"Bring: {code} {message}"
        party = (
            "recipient"
            if code.endswith("-RECIPIENT")
            else "sender"
            if code.endswith("-SENDER")
            else None
        )
        number = re.sub(r"-(SENDER|RECIPIENT)$", "", code).replace("_", "-")
        if number.startswith("BOOK-INTERNAL"):
            raise CarrierUnavailable(said)
        fields = {
            "BOOK-INPUT-057": "postcode",
            "BOOK-INPUT-014": "name",
            "BOOK-INPUT-015": "street",
            "BOOK-INPUT-016": "city",
            "BOOK-INPUT-017": "country",
            "BOOK-INPUT-028": "country",
        }
        if number in fields:
            raise CarrierRefused(
                "invalid_address", said, field=f"{party or 'recipient'}.{fields[number]}"
            )
        if number in (
            "BOOK-INPUT-022",
            "BOOK-INPUT-024",
            "BOOK-INPUT-025",
            "BOOK-INPUT-045",
            "BOOK-INPUT-070",
        ):
            raise CarrierRefused("route_not_served", said)
        if number in ("BOOK-INPUT-023", "BOOK-VALIDATION-015"):
            raise CarrierRefused("too_heavy", said, field="size")
        raise CarrierRefused("rejected", said)

    async def _label(self, client: httpx.AsyncClient, url: str) -> bytes:
        """The label PDF: at Bring's own host (with our headers), answered by a 302 to its
        storage (fetched without them), at most 2 MB, a PDF."""
        if urlsplit(url)[:2] != self._origin:
            raise CarrierUnavailable("Bring's label is not on Bring's API host")
        headers = self._headers()
        for _ in range(4):
            response, body = await self._send(
                client, "GET", url, limit=MAX_LABEL_BYTES, headers=headers, what="a label"
            )
            if response.status_code in (301, 302, 303, 307, 308):
                location = response.headers.get("Location", "")
                url = urljoin(url, location)
                if urlsplit(url).scheme != "https" and urlsplit(url)[:2] != self._origin:
                    raise CarrierUnavailable("Bring's label redirects to a plain-text address")
                headers = {"Accept": "application/pdf"}
                continue
            if response.status_code != 200 or not body.startswith(b"%PDF"):
                raise CarrierUnavailable(f"Bring's label is not a PDF ({response.status_code})")
            return body
        raise CarrierUnavailable("Bring's label redirects too often")

    async def _qr_image(self, client: httpx.AsyncClient, url: Any) -> bytes | None:
        """Bring's QR image for the package: a PNG of at most ``MAX_QR_BYTES``, from Bring's
        API host (with our headers) or another of Bring's hosts over HTTPS (``QR_HOSTS``,
        without them), following at most three redirects among those, within
        ``QR_SECONDS``. The parcel is booked by now and its label fetched: a QR image that
        cannot be had, for whatever reason, is logged and left out (the seller prints the
        label instead), never a reason to book again."""
        if not isinstance(url, str) or not url or len(url) > 500:
            return None
        try:
            async with asyncio.timeout(min(QR_SECONDS, self._settings.bring_timeout_seconds)):
                return await self._fetch_qr(client, url)
        except Exception as exc:  # noqa: BLE001 - optional: whatever failed, the label stands
            log.warning("Bring's QR code could not be fetched (%s); left out", type(exc).__name__)
            return None

    def _bring_host(self, url: str) -> bool:
        parts = urlsplit(url)
        if parts[:2] == self._origin:
            return True
        host = (parts.hostname or "").lower()
        return parts.scheme == "https" and any(
            host == h or host.endswith("." + h) for h in QR_HOSTS
        )

    async def _fetch_qr(self, client: httpx.AsyncClient, url: str) -> bytes | None:
        for _ in range(4):
            if not self._bring_host(url):
                log.warning("Bring's QR code link is not at one of Bring's hosts; left out")
                return None
            same_origin = urlsplit(url)[:2] == self._origin
            headers = self._headers() if same_origin else {"Accept": "image/png"}
            response, body = await self._send(
                client, "GET", url, limit=MAX_QR_BYTES, headers=headers, what="a QR code"
            )
            if response.status_code in (301, 302, 303, 307, 308):
                url = urljoin(url, response.headers.get("Location", ""))
                continue
            if response.status_code != 200 or not body.startswith(PNG_SIGNATURE):
                log.warning("Bring's QR code is not a PNG (%s); left out", response.status_code)
                return None
            return bytes(body)
        log.warning("Bring's QR code link redirects too often; left out")
        return None

    async def _booked_before(
        self, client: httpx.AsyncClient, reference: str, service: str
    ) -> Booking | None:
        """The parcel booked with this reference before, as the Tracking API knows it."""
        consignments = await self._tracking(client, reference)
        for consignment in consignments:
            shipment_id = _number(consignment.get("consignmentId"))
            packages = consignment.get("packageSet")
            package = (
                packages[0]
                if isinstance(packages, list) and packages and isinstance(packages[0], dict)
                else {}
            )
            tracking_number = _number(package.get("packageNumber")) or shipment_id
            if shipment_id is None or tracking_number is None:
                continue
            return Booking(
                carrier=NAME,
                service=_number(package.get("productCode")) or service,
                shipment_id=shipment_id,
                tracking_number=tracking_number,
                tracking_url=self._tracking_url(None, shipment_id),
                label_pdf=b"",  # Bring documents no way to fetch it again (module docstring)
            )
        return None

    # --- tracking -------------------------------------------------------------------------

    async def _tracking(self, client: httpx.AsyncClient, query: str) -> list[dict[str, Any]]:
        """The Tracking API's consignments for a reference, shipment or package number."""
        response, body = await self._send(
            client,
            "GET",
            f"{self._base}/tracking/api/v2/tracking.json",
            params={"q": query, "lang": "en"},
            headers={**self._headers(), "api-version": "2"},
            what="tracking",
        )
        if response.status_code == 404:
            return []
        data = self._json(body, "tracking")
        consignments = data.get("consignmentSet")
        found = []
        for consignment in consignments if isinstance(consignments, list) else []:
            if not isinstance(consignment, dict):
                continue
            error = consignment.get("error")
            if isinstance(error, dict):
                code = error.get("code")
                if code == 404:
                    continue
                if isinstance(code, int) and code >= 500:
                    raise CarrierUnavailable(f"Bring's tracking failed ({code})")
                if response.status_code >= 400 or isinstance(code, int):
                    raise CarrierRefused("rejected", f"Bring refused the tracking query ({code})")
            found.append(consignment)
        if response.status_code >= 400 and not found:
            raise CarrierRefused(
                "rejected", f"Bring refused the tracking query ({response.status_code})"
            )
        return found

    async def track(self, tracking_number: str) -> list[ParcelEvent]:
        async with self._client() as client:
            consignments = await self._tracking(client, tracking_number)
        events: list[ParcelEvent] = []
        for consignment in consignments:
            shipment_id = _number(consignment.get("consignmentId")) or tracking_number
            packages = consignment.get("packageSet")
            for package in packages if isinstance(packages, list) else []:
                if not isinstance(package, dict):
                    continue
                number = _number(package.get("packageNumber")) or tracking_number
                found = package.get("eventSet")
                for event in found if isinstance(found, list) else []:
                    parsed = self._event(event, shipment_id, number)
                    if parsed is not None:
                        events.append(parsed)
        events.sort(key=lambda event: event.occurred_at)
        return list({event.event_id: event for event in events}.values())

    @staticmethod
    def _event(event: Any, shipment_id: str, package: str) -> ParcelEvent | None:
        if not isinstance(event, dict):
            return None
        status = event.get("status")
        kind = KINDS.get(status) if isinstance(status, str) else None
        occurred_at = _when(event.get("dateIso"))
        if kind is None or occurred_at is None:
            return None
        assert isinstance(status, str)
        place = " ".join(
            part for part in (event.get("postalCode"), event.get("city")) if isinstance(part, str)
        )
        return ParcelEvent(
            event_id=event_id(package, status, occurred_at),
            kind=kind,
            shipment_id=shipment_id,
            tracking_number=package,
            occurred_at=occurred_at,
            location=_clip(place, 100),
            description=_clip(event.get("description"), 300),
            pickup_point=_clip(f"{event.get('unitId', '')} {place}", 200)
            if kind is ParcelEventKind.READY_FOR_PICKUP
            else None,
        )

    async def cancel(self, shipment_id: str) -> None:
        """Bring documents no cancellation (module docstring): refused once Bring has the
        parcel, else nothing to undo."""
        async with self._client() as client:
            consignments = await self._tracking(client, shipment_id)
        for consignment in consignments:
            packages = consignment.get("packageSet")
            for package in packages if isinstance(packages, list) else []:
                found = package.get("eventSet") if isinstance(package, dict) else None
                for event in found if isinstance(found, list) else []:
                    if isinstance(event, dict) and event.get("status") in IN_BRINGS_HANDS:
                        raise CarrierRefused(
                            "not_cancellable",
                            f"Bring already has shipment {shipment_id} ({event.get('status')})",
                        )

    # --- pushes ---------------------------------------------------------------------------

    def read_push(self, headers: Mapping[str, str], body: bytes) -> list[ParcelEvent]:
        """An Event Cast push: the registered secret header first, then the documented body
        (one event: ``status``, ``id``, ``shipment``, ``package``, ``created``, ``pushed``)."""
        given = _header(headers, SECRET_HEADER)
        if (
            not self._secret
            or given is None
            or not hmac.compare_digest(given.encode(), self._secret)
        ):
            raise PushRejected("an Event Cast push without our secret header", signature=True)
        if len(body) > MAX_PUSH_BYTES:
            raise PushRejected("an Event Cast push over 64 KB", signature=False)
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise PushRejected("an Event Cast push that is not JSON", signature=False) from exc
        if not isinstance(data, dict):
            raise PushRejected("an Event Cast push that is not an object", signature=False)
        status = data.get("status")
        package = _number(data.get("package"))
        shipment = _number(data.get("shipment")) or package
        occurred_at = _when(data.get("created"))
        if (
            not isinstance(status, str)
            or package is None
            or shipment is None
            or occurred_at is None
        ):
            raise PushRejected("an Event Cast push without its fields", signature=False)
        kind = KINDS.get(status)
        if kind is None:
            return []  # a status we do not map (module docstring)
        return [
            ParcelEvent(
                event_id=event_id(package, status, occurred_at),
                kind=kind,
                shipment_id=shipment,
                tracking_number=package,
                occurred_at=occurred_at,
            )
        ]
