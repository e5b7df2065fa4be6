"""Typed models of what the dealbroker API answers and what it takes.

Response models accept fields they do not know (the service may add fields to its answers at
any time; they stay readable in ``model_extra``). Request models hold exactly the fields the
service accepts, with the interface's names as aliases, so Python code reads in snake_case.
"""

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    field_serializer,
)
from pydantic.alias_generators import to_camel


class DealStatus(StrEnum):
    DRAFT = "Draft"
    AD = "Ad"
    SIGNED = "Signed"
    CANCELLED = "Cancelled"
    PICKUP_PENDING = "Pickup_Pending"
    PICKUP_EXPIRED = "Pickup_Expired"
    PICKUP_DENIED = "Pickup_Denied"
    SHIPPING_PENDING = "Shipping_Pending"
    SHIPPING_EXPIRED = "Shipping_Expired"
    SHIPPING_IN_PROGRESS = "Shipping_In_Progress"
    SHIPPING_ARRIVED = "Shipping_Arrived"
    SHIPPING_RETURNED = "Shipping_Returned"
    SHIPPING_REVIEW_DENIED = "Shipping_Review_Denied"
    REFUNDED = "Refunded"
    COMPLETED = "Completed"


class PaymentStatus(StrEnum):
    CREATED = "Created"
    PROCESSING = "Processing"
    PAYMENT_FAILED = "PaymentFailed"
    PAYMENT_CANCELLED = "PaymentCancelled"
    PAID = "Paid"
    REFUNDED = "Refunded"
    PENDING_PAYOUT = "PendingPayOut"
    PAID_OUT = "PaidOut"
    PAYOUT_FAILED = "PayoutFailed"
    PAYOUT_CANCELLED = "PayoutCancelled"


class EventKind(StrEnum):
    DEAL_STATUS = "deal.status"
    SIGNATURE_STATUS = "signature.status"
    DEAL_OFFER = "deal.offer"
    DEAL_OFFER_APPROVED = "deal.offerApproved"
    DEAL_OFFER_DENIED = "deal.offerDenied"
    PAYMENT_STATUS = "payment.status"
    DEAL_SHIPMENT = "deal.shipment"
    # Opt-in: sent only to an endpoint whose ``events`` name it.
    DEAL_MESSAGE = "deal.message"


PackageType = Literal["Small", "Medium", "Large", "XL"]
ShippingType = Literal["Carrier", "Pickup"]
SignatureStatus = Literal["Initiated", "Failed", "Completed"]
SignatureType = Literal["Seller", "Buyer"]


def from_millis(value: int) -> datetime:
    """A timestamp of the API (milliseconds since the epoch) as an aware UTC datetime."""
    return datetime.fromtimestamp(value / 1000, tz=UTC)


class Response(BaseModel):
    """The base of every answer: unknown fields are kept, never refused."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel)


class Request(BaseModel):
    """The base of every request body: the service refuses unknown fields, and so do these."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)

    def body(self) -> dict[str, Any]:
        """The JSON body: the interface's field names, fields left unset omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- deals -------------------------------------------------------------------------------------


class Seller(Response):
    firstname: str | None = None
    lastname: str | None = None
    phone: str | None = None
    email: str | None = None
    address: str | None = None
    postcode: str | None = None
    town: str | None = None


class SellerIn(Request):
    """The seller's details; ``email`` is needed for offer links."""

    firstname: str | None = None
    lastname: str | None = None
    phone: str | None = None
    email: str | None = None
    address: str | None = None
    postcode: str | None = None
    town: str | None = None


class AllowedActions(Response):
    """What the caller may do to a deal now: the statuses it may move it to, and whether it may
    create an offer link (the service derives both from its lifecycle)."""

    change_status: list[DealStatus] = Field(default_factory=list)
    create_offer_link: bool = False


# What a carrier may tell about a parcel: the kinds an integration reports, and those only a
# carrier the service booked the parcel at tells.
ShipmentNews = Literal[
    "booked",
    "picked_up",
    "in_transit",
    "ready_for_pickup",
    "delivered",
    "returned",
    "lost",
    "damaged",
]


class Shipment(Response):
    """Who follows a deal's parcel ("carrier": the service booked it; "integration": you report
    it), its tracking and the carrier's last event."""

    source: Literal["carrier", "integration"]
    carrier: str | None = None
    tracking_number: str | None = None
    tracking_url: str | None = None
    last_event: ShipmentNews | None = None
    last_event_at: datetime | None = None


class Deal(Response):
    """A deal as every deal endpoint answers it."""

    id: uuid.UUID
    name: str | None
    description: str | None
    price: float | None
    status: DealStatus
    seller: Seller | None
    url: str
    images: list[str] = Field(default_factory=list)
    package_type: PackageType | None = None
    currency: str | None = None
    payment_status: PaymentStatus | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    allowed_actions: AllowedActions | None = None
    # The approved offer's shipping price, and who pays it ("buyer": on top of the price;
    # "seller": from the payout); None without one.
    shipping_price: float | None = None
    shipping_paid_by: str | None = None
    shipment: Shipment | None = None


class DealCreate(Request):
    name: str | None = None
    description: str | None = None
    price: float | None = None
    images: list[str] | None = None
    package_type: PackageType | None = None
    seller: SellerIn | None = None


class PageInfo(Response):
    page_size: int
    page_number: int
    total_pages: int
    total_count: int
    # The page parameters not used as sent (out of range, not an integer): the service reads
    # them as the nearest valid value, which ``page_number`` and ``page_size`` give.
    adjusted: list[Literal["page", "pageSize"]] = Field(default_factory=list)


class DealPage(Response):
    page: PageInfo
    items: list[Deal]


class StatusChange(Request):
    status: DealStatus


ShipmentEventType = Literal["picked_up", "in_transit", "delivered", "returned"]


class ShipmentEventIn(Request):
    """A carrier event about a deal's parcel (``occurred_at`` in milliseconds since the epoch:
    at most 90 days ago, at most one hour ahead)."""

    type: ShipmentEventType
    carrier: str = Field(min_length=1, max_length=100)
    tracking_number: str = Field(min_length=1, max_length=100)
    occurred_at: int


# --- offer links -------------------------------------------------------------------------------


class OfferBuyer(Request):
    name: str | None = None
    email: str | None = None


class OfferLinkCreate(Request):
    price: float | None = None
    buyer: OfferBuyer | None = None
    buyer_redirect_url: str | None = None
    seller_redirect_url: str | None = None


class OfferLink(Response):
    url: str

    @property
    def offer(self) -> str:
        """The offer reference: the link's ``offer`` query parameter (the ``offer_link_id`` of
        each offer made through it)."""
        return self.url.rsplit("offer=", 1)[1]


class OfferStatus(StrEnum):
    PENDING = "Pending"
    APPROVED = "Approved"
    DENIED = "Denied"
    WITHDRAWN = "Withdrawn"
    LAPSED = "Lapsed"


class Offer(Response):
    """A buyer's offer on a deal, as ``list_offers`` answers it."""

    id: uuid.UUID
    deal_id: uuid.UUID
    offer_link_id: uuid.UUID | None = None
    price: float
    shipping_type: ShippingType
    buyer_name: str | None = None
    buyer_email: str
    status: OfferStatus
    created_at: datetime
    decided_at: datetime | None = None


class OfferPage(Response):
    page: PageInfo
    items: list[Offer]


# --- conversations ---------------------------------------------------------------------------

MessageWarning = Literal["phone", "email", "link", "payment"]


class ConversationMessage(Response):
    """A message of a deal's conversation; one support hid has ``hidden`` and no ``text``."""

    id: uuid.UUID
    from_: Literal["seller", "buyer"] = Field(alias="from")
    text: str | None = None
    sent_at: datetime
    warnings: list[MessageWarning]
    reported: bool
    hidden: bool


class Conversation(Response):
    """The seller and the buyer of one offer link, with their messages oldest first."""

    id: uuid.UUID
    offer_link_id: uuid.UUID
    buyer_name: str | None = None
    created_at: datetime
    last_message_at: datetime
    seller_blocked: bool
    buyer_blocked: bool
    messages: list[ConversationMessage]


class ConversationPage(Response):
    page: PageInfo
    items: list[Conversation]


# --- the lifecycle -----------------------------------------------------------------------------
# Triggers, actors and effects are read as plain strings: the service may name new ones.


class StatusInfo(Response):
    status: DealStatus
    final: bool
    dispute: bool
    takes_offers: bool


class DeadlineInfo(Response):
    effect: str
    fires: str
    seconds: int
    duration: str


class Transition(Response):
    from_: list[DealStatus] = Field(alias="from")
    trigger: str
    to: DealStatus
    actors: list[str]
    deadline: DeadlineInfo | None = None
    effects: list[str]


class ActorInfo(Response):
    actor: str
    description: str


class EffectInfo(Response):
    effect: str
    description: str


class Lifecycle(Response):
    """The deal lifecycle as the service runs it: every status, every transition (from which
    statuses, on what trigger, by whom, with which deadline and effects)."""

    initial_status: DealStatus
    statuses: list[StatusInfo]
    transitions: list[Transition]
    actors: list[ActorInfo]
    effects: list[EffectInfo]

    def status(self, status: DealStatus | str) -> StatusInfo:
        """What the lifecycle says about one status."""
        return next(s for s in self.statuses if s.status == status)

    def transitions_from(self, status: DealStatus | str) -> list[Transition]:
        """The transitions that can leave ``status``."""
        return [t for t in self.transitions if status in t.from_]


# --- events ------------------------------------------------------------------------------------


class DealStatusData(Response):
    deal_id: uuid.UUID
    status: DealStatus
    status_date: int


class SignatureStatusData(Response):
    deal_id: uuid.UUID
    user_id: uuid.UUID | None = None
    status: SignatureStatus
    signature_type: SignatureType
    signature_date: int


class DealOfferData(Response):
    id: uuid.UUID
    deal_id: uuid.UUID
    shipping_type: ShippingType
    package_type: PackageType | None = None
    buyer_name: str | None = None
    buyer_email: str | None = None
    price: float | None = None
    buyer_redirect_url: str | None = None
    seller_redirect_url: str | None = None
    date: int
    offer_link_id: uuid.UUID | None = Field(
        default=None,
        description="The ``offer`` reference of the link the offer came through (``OfferLink.offer``"
        "); None for an offer made without a link, the sandbox's.",
    )


class OfferDecisionData(Response):
    id: uuid.UUID
    deal_id: uuid.UUID
    date: int


class PaymentStatusData(Response):
    deal_id: uuid.UUID
    seller_user_id: uuid.UUID | None = None
    buyer_user_id: uuid.UUID | None = None
    status: PaymentStatus
    amount: Decimal = Field(description="What the buyer pays, e.g. Decimal('4500.00').")
    fee: Decimal = Field(description="The service's fee; the seller is paid amount - fee.")
    currency: str


class DealShipmentData(Response):
    deal_id: uuid.UUID
    type: ShipmentNews
    carrier: str
    tracking_number: str
    occurred_at: int
    description: str | None = None
    location: str | None = None
    pickup_point: str | None = None


class DealMessageData(Response):
    """A message arrived (not its text: read it with ``list_conversations``)."""

    deal_id: uuid.UUID
    conversation_id: uuid.UUID
    offer_link_id: uuid.UUID
    message_id: uuid.UUID
    from_: Literal["seller", "buyer"] = Field(alias="from")
    warnings: list[MessageWarning]
    sent_at: int


class BaseEvent(Response):
    """The envelope every event shares."""

    id: uuid.UUID
    event: str
    api_version: str = Field(alias="api_version")
    created: int
    # An event about a deal: its place among that deal's events (1, 2, ...), to apply a deal's
    # events in order whatever order they were delivered in.
    deal_sequence: int | None = Field(default=None, alias="deal_sequence")

    @property
    def created_at(self) -> datetime:
        return from_millis(self.created)


class DealStatusEvent(BaseEvent):
    event: Literal["deal.status"]
    data: DealStatusData


class SignatureStatusEvent(BaseEvent):
    event: Literal["signature.status"]
    data: SignatureStatusData


class DealOfferEvent(BaseEvent):
    event: Literal["deal.offer"]
    data: DealOfferData


class DealOfferApprovedEvent(BaseEvent):
    event: Literal["deal.offerApproved"]
    data: OfferDecisionData


class DealOfferDeniedEvent(BaseEvent):
    event: Literal["deal.offerDenied"]
    data: OfferDecisionData


class PaymentStatusEvent(BaseEvent):
    event: Literal["payment.status"]
    data: PaymentStatusData


class DealShipmentEvent(BaseEvent):
    event: Literal["deal.shipment"]
    data: DealShipmentData


class DealMessageEvent(BaseEvent):
    event: Literal["deal.message"]
    data: DealMessageData


class OtherEvent(BaseEvent):
    """A kind this client does not know (e.g. ``webhook.test``, or one added later)."""

    data: dict[str, Any]


_KNOWN = frozenset(k.value for k in EventKind)


def _event_tag(value: Any) -> str:
    kind = value.get("event") if isinstance(value, dict) else getattr(value, "event", None)
    return kind if kind in _KNOWN else "other"


Event = Annotated[
    Annotated[DealStatusEvent, Tag("deal.status")]
    | Annotated[SignatureStatusEvent, Tag("signature.status")]
    | Annotated[DealOfferEvent, Tag("deal.offer")]
    | Annotated[DealOfferApprovedEvent, Tag("deal.offerApproved")]
    | Annotated[DealOfferDeniedEvent, Tag("deal.offerDenied")]
    | Annotated[PaymentStatusEvent, Tag("payment.status")]
    | Annotated[DealShipmentEvent, Tag("deal.shipment")]
    | Annotated[DealMessageEvent, Tag("deal.message")]
    | Annotated[OtherEvent, Tag("other")],
    Discriminator(_event_tag),
]
"""Any event: one class per kind of the interface, ``OtherEvent`` for the rest."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(value: dict[str, Any] | str | bytes) -> Event:
    """An envelope (parsed JSON, or its text) as the typed event of its kind."""
    if isinstance(value, str | bytes):
        return EVENT_ADAPTER.validate_json(value)
    return EVENT_ADAPTER.validate_python(value)


class EventPage(Response):
    page: PageInfo
    items: list[Event]


# --- webhook endpoints -------------------------------------------------------------------------


class WebhookEndpoint(Response):
    """A URL the service delivers your events to; ``events`` None means every kind."""

    id: uuid.UUID
    url: str
    events: list[str] | None
    description: str | None
    enabled: bool
    disabled_reason: str | None = None
    failing_since: datetime | None = None
    created_at: datetime
    updated_at: datetime


class WebhookEndpointList(Response):
    items: list[WebhookEndpoint]


class WebhookEndpointCreate(Request):
    url: str
    events: list[EventKind] | None = Field(default=None, min_length=1)
    description: str | None = None
    enabled: bool = True


class WebhookEndpointUpdate(Request):
    url: str | None = None
    events: list[EventKind] | None = Field(default=None, min_length=1)
    description: str | None = None
    enabled: bool | None = None


class DeliveryAttempt(Response):
    """One try at delivering an event to an endpoint."""

    id: uuid.UUID
    delivery_id: uuid.UUID
    event_id: uuid.UUID
    attempted_at: datetime
    success: bool
    status_code: int | None = None
    latency_ms: int
    error: str | None = None
    response_excerpt: str | None = None


class DeliveryAttemptPage(Response):
    page: PageInfo
    items: list[DeliveryAttempt]


class WebhookTestSent(Response):
    """The ``webhook.test`` event sent to an endpoint (its id is the ``webhook-id``)."""

    event_id: uuid.UUID


class Queued(Response):
    """How many deliveries a resend or a recovery queued."""

    queued: int


class RecoverRequest(Request):
    since: int = Field(ge=0)


class ResendRequest(Request):
    endpoint_id: uuid.UUID | None = None


# --- sandbox -----------------------------------------------------------------------------------


class TriggerResult(Response):
    """What a sandbox trigger did: the events it emitted, in order, and the deal after it."""

    events: list[Event]
    deal: Deal | None


ScenarioName = Literal[
    "carrier-completed",
    "carrier-review-period-ends",
    "carrier-returned-refunded",
    "pickup-completed",
    "pickup-expired-refunded",
    "review-denied-resolved-for-seller",
    "review-denied-resolved-for-buyer",
    "payment-failed-then-paid",
    "cancelled-with-pending-offer",
]


class Scenario(Response):
    """A named path a sandbox scenario drives a deal down."""

    name: str
    description: str
    shipping_type: ShippingType | None = None
    starts_from: DealStatus


class ScenarioList(Response):
    items: list[Scenario]


class ScenarioRun(Request):
    scenario: ScenarioName
    deal_id: uuid.UUID | None = None


class ScenarioResult(Response):
    """What a scenario did: the deal's events it emitted, in order, and the deal at the end."""

    scenario: str
    deal_id: uuid.UUID
    status: DealStatus
    payment_status: PaymentStatus | None = None
    events: list[Event]
    deal: Deal


class Pong(Response):
    status: str


class ClockAdvanced(Response):
    clock_offset_seconds: int
    timers_moved: int
    timers_fired: int


class DealClockAdvanced(Response):
    """What moving one deal's own sandbox clock did."""

    deal_id: uuid.UUID
    clock_offset_seconds: int
    integration_clock_offset_seconds: int
    total_offset_seconds: int
    timers_moved: int
    timers_fired: int


class DealClockTimer(Response):
    trigger: str
    due_at: datetime
    due_in_seconds: int
    remind_at: datetime | None = None


class DealClock(Response):
    """A deal's own sandbox clock: its offsets, its time and its pending deadlines."""

    deal_id: uuid.UUID
    clock_offset_seconds: int
    integration_clock_offset_seconds: int
    total_offset_seconds: int
    now: datetime
    clock_time: datetime
    decide_by: datetime | None = None
    timers: list[DealClockTimer]


class WebhookSecretRotated(Response):
    webhook_secret: str
    previous_secret_expires_at: datetime | None


StatusClass = Literal["2xx", "4xx", "5xx"]


class ApiRequest(Response):
    """One of the integration's API requests, as its request log keeps it."""

    method: str
    route: str
    deal_id: uuid.UUID | None = None
    status: int
    request_id: str
    at: datetime
    duration_ms: float


class ApiRequestPage(Response):
    page: PageInfo
    items: list[ApiRequest]


class Token(Response):
    """An OAuth 2.0 access token (RFC 6749 section 5.1)."""

    access_token: str = Field(alias="access_token")
    token_type: str = Field(alias="token_type")
    expires_in: int = Field(alias="expires_in")
    scope: str | None = None


class SignatureStatusTrigger(Request):
    deal_id: uuid.UUID | None = None
    user_id: uuid.UUID | None = None
    status: SignatureStatus | None = None
    signature_type: SignatureType | None = None
    signature_date: int | None = None


class DealOfferTrigger(Request):
    deal_id: uuid.UUID | None = None
    price: float | None = None
    shipping_type: ShippingType | None = None
    buyer: OfferBuyer | None = None
    buyer_redirect_url: str | None = None
    seller_redirect_url: str | None = None


class OfferDecisionTrigger(Request):
    id: uuid.UUID | None = Field(default=None, description="The offer; default the oldest pending.")
    deal_id: uuid.UUID | None = None
    date: int | None = None


class PaymentStatusTrigger(Request):
    deal_id: uuid.UUID | None = None
    seller_user_id: uuid.UUID | None = None
    buyer_user_id: uuid.UUID | None = None
    status: PaymentStatus | None = None
    amount: Decimal | None = None
    fee: Decimal | None = None
    currency: str | None = None

    @field_serializer("amount", "fee")
    def _two_decimals(self, value: Decimal | None) -> str | None:
        # The service takes amounts as strings with two decimals, as the events carry them.
        return None if value is None else f"{value:.2f}"


class DealStatusTrigger(Request):
    deal_id: uuid.UUID | None = None
    status: DealStatus | None = None
    status_date: int | None = None


class ParcelEventTrigger(Request):
    deal_id: uuid.UUID
    type: Literal[
        "picked_up",
        "in_transit",
        "ready_for_pickup",
        "delivered",
        "returned",
        "lost",
        "damaged",
    ]
