"""Telling sellers and buyers what happened, through a ``Notifier``.

The default notifier writes each message to the outbox table in the transaction of the change
it reports (so a message is never sent for a change that rolled back); the sandbox mailbox page
shows them. A real mail or SMS sender plugs in behind the same interface, reading the outbox.
"""

import uuid
from enum import StrEnum
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.core import clock, money
from dealbroker.deals.models import Deal
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers.models import Offer, OfferStatus


class Notifier(Protocol):
    async def send(
        self, session: AsyncSession, deal: Deal, kind: str, to: str, subject: str, body: str
    ) -> None: ...


class OutboxNotifier:
    async def send(
        self, session: AsyncSession, deal: Deal, kind: str, to: str, subject: str, body: str
    ) -> None:
        session.add(
            OutboxMessage(
                id=uuid.uuid4(),
                integration_id=deal.integration_id,
                deal_id=deal.id,
                kind=kind,
                to_email=to,
                subject=subject,
                body=body,
                created_at=clock.now(),
            )
        )


notifier: Notifier = OutboxNotifier()


def _title(deal: Deal) -> str:
    return deal.name or "your deal"


async def _buyer_email(session: AsyncSession, deal: Deal) -> str | None:
    """The address the winning buyer gave with their offer."""
    return await session.scalar(
        select(Offer.buyer_email).where(
            Offer.deal_id == deal.id, Offer.status == OfferStatus.APPROVED
        )
    )


def _seller_email(deal: Deal) -> str | None:
    return (deal.seller or {}).get("email")


async def offer_received(session: AsyncSession, deal: Deal, price_minor: int, buyer: str) -> None:
    if to := _seller_email(deal):
        await notifier.send(
            session,
            deal,
            "offer_received",
            to,
            f"New offer on {_title(deal)}",
            f"{buyer} offers {money.to_string(price_minor)} {deal.currency}. "
            "Open your deal page to approve or decline it.",
        )


async def offer_approved(session: AsyncSession, deal: Deal, to: str) -> None:
    await notifier.send(
        session,
        deal,
        "offer_approved",
        to,
        f"Your offer on {_title(deal)} was approved",
        "The seller approved your offer. Open your offer link to sign the deal.",
    )


async def please_pay(session: AsyncSession, deal: Deal) -> None:
    if to := await _buyer_email(session, deal):
        amount = money.to_string(deal.price_minor or 0)
        await notifier.send(
            session,
            deal,
            "please_pay",
            to,
            f"Please pay for {_title(deal)}",
            f"Both of you have signed. Pay {amount} {deal.currency} on your offer link; "
            "the money is held until you approve the item.",
        )


async def item_arrived(session: AsyncSession, deal: Deal) -> None:
    if to := await _buyer_email(session, deal):
        await notifier.send(
            session,
            deal,
            "item_arrived",
            to,
            f"{_title(deal).capitalize()} has arrived",
            "Check the item and approve it on your offer link within 24 hours; after that "
            "it counts as approved.",
        )


async def payout_sent(session: AsyncSession, deal: Deal, payout_minor: int) -> None:
    if to := _seller_email(deal):
        await notifier.send(
            session,
            deal,
            "payout_sent",
            to,
            f"You have been paid for {_title(deal)}",
            f"{money.to_string(payout_minor)} {deal.currency} is on its way to your payout "
            "account (within 5 bank days).",
        )


async def confirm_payout_account(
    session: AsyncSession, deal: Deal, last4: str, confirm_url: str
) -> None:
    if to := _seller_email(deal):
        await notifier.send(
            session,
            deal,
            "confirm_payout_account",
            to,
            f"Confirm the new payout account for {_title(deal)}",
            f"Someone asked to pay this deal's money to a new account ending {last4}. If it was "
            f"you, confirm it within 24 hours: {confirm_url} . If not, ignore this message: "
            "nothing changes without your confirmation.",
        )


async def payout_account_changed(session: AsyncSession, deal: Deal, last4: str) -> None:
    if to := _seller_email(deal):
        await notifier.send(
            session,
            deal,
            "payout_account_changed",
            to,
            f"The payout account for {_title(deal)} was changed",
            f"The money of this deal now goes to the account ending {last4}. If you did not "
            "confirm this change, contact the marketplace at once.",
        )


class Party(StrEnum):
    SELLER = "seller"
    BUYER = "buyer"


# Whom each kind of message above is written for. A mailbox shows one party's kinds only: an
# offer's email is whatever the buyer typed, and a buyer who typed the seller's address must
# still not read the seller's messages, which name every buyer and offer. A kind missing here is
# shown to no one.
KINDS_FOR: dict[Party, frozenset[str]] = {
    Party.SELLER: frozenset(
        {"offer_received", "payout_sent", "confirm_payout_account", "payout_account_changed"}
    ),
    Party.BUYER: frozenset({"offer_approved", "please_pay", "item_arrived"}),
}


async def mailbox(
    session: AsyncSession, deal_id: uuid.UUID, party: Party, email: str
) -> list[OutboxMessage]:
    """What ``party`` of the deal was sent at ``email`` (compared case-insensitively), oldest
    first."""
    return list(
        await session.scalars(
            select(OutboxMessage)
            .where(
                OutboxMessage.deal_id == deal_id,
                OutboxMessage.kind.in_(sorted(KINDS_FOR[party])),
                func.lower(OutboxMessage.to_email) == email.strip().lower(),
            )
            .order_by(OutboxMessage.created_at)
        )
    )
