"""A typed Python client for the dealbroker integration API, sync and async, with webhook
verification into typed events.

    from dealbroker_client import DealbrokerClient

    with DealbrokerClient(BASE_URL, CLIENT_ID, CLIENT_SECRET) as client:
        deal = client.create_deal(name="Road bike", price=4500, seller={"email": "k@example.com"})
"""

from dealbroker_client._core import RetryPolicy
from dealbroker_client.aio import AsyncDealbrokerClient
from dealbroker_client.client import DealbrokerClient
from dealbroker_client.errors import (
    APIConnectionError,
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    DealbrokerError,
    FieldProblem,
    IdempotencyKeyReusedError,
    IllegalTransitionError,
    InvalidInputError,
    NotFoundError,
    OAuthError,
    PermissionDeniedError,
    RateLimitError,
    ServerError,
    WebhookVerificationError,
)
from dealbroker_client.models import (
    AllowedActions,
    Deal,
    DealOfferApprovedEvent,
    DealOfferDeniedEvent,
    DealOfferEvent,
    DealPage,
    DealShipmentEvent,
    DealStatus,
    DealStatusEvent,
    Event,
    EventKind,
    EventPage,
    OfferBuyer,
    OfferLink,
    OtherEvent,
    PaymentStatus,
    PaymentStatusEvent,
    SellerIn,
    SignatureStatusEvent,
    TriggerResult,
    parse_event,
)
from dealbroker_client.webhooks import WebhookVerifier, verify_webhook

__all__ = [
    "APIConnectionError",
    "AllowedActions",
    "APIError",
    "AsyncDealbrokerClient",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "Deal",
    "DealOfferApprovedEvent",
    "DealOfferDeniedEvent",
    "DealOfferEvent",
    "DealPage",
    "DealShipmentEvent",
    "DealStatus",
    "DealStatusEvent",
    "DealbrokerClient",
    "DealbrokerError",
    "Event",
    "EventKind",
    "EventPage",
    "FieldProblem",
    "IdempotencyKeyReusedError",
    "IllegalTransitionError",
    "InvalidInputError",
    "NotFoundError",
    "OAuthError",
    "OfferBuyer",
    "OfferLink",
    "OtherEvent",
    "PaymentStatus",
    "PaymentStatusEvent",
    "PermissionDeniedError",
    "RateLimitError",
    "RetryPolicy",
    "SellerIn",
    "ServerError",
    "SignatureStatusEvent",
    "TriggerResult",
    "WebhookVerificationError",
    "WebhookVerifier",
    "parse_event",
    "verify_webhook",
]
