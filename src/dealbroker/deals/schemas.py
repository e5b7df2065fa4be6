"""Request and response bodies of the deal endpoints, exactly as the interface names them."""

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from dealbroker.core import money
from dealbroker.core.clock import from_millis
from dealbroker.core.pagination import Page
from dealbroker.core.statuses import DealStatus
from dealbroker.core.validation import (
    Email,
    HttpUrl,
    Millis,
    Price,
    RequestModel,
    examples,
    text,
)
from dealbroker.deals import lifecycle
from dealbroker.events.schemas import ShipmentNews

if TYPE_CHECKING:
    from dealbroker.deals.models import DealFields

PackageType = Literal["Small", "Medium", "Large", "XL"]
MAX_IMAGES = 20


class Seller(RequestModel):
    """The seller's details; every field is optional, ``email`` is needed for offer links."""

    firstname: str | None = text(100)
    lastname: str | None = text(100)
    phone: str | None = Field(default=None, min_length=3, max_length=32, pattern=r"^\+?[0-9 ()-]+$")
    email: Email | None = None
    address: str | None = text(200)
    postcode: str | None = text(20)
    town: str | None = text(100)


# The seller the examples of a deal, sent and returned, show.
SELLER_EXAMPLE: JsonDict = {
    "firstname": "Kari",
    "lastname": "Nordmann",
    "phone": "+47 400 00 000",
    "email": "kari@example.com",
    "address": "Storgata 1",
    "postcode": "0155",
    "town": "Oslo",
}


class DealCreate(RequestModel):
    model_config = examples(
        {
            "name": "Road bike",
            "description": "Aluminium frame, 56 cm, lightly used.",
            "price": 4500.0,
            "images": ["https://cdn.example.com/bike-1.jpg"],
            "packageType": "Large",
            "seller": SELLER_EXAMPLE,
        }
    )

    name: str | None = text(200)
    description: str | None = text(5000)
    price: Price | None = None
    images: Annotated[list[HttpUrl], Field(max_length=MAX_IMAGES)] | None = None
    packageType: PackageType | None = None  # noqa: N815 - the interface's field name
    seller: Seller | None = None


class SellerOut(BaseModel):
    firstname: str | None
    lastname: str | None
    phone: str | None
    email: str | None
    address: str | None
    postcode: str | None
    town: str | None


class AllowedActions(BaseModel):
    """What the calling integration may do to this deal through the API right now. Derived
    from the lifecycle table and the rules the endpoints enforce: what is listed is accepted,
    what is not is refused. A token without `deals:write` may do nothing."""

    model_config = examples(
        {"changeStatus": ["Cancelled"], "createOfferLink": True},
        {"changeStatus": [], "createOfferLink": False},
    )

    changeStatus: list[DealStatus] = Field(  # noqa: N815
        description="The `status` values it may POST to `/deals/v1/deals/{dealId}/status` "
        "(others are 409). Outside the sandbox: `Cancelled` before payment, else none; in the "
        "sandbox every transition the lifecycle allows from the current status."
    )
    createOfferLink: bool = Field(  # noqa: N815
        description="Whether `POST /deals/v1/deals/{dealId}/offer` makes a link now (else 400): "
        "the deal has a seller with an email, is `Draft` or `Ad`, and has no approved offer."
    )


SHIPMENT_OUT_EXAMPLE: dict[str, Any] = {
    "source": "carrier",
    "carrier": "Bring",
    "trackingNumber": "370438101000000123",
    "trackingUrl": "https://tracking.bring.com/tracking/370438101000000123",
    "lastEvent": "picked_up",
    "lastEventAt": "2026-11-25T09:12:00.000Z",
}


class ShipmentOut(BaseModel):
    """Who follows the deal's parcel, and where it is."""

    model_config = examples(SHIPMENT_OUT_EXAMPLE)

    source: Literal["carrier", "integration"] = Field(
        description="`carrier`: dealbroker booked the parcel and follows the carrier's own "
        "events; `integration`: the marketplace (or the seller, typing a tracking number) "
        "reports them through `POST /deals/v1/deals/{dealId}/shipment-events`. One per deal."
    )
    carrier: str | None = Field(description="The carrier's name, as the parties read it.")
    trackingNumber: str | None = Field(  # noqa: N815
        description="The parcel's tracking number; null while a booking is being made."
    )
    trackingUrl: str | None = Field(  # noqa: N815
        description="The carrier's tracking page for the parcel (a parcel dealbroker booked)."
    )
    lastEvent: ShipmentNews | None = Field(  # noqa: N815
        description="The carrier's last event (`deal.shipment`'s `type`), null before any."
    )
    lastEventAt: datetime | None = Field(  # noqa: N815
        description="When the carrier says it happened."
    )


def shipment_out(shipment: dict[str, Any] | None) -> dict[str, Any] | None:
    """The body of ``ShipmentOut`` from the deal's ``shipment`` record (None before anyone has
    reported an event and nothing is booked)."""
    if not shipment:
        return None
    recorded = shipment.get("events") or []
    last = recorded[-1] if recorded else None
    return {
        "source": shipment.get("source") or "integration",
        "carrier": shipment.get("carrier"),
        "trackingNumber": shipment.get("tracking"),
        "trackingUrl": shipment.get("trackingUrl"),
        "lastEvent": None if last is None else last["type"],
        "lastEventAt": None if last is None else from_millis(last["occurredAt"]),
    }


class DealOut(BaseModel):
    """A deal as every deal endpoint returns it: the interface's fields, then additions."""

    model_config = examples(
        {
            "id": "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10",
            "name": "Road bike",
            "description": "Aluminium frame, 56 cm, lightly used.",
            "price": 4500,
            "status": "Draft",
            "seller": SELLER_EXAMPLE,
            "url": "http://127.0.0.1:8000/d/3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10/Zk9…",
            "images": ["https://cdn.example.com/bike-1.jpg"],
            "packageType": "Large",
            "currency": "NOK",
            "paymentStatus": None,
            "createdAt": "2026-11-22T10:00:00.000Z",
            "updatedAt": "2026-11-22T10:00:00.000Z",
            "allowedActions": {"changeStatus": ["Cancelled"], "createOfferLink": True},
            "shippingPrice": None,
            "shippingPaidBy": None,
            "shipment": None,
        },
        {
            "id": "9b1d4c3a-2f6e-4a8b-8c1d-5e7f9a0b1c2d",
            "name": "Road bike",
            "description": "Aluminium frame, 56 cm, lightly used.",
            "price": 4200,
            "status": "Signed",
            "seller": SELLER_EXAMPLE,
            "url": "http://127.0.0.1:8000/d/9b1d4c3a-2f6e-4a8b-8c1d-5e7f9a0b1c2d/Qm7…",
            "images": ["https://cdn.example.com/bike-1.jpg"],
            "packageType": "Large",
            "currency": "NOK",
            "paymentStatus": None,
            "createdAt": "2026-11-22T10:00:00.000Z",
            "updatedAt": "2026-11-23T08:30:00.000Z",
            "allowedActions": {"changeStatus": ["Cancelled"], "createOfferLink": False},
            "shippingPrice": 149,
            "shippingPaidBy": "buyer",
            "shipment": None,
        },
        {
            "id": "5c2e8f1a-7b3d-4e6f-9a0b-1c2d3e4f5a6b",
            "name": "Road bike",
            "description": "Aluminium frame, 56 cm, lightly used.",
            "price": 4200,
            "status": "Shipping_In_Progress",
            "seller": SELLER_EXAMPLE,
            "url": "http://127.0.0.1:8000/d/5c2e8f1a-7b3d-4e6f-9a0b-1c2d3e4f5a6b/Rt2…",
            "images": ["https://cdn.example.com/bike-1.jpg"],
            "packageType": "Large",
            "currency": "NOK",
            "paymentStatus": "Paid",
            "createdAt": "2026-11-22T10:00:00.000Z",
            "updatedAt": "2026-11-25T09:12:00.000Z",
            "allowedActions": {"changeStatus": [], "createOfferLink": False},
            "shippingPrice": 149,
            "shippingPaidBy": "buyer",
            "shipment": SHIPMENT_OUT_EXAMPLE,
        },
    )

    id: UUID
    name: str | None
    description: str | None
    price: float | None
    status: DealStatus
    seller: SellerOut | None
    url: str = Field(
        description="The seller's page for this deal: a capability link, keep it private."
    )
    images: list[str]
    packageType: PackageType | None  # noqa: N815
    currency: str
    paymentStatus: str | None  # noqa: N815
    createdAt: datetime  # noqa: N815
    updatedAt: datetime  # noqa: N815
    allowedActions: AllowedActions  # noqa: N815
    shippingPrice: float | None = Field(  # noqa: N815
        description="The shipping price of the approved offer, in `currency`: what the carrier "
        "quoted the buyer for the deal's `packageType` (Medium when none) when they offered "
        "`Carrier`. Null without one: no offer approved, `Pickup`, or a deployment whose "
        "marketplace ships on its own.",
        examples=[149],
    )
    shippingPaidBy: Literal["buyer", "seller"] | None = Field(  # noqa: N815
        description="Who pays `shippingPrice`: `buyer`, on top of `price` (the payment is "
        "price plus shipping), or `seller`, from the payout (the payment is the price; the "
        "payout is the price less the fee and the shipping). Null when `shippingPrice` is.",
        examples=["buyer"],
    )
    shipment: ShipmentOut | None = Field(
        description="The parcel of a Carrier deal once it is booked or reported: who follows "
        "it, its tracking and the carrier's last event (docs/shipping.md). Null before."
    )


class DealPage(BaseModel):
    page: Page
    items: list[DealOut]


class StatusChange(RequestModel):
    model_config = examples({"status": "Cancelled"})

    # Lax for this one field so the JSON string converts to the enum; only its values pass.
    status: DealStatus = Field(strict=False)


# --- what the carrier says about the parcel (deals.shipments) ---
SHIPMENT_EXAMPLE: dict[str, Any] = {
    "type": "delivered",
    "carrier": "Posten",
    "trackingNumber": "370712345678",
    "occurredAt": 1795000000000,
}


class ShipmentEventIn(RequestModel):
    """A carrier event about the deal's parcel, as the carrier reported it."""

    model_config = examples(SHIPMENT_EXAMPLE)

    type: Literal["picked_up", "in_transit", "delivered", "returned"] = Field(
        description="`picked_up`: the carrier has the parcel (the hand-over, if the deal is "
        "still `Shipping_Pending`); `in_transit`: a scan on the way; `delivered`: the deal "
        "moves to `Shipping_Arrived` and the buyer's 24 hours to review start; `returned`: "
        "`Shipping_Returned`, and the buyer is refunded in full."
    )
    carrier: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[^\u0000-\u001f\u007f]+$",
        description="The carrier's name, as the parties should read it.",
    )
    trackingNumber: str = Field(  # noqa: N815
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._/-]*$",
        description="The parcel's tracking number.",
    )
    occurredAt: Millis = Field(  # noqa: N815
        description="When it happened, milliseconds since the epoch: at most 90 days ago and "
        "at most one hour from now (400 otherwise)."
    )


SELLER_FIELDS = tuple(SellerOut.model_fields)


def deal_out(
    deal: "DealFields", url: str, allowed_actions: dict[str, object], shipping_paid_by: str
) -> dict[str, object]:
    """The JSON body of a deal (the shape of ``DealOut``), built directly for speed;
    ``allowed_actions`` from ``deals.actions.allowed_actions`` for the caller,
    ``shipping_paid_by`` the deployment's (``Settings.shipping_paid_by``). The body may hold the
    deal's own seller dictionary: serialise it, never change it."""
    seller = deal.seller
    # A seller stored with exactly the fields, in their order (as the API and the seller's
    # page store one), is its own body; one stored otherwise is made into it.
    if seller is not None and tuple(seller) != SELLER_FIELDS:
        seller = {f: seller.get(f) for f in SELLER_FIELDS}
    price, shipping = deal.price_minor, deal.shipping_minor
    return {
        "id": deal.id,
        "name": deal.name,
        "description": deal.description,
        "price": None if price is None else money.to_number(price),
        "status": deal.status,
        "seller": seller,
        "url": url,
        "images": deal.images,
        "packageType": deal.package_type,
        "currency": deal.currency,
        "paymentStatus": deal.payment_status,
        "createdAt": deal.created_at,
        "updatedAt": deal.updated_at,
        "allowedActions": allowed_actions,
        "shippingPrice": None if shipping is None else money.to_number(shipping),
        "shippingPaidBy": None if shipping is None else shipping_paid_by,
        "shipment": shipment_out(deal.shipment),
    }


# --- the published lifecycle (GET /deals/v1/lifecycle) ----------------------------------------


class StatusInfo(BaseModel):
    status: DealStatus
    final: bool = Field(description="No transition leaves this status.")
    dispute: bool = Field(description="The buyer reported a problem; the operator decides.")
    takesOffers: bool = Field(  # noqa: N815
        description="Offers may be made in this status (the deal also needs a seller with an "
        "email, and no offer approved yet)."
    )


class DeadlineInfo(BaseModel):
    effect: lifecycle.Effect
    fires: lifecycle.Trigger = Field(description="The trigger a timer fires when it falls due.")
    seconds: int
    duration: str = Field(description="The same, as an ISO 8601 duration.")


class TransitionInfo(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: list[DealStatus] = Field(alias="from", description="The statuses it leaves from.")
    trigger: lifecycle.Trigger
    to: DealStatus
    actors: list[lifecycle.Actor] = Field(description="Who may fire it.")
    deadline: DeadlineInfo | None = Field(description="The deadline it sets, if any.")
    effects: list[lifecycle.Effect] = Field(
        description="What else happens in the same transaction, deadlines included."
    )


class ActorInfo(BaseModel):
    actor: lifecycle.Actor
    description: str


class EffectInfo(BaseModel):
    effect: lifecycle.Effect
    description: str


class LifecycleOut(BaseModel):
    """The lifecycle table, as the service enforces it."""

    model_config = examples(
        {
            "initialStatus": "Draft",
            "statuses": [
                {"status": "Draft", "final": False, "dispute": False, "takesOffers": True},
                {
                    "status": "Cancelled",
                    "final": True,
                    "dispute": False,
                    "takesOffers": False,
                },
            ],
            "transitions": [
                {
                    "from": ["Draft", "Ad", "Signed"],
                    "trigger": "cancel",
                    "to": "Cancelled",
                    "actors": ["integration", "seller", "sandbox"],
                    "deadline": None,
                    "effects": ["deny_pending_offers"],
                },
                {
                    "from": ["Signed"],
                    "trigger": "paid_for_shipping",
                    "to": "Shipping_Pending",
                    "actors": ["provider", "sandbox"],
                    "deadline": {
                        "effect": "shipping_deadline",
                        "fires": "shipping_expired",
                        "seconds": 604800,
                        "duration": "P7D",
                    },
                    "effects": ["shipping_deadline"],
                },
            ],
            "actors": [
                {
                    "actor": "integration",
                    "description": "The marketplace, through POST /deals/v1/deals/{dealId}/status.",
                }
            ],
            "effects": [
                {
                    "effect": "deny_pending_offers",
                    "description": "Every pending offer is denied (a deal.offerDenied event each).",
                }
            ],
        }
    )

    initialStatus: DealStatus  # noqa: N815
    statuses: list[StatusInfo]
    transitions: list[TransitionInfo]
    actors: list[ActorInfo]
    effects: list[EffectInfo]


def iso_duration(seconds: int) -> str:
    """``seconds`` as an ISO 8601 duration in its largest whole unit: ``P7D``, ``PT36H``."""
    for unit, size, prefix in (("D", 86400, "P"), ("H", 3600, "PT"), ("M", 60, "PT")):
        if seconds % size == 0:
            return f"{prefix}{seconds // size}{unit}"
    return f"PT{seconds}S"


def _deadline(
    transition: lifecycle.Transition, days: lifecycle.DeadlineDays
) -> dict[str, object] | None:
    for effect in transition.effects:
        if effect in lifecycle.DEADLINES:
            trigger = lifecycle.DEADLINES[effect][0]
            seconds = lifecycle.deadline_seconds(effect, days)
            return {
                "effect": effect,
                "fires": trigger,
                "seconds": seconds,
                "duration": iso_duration(seconds),
            }
    return None


def lifecycle_out(days: lifecycle.DeadlineDays) -> dict[str, object]:
    """The body of ``LifecycleOut``, built from the lifecycle table itself, with this
    deployment's deadlines in days (transit, return)."""
    return {
        "initialStatus": DealStatus.DRAFT,
        "statuses": [
            {
                "status": s,
                "final": s in lifecycle.FINAL_STATUSES,
                "dispute": s in lifecycle.DISPUTES,
                "takesOffers": s in lifecycle.OFFER_STATUSES,
            }
            for s in DealStatus
        ],
        "transitions": [
            {
                # In declaration order, never a set's (per-process) hash order: the body and
                # its ETag are the same from every process.
                "from": [s for s in DealStatus if s in t.sources],
                "trigger": t.trigger,
                "to": t.target,
                "actors": [a for a in lifecycle.Actor if a in t.actors],
                "deadline": _deadline(t, days),
                "effects": list(t.effects),
            }
            for t in lifecycle.TRANSITIONS
        ],
        "actors": [{"actor": a, "description": lifecycle.ACTOR_NOTES[a]} for a in lifecycle.Actor],
        "effects": [
            {"effect": e, "description": lifecycle.EFFECT_NOTES[e]} for e in lifecycle.Effect
        ],
    }
