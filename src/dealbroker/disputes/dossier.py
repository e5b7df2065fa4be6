"""Everything about one deal, for the operator's support work (``dealbroker deals show``):
status history, offers, deadlines, payments and provider calls, the payout account (only its
last digits) and its audit trail, the parties' eID flows (signatures and payout confirmations,
with why one failed: another identity than the seller's is how a refused payout change shows),
events with their deliveries, messages, the conversations between the parties (every message,
those support hid marked, the approved buyer's conversation first), and the dispute's evidence
(statements, and photos described without their bytes), which stays apart from the
conversations: a statement is said to us, a message to the other party. For a parcel its
carrier lost, the dispute names what the loss is claimed from the carrier with."""

import uuid
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.conversations import service as conversations
from dealbroker.deals import flows
from dealbroker.deals import repository as deals
from dealbroker.deals.models import Deal
from dealbroker.events import repository as events
from dealbroker.evidence import service as evidence
from dealbroker.notifications import repository as messages
from dealbroker.offers import repository as offers
from dealbroker.offers.models import Offer, OfferStatus
from dealbroker.parcels import service as parcels
from dealbroker.payments import repository as payments
from dealbroker.signatures import repository as eid_flows


async def dossier(session: AsyncSession, deal_id: uuid.UUID) -> dict[str, Any]:
    deal = await flows.operator_view(session, deal_id)
    account = await payments.payout_account(session, deal.id)
    found = await evidence.of_deal(session, deal.id)
    made = await offers.offers_of(session, deal.id)
    return {
        "deal": {
            "id": deal.id,
            "integrationId": deal.integration_id,
            "name": deal.name,
            "description": deal.description,
            "packageType": deal.package_type,
            "status": deal.status,
            "paymentStatus": deal.payment_status,
            "priceMinor": deal.price_minor,
            "currency": deal.currency,
            "shippingType": deal.shipping_type,
            "seller": deal.seller,
            "buyerContact": deal.buyer_contact,
            "shipment": deal.shipment,
            "disputeReason": deal.dispute_reason,
            "disputeOpenedBy": await flows.dispute_opened_by(session, deal),
            # Disputes decided on evidence: the date we decide by, the decision's reason, and a
            # return then refund under way (address, then the buyer's carrier and tracking).
            "decideBy": deal.decide_by,
            "decisionReason": deal.decision_reason,
            "disputeReturn": deal.dispute_return,
            # A parcel its carrier lost: what the loss is claimed from the carrier with.
            "carrierClaim": await parcels.lost_claim(session, deal),
            "createdAt": deal.created_at,
            "updatedAt": deal.updated_at,
        },
        "history": [
            {
                "at": h.created_at,
                "from": h.from_status,
                "to": h.to_status,
                "trigger": h.trigger,
                "actor": h.actor,
            }
            for h in await deals.history(session, deal.id)
        ],
        "offers": [
            {
                "id": o.id,
                "status": o.status,
                "priceMinor": o.price_minor,
                "shippingType": o.shipping_type,
                "buyer": o.buyer_name,
                "email": o.buyer_email,
                "at": o.created_at,
            }
            for o in made
        ],
        "deadlines": [
            {
                "trigger": t.trigger,
                "dueAt": t.due_at,
                "firedAt": t.fired_at,
                "outcome": t.outcome,
                "remindAt": t.remind_at,
                "remindedAt": t.reminded_at,
            }
            for t in await deals.timers_of(session, deal.id)
        ],
        "payments": [
            {
                "id": p.id,
                "status": p.status,
                "amountMinor": p.amount_minor,
                "feeMinor": p.fee_minor,
                "shippingMinor": p.shipping_minor,
                "payoutMinor": p.payout_minor,
                "refundedMinor": p.refunded_minor,
                "paidOutMinor": p.paid_out_minor,
                "method": p.method,
                "provider": p.provider,
                "at": p.created_at,
            }
            for p in await payments.payments_of(session, deal.id)
        ],
        "providerCalls": [
            {
                "id": c.id,
                "kind": c.kind,
                "status": c.status,
                "attempts": c.attempts,
                "error": c.error,
                "at": c.created_at,
                "finishedAt": c.finished_at,
            }
            for c in await payments.calls_of(session, deal.id)
        ],
        # Only the last digits, as on the seller's page: support never needs the whole number.
        "payoutAccount": None
        if account is None
        else {"holder": account.holder, "kind": account.kind, "ending": account.number[-4:]},
        "payoutAccountChanges": [
            {
                "status": c.status,
                "ending": c.number[-4:],
                "holder": c.holder,
                "requestedAt": c.requested_at,
                "appliedAt": c.applied_at,
            }
            for c in await payments.account_changes(session, deal.id)
        ],
        # What the retention job keeps of each: never the national identity number, nor its hash.
        "identity": [
            {
                "party": f.signature_type,
                "purpose": f.purpose,
                "status": f.status,
                "startedAt": f.started_at,
                "finishedAt": f.finished_at,
                "failure": f.failure,
                "issuer": f.issuer,
                "acr": f.acr,
                "name": f.name,
            }
            for f in await eid_flows.of_deal(session, deal.id)
        ],
        "events": [
            {
                "id": e.id,
                "kind": e.kind,
                "data": orjson.loads(e.payload)["data"],
                "at": e.created_at,
                "deliveries": [
                    {
                        "endpointId": d.endpoint_id,
                        "status": d.status,
                        "attempts": d.attempts,
                        "lastStatusCode": d.last_status_code,
                        "lastError": d.last_error,
                    }
                    for d in sent
                ],
            }
            for e, sent in await events.events_of_deal(session, deal.id)
        ],
        "messages": [
            {
                "kind": m.kind,
                "to": m.to_email,
                "subject": m.subject,
                "at": m.created_at,
                "sentAt": m.sent_at,
            }
            for m in await messages.of_deal(session, deal.id)
        ],
        "conversations": await _conversations(session, deal.id, deal.buyer_user_id, made),
        "evidence": {
            "statements": [
                {"party": s.party, "at": s.created_at, "text": s.text} for s in found.statements
            ],
            # ``dealbroker disputes photo DEAL_ID PHOTO_ID --out FILE`` saves one.
            "photos": [
                {
                    "id": p.id,
                    "party": p.party,
                    "at": p.created_at,
                    "contentType": p.content_type,
                    "width": p.width,
                    "height": p.height,
                    "bytes": p.byte_size,
                    "sha256": p.sha256,
                    "storage": p.storage,
                }
                for p in found.photos
            ],
        },
    }


async def conversations_of(session: AsyncSession, deal: Deal) -> list[dict[str, Any]]:
    """The deal's conversations as the dossier has them (support's queue shows one of them)."""
    made = await offers.offers_of(session, deal.id)
    return await _conversations(session, deal.id, deal.buyer_user_id, made)


async def _conversations(
    session: AsyncSession,
    deal_id: uuid.UUID,
    buyer_user_id: uuid.UUID | None,
    made: list[Offer],
) -> list[dict[str, Any]]:
    """Every conversation of the deal with all its messages, hidden ones too (marked, with who
    hid them): the approved buyer's first, then the one with the latest message first. Each
    names its buyer by the latest offer made through its link (none: a question only)."""
    found = await conversations.of_deal(session, deal_id)
    texts = await conversations.messages_of(session, [c.id for c in found], hidden=True)
    latest: dict[uuid.UUID, Offer] = {}
    for offer in made:  # oldest first: the last one of a link stays
        if offer.offer_link_id is not None:
            latest[offer.offer_link_id] = offer
    approved = next(
        (
            o.offer_link_id
            for o in made
            if o.status == OfferStatus.APPROVED and o.buyer_user_id == buyer_user_id
        ),
        None,
    )
    ordered = sorted(found, key=lambda c: c.offer_link_id != approved)  # stable: rest as listed
    shown = []
    for c in ordered:
        last = latest.get(c.offer_link_id)
        shown.append(
            {
                "id": c.id,
                "offerLinkId": c.offer_link_id,
                "approvedBuyer": approved is not None and c.offer_link_id == approved,
                "buyer": None
                if last is None
                else {"name": last.buyer_name, "email": last.buyer_email},
                "createdAt": c.created_at,
                "lastMessageAt": c.last_message_at,
                "sellerBlockedAt": c.seller_blocked_at,
                "buyerBlockedAt": c.buyer_blocked_at,
                "messages": [
                    {
                        "id": m.id,
                        "author": m.author,
                        "at": m.created_at,
                        "body": m.body,
                        "warnings": m.warnings,
                        "report": None
                        if m.reported_at is None
                        else {
                            "at": m.reported_at,
                            "by": m.reported_by,
                            "reason": m.report_reason,
                            "closedAt": m.report_closed_at,
                        },
                        "hidden": None
                        if m.hidden_at is None
                        else {"at": m.hidden_at, "by": m.hidden_by},
                    }
                    for m in texts[c.id]
                ],
            }
        )
    return shown
