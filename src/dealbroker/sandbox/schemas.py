"""Bodies of the sandbox triggers. Those the interface shows are kept to the letter; the others
mirror the data of the event they simulate. Every field is optional: without a ``dealId`` the
trigger sends an event with dummy data of the right shape."""

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.config import JsonDict

from dealbroker.core.statuses import DealStatus, PaymentStatus
from dealbroker.core.validation import (
    AmountString,
    Email,
    HttpUrl,
    Millis,
    Price,
    RequestModel,
    WholeInt,
    examples,
    text,
)
from dealbroker.sandbox.scenarios import SCENARIOS

# JSON has no uuid type: these fields take the string form (lax) while the rest stay strict.
UUIDField: Any = Field(default=None, strict=False)
DEAL_ID = "3f0c1f8e-8d5e-4c55-9f43-9a3d4c1a2b10"


class SignatureStatusTrigger(RequestModel):
    model_config = examples({"dealId": DEAL_ID, "status": "Completed", "signatureType": "Buyer"})

    dealId: uuid.UUID | None = UUIDField  # noqa: N815
    userId: uuid.UUID | None = UUIDField  # noqa: N815
    status: Literal["Initiated", "Failed", "Completed"] | None = None
    signatureType: Literal["Seller", "Buyer"] | None = None  # noqa: N815
    signatureDate: Millis | None = None  # noqa: N815


class TriggerBuyer(RequestModel):
    name: str | None = text(200)
    email: Email | None = None


class DealOfferTrigger(RequestModel):
    model_config = examples(
        {
            "dealId": DEAL_ID,
            "price": 4200,
            "shippingType": "Carrier",
            "buyer": {"name": "Ola Nordmann", "email": "ola@example.com"},
        }
    )

    dealId: uuid.UUID | None = UUIDField  # noqa: N815
    price: Price | None = None
    shippingType: Literal["Carrier", "Pickup"] | None = None  # noqa: N815
    buyer: TriggerBuyer | None = None
    buyerRedirectUrl: HttpUrl | None = None  # noqa: N815
    sellerRedirectUrl: HttpUrl | None = None  # noqa: N815


class OfferDecisionTrigger(RequestModel):
    """Mirrors ``deal.offerApproved`` / ``deal.offerDenied`` data: ``id`` is the offer's id
    (default: the deal's oldest pending offer)."""

    model_config = examples({"dealId": DEAL_ID})

    id: uuid.UUID | None = UUIDField
    dealId: uuid.UUID | None = UUIDField  # noqa: N815
    date: Millis | None = None


class PaymentStatusTrigger(RequestModel):
    """Mirrors ``payment.status`` data. With a ``dealId``, amount, fee, currency and user ids
    come from the deal; without one, the given values (or dummies) are sent."""

    model_config = examples({"dealId": DEAL_ID, "status": "Paid"})

    dealId: uuid.UUID | None = UUIDField  # noqa: N815
    sellerUserId: uuid.UUID | None = UUIDField  # noqa: N815
    buyerUserId: uuid.UUID | None = UUIDField  # noqa: N815
    status: PaymentStatus | None = Field(default=None, strict=False)
    amount: AmountString | None = None
    fee: AmountString | None = None
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$")


class DealStatusTrigger(RequestModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"dealId": DEAL_ID, "status": "Ad"}],
            # With a dealId the trigger moves that deal, so it needs the status to move it to.
            "if": {"required": ["dealId"], "properties": {"dealId": {"type": "string"}}},
            "then": {"required": ["status"], "properties": {"status": {"type": "string"}}},
        }
    )

    dealId: uuid.UUID | None = UUIDField  # noqa: N815
    status: DealStatus | None = Field(default=None, strict=False)
    statusDate: Millis | None = None  # noqa: N815


class ParcelEventTrigger(RequestModel):
    """The sandbox's carrier tells about the deal's parcel (``DEALBROKER_CARRIER=simulated``)."""

    model_config = examples({"dealId": DEAL_ID, "type": "picked_up"})

    dealId: uuid.UUID | None = UUIDField  # noqa: N815
    type: Literal[
        "picked_up",
        "in_transit",
        "ready_for_pickup",
        "delivered",
        "returned",
        "lost",
        "damaged",
    ] = Field(
        default="picked_up",
        description="What the carrier says: as Bring's Event Cast pushes it, through the same "
        "handler (docs/shipping.md says what each does to the deal).",
    )


def _status_event(status: str) -> JsonDict:
    """The ``deal.status`` envelope an example shows, the deal gone to ``status``."""
    data: JsonDict = {"dealId": DEAL_ID, "status": status, "statusDate": 1795000000000}
    return {
        "id": "9b2f…",
        "event": "deal.status",
        "api_version": "v1",
        "created": 1795000000000,
        "data": data,
    }


class TriggerResult(BaseModel):
    """What a trigger did: the events it emitted (envelopes as sent) and the deal after it."""

    model_config = examples(
        {
            "events": [_status_event("Ad")],
            "deal": {"id": DEAL_ID, "status": "Ad", "…": "…"},
        }
    )

    events: list[dict[str, Any]]
    deal: dict[str, Any] | None


class ClockAdvance(RequestModel):
    model_config = examples({"seconds": 604800})

    seconds: WholeInt = Field(
        ge=1, le=366 * 24 * 3600, description="How far to move the clock ahead."
    )


class ClockAdvanced(BaseModel):
    model_config = examples({"clockOffsetSeconds": 604800, "timersMoved": 1, "timersFired": 1})

    clockOffsetSeconds: int  # noqa: N815
    timersMoved: int  # noqa: N815
    timersFired: int  # noqa: N815


DEAL_CLOCK_FIELDS: dict[str, str] = {
    "clockOffsetSeconds": "How far this deal's own clock has been moved ahead, in seconds.",
    "integrationClockOffsetSeconds": "How far your integration's clock has been moved ahead "
    "(`POST /sandbox/v1/clock/advance`), in seconds: it moves every deal of yours.",
    "totalOffsetSeconds": "The two added up: how far ahead the deal's time is.",
}


# A deal's clock offsets, as every answer about a deal's clock starts.
_OFFSETS_EXAMPLE: JsonDict = {
    "dealId": DEAL_ID,
    "clockOffsetSeconds": 172800,
    "integrationClockOffsetSeconds": 86400,
    "totalOffsetSeconds": 259200,
}


class _DealOffsets(BaseModel):
    """The fields every answer about a deal's clock starts with."""

    dealId: uuid.UUID  # noqa: N815
    clockOffsetSeconds: int = Field(description=DEAL_CLOCK_FIELDS["clockOffsetSeconds"])  # noqa: N815
    integrationClockOffsetSeconds: int = Field(  # noqa: N815
        description=DEAL_CLOCK_FIELDS["integrationClockOffsetSeconds"]
    )
    totalOffsetSeconds: int = Field(description=DEAL_CLOCK_FIELDS["totalOffsetSeconds"])  # noqa: N815


class DealClockAdvanced(_DealOffsets):
    """What moving one deal's clock did."""

    model_config = examples({**_OFFSETS_EXAMPLE, "timersMoved": 1, "timersFired": 0})

    timersMoved: int = Field(description="The deal's pending deadlines brought closer.")  # noqa: N815
    timersFired: int = Field(  # noqa: N815
        description="The deal's deadlines that fell due and fired during this call."
    )


class DealClockTimer(BaseModel):
    trigger: str = Field(description="The lifecycle trigger it fires (`pickup_expired`, ...).")
    dueAt: datetime = Field(  # noqa: N815
        description="When it fires, as the deal's pages show it: already brought closer by "
        "the clocks' offsets."
    )
    dueInSeconds: int = Field(  # noqa: N815
        description="Seconds left until it fires (0 once due: the worker fires it at once)."
    )
    remindAt: datetime | None = Field(  # noqa: N815
        description="When the party who must act is reminded; null without a reminder."
    )


_CLOCK_EXAMPLE: JsonDict = {
    **_OFFSETS_EXAMPLE,
    "now": "2026-11-27T10:00:00Z",
    "clockTime": "2026-11-30T10:00:00Z",
    "decideBy": None,
    "timers": [
        {
            "trigger": "pickup_expired",
            "dueAt": "2026-12-01T10:00:00Z",
            "dueInSeconds": 345600,
            "remindAt": "2026-11-30T10:00:00Z",
        }
    ],
}


class DealClock(_DealOffsets):
    """A deal's test clock: its offsets and what is pending on it."""

    model_config = examples(_CLOCK_EXAMPLE)

    now: datetime = Field(
        description="The real time, which the deal's deadlines (`dueAt`, `decideBy`) are "
        "compared with: moving a clock brings the deadlines closer rather than moving this."
    )
    clockTime: datetime = Field(  # noqa: N815
        description="The deal's time: `now` plus `totalOffsetSeconds`."
    )
    decideBy: datetime | None = Field(  # noqa: N815
        description="An open dispute's decision date (brought closer with the timers); null "
        "outside a dispute."
    )
    timers: list[DealClockTimer] = Field(
        description="The deal's pending deadlines, the soonest first."
    )


class ScenarioRun(RequestModel):
    model_config = examples(
        {"scenario": "carrier-returned-refunded"},
        {"scenario": "pickup-completed", "dealId": DEAL_ID},
    )

    scenario: str = Field(
        description="The scenario's name (see `GET /sandbox/v1/scenarios`).",
        json_schema_extra={"enum": list(SCENARIOS)},
    )
    dealId: uuid.UUID | None = Field(  # noqa: N815
        default=None,
        strict=False,
        description="Your deal to drive down the path; without it a new sandbox deal is made.",
    )

    @field_validator("scenario")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in SCENARIOS:
            raise ValueError(f"unknown scenario; one of {', '.join(SCENARIOS)}")
        return name


class ScenarioResult(BaseModel):
    """What a scenario did: the events emitted for the deal (envelopes as sent), in order, and
    the deal at the end."""

    model_config = examples(
        {
            "scenario": "carrier-returned-refunded",
            "dealId": DEAL_ID,
            "status": "Refunded",
            "paymentStatus": "Refunded",
            "events": [
                _status_event("Draft"),
                {"…": "signatures, offer, payment, hand-over, return, refund"},
            ],
            "deal": {"id": DEAL_ID, "status": "Refunded", "…": "…"},
        }
    )

    scenario: str
    dealId: uuid.UUID  # noqa: N815
    status: DealStatus
    paymentStatus: str | None  # noqa: N815
    events: list[dict[str, Any]]
    deal: dict[str, Any]


class ScenarioInfo(BaseModel):
    name: str
    description: str
    shippingType: Literal["Carrier", "Pickup"] | None  # noqa: N815
    startsFrom: DealStatus  # noqa: N815


class ScenarioList(BaseModel):
    model_config = examples(
        {
            "items": [
                {
                    "name": "pickup-expired-refunded",
                    "description": "Pickup deal: 7 days pass without a handover "
                    "(Pickup_Expired); the buyer is refunded (Refunded).",
                    "shippingType": "Pickup",
                    "startsFrom": "Pickup_Pending",
                }
            ]
        }
    )

    items: list[ScenarioInfo]
