"""The statuses the interface names, a deal's and a payment's: plain values that every layer may
name (an event's payload, a page, a command). What moves a status, and where to, stays with its
owner: a deal's in the lifecycle table (``deals.lifecycle``), a payment's in
``payments.service.PAYMENT_TRANSITIONS``."""

from enum import StrEnum


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
