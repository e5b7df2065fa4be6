"""Every table, imported in one place so that migrations and tests see the whole schema."""

from dealbroker.auth.models import AccessToken
from dealbroker.core.db import Base
from dealbroker.core.idempotency import IdempotencyKey
from dealbroker.core.ratelimit import RateLimitCounter
from dealbroker.deals.models import Deal, DealCounter, DealStatusChange, DealTimer
from dealbroker.events.models import Delivery, DeliveryAttempt, Event, WebhookEndpoint
from dealbroker.evidence.models import EvidencePhoto, EvidencePhotoData, EvidenceStatement
from dealbroker.integrations.models import InstanceSetting, Integration
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers.models import Offer, OfferLink
from dealbroker.payments.models import Payment, PayoutAccount, PayoutAccountChange, ProviderCall
from dealbroker.users.models import User

metadata = Base.metadata

__all__ = [
    "AccessToken",
    "Deal",
    "DealCounter",
    "DealStatusChange",
    "DealTimer",
    "Delivery",
    "DeliveryAttempt",
    "Event",
    "EvidencePhoto",
    "EvidencePhotoData",
    "EvidenceStatement",
    "IdempotencyKey",
    "InstanceSetting",
    "Integration",
    "Offer",
    "OfferLink",
    "OutboxMessage",
    "Payment",
    "PayoutAccount",
    "PayoutAccountChange",
    "ProviderCall",
    "RateLimitCounter",
    "User",
    "WebhookEndpoint",
    "metadata",
]
