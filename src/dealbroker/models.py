"""Every table, imported in one place so that migrations and tests see the whole schema."""

from dealbroker.audit.models import AuditRecord
from dealbroker.auth.models import AccessToken
from dealbroker.conversations.models import Conversation, ConversationMessage
from dealbroker.core.db import Base
from dealbroker.core.idempotency import IdempotencyKey
from dealbroker.core.ratelimit import RateLimitCounter
from dealbroker.deals.models import Deal, DealCounter, DealStatusChange, DealTimer
from dealbroker.disputes.models import DisputeProposal
from dealbroker.events.models import Delivery, DeliveryAttempt, Event, WebhookEndpoint
from dealbroker.evidence.models import (
    EvidencePhoto,
    EvidencePhotoData,
    EvidencePixelCharge,
    EvidenceStatement,
)
from dealbroker.integrations.models import InstanceSetting, Integration
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers.models import Offer, OfferLink
from dealbroker.operators.models import Operator, OperatorLoginLink, OperatorSession
from dealbroker.parcels.models import Parcel, ParcelEventSeen
from dealbroker.payments.models import Payment, PayoutAccount, PayoutAccountChange, ProviderCall
from dealbroker.portal.models import PortalLoginLink, PortalMember, PortalSession
from dealbroker.signatures.models import EidSignature
from dealbroker.users.models import User

metadata = Base.metadata

__all__ = [
    "AccessToken",
    "AuditRecord",
    "Conversation",
    "ConversationMessage",
    "Deal",
    "DealCounter",
    "DealStatusChange",
    "DealTimer",
    "DisputeProposal",
    "Delivery",
    "DeliveryAttempt",
    "EidSignature",
    "Event",
    "EvidencePhoto",
    "EvidencePhotoData",
    "EvidencePixelCharge",
    "EvidenceStatement",
    "IdempotencyKey",
    "InstanceSetting",
    "Integration",
    "Offer",
    "OfferLink",
    "Operator",
    "OperatorLoginLink",
    "OperatorSession",
    "OutboxMessage",
    "Parcel",
    "ParcelEventSeen",
    "Payment",
    "PortalLoginLink",
    "PortalMember",
    "PortalSession",
    "PayoutAccount",
    "PayoutAccountChange",
    "ProviderCall",
    "RateLimitCounter",
    "User",
    "WebhookEndpoint",
    "metadata",
]
