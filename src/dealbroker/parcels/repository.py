"""Queries on parcels and the carrier events taken."""

import uuid
from datetime import datetime

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.parcels.models import BOOKED, BOOKING, CANCELLING, Parcel, ParcelEventSeen


def add(session: AsyncSession, parcel: Parcel) -> None:
    session.add(parcel)


async def of_deal(session: AsyncSession, deal_id: uuid.UUID) -> list[Parcel]:
    """The deal's parcels, oldest first."""
    query = select(Parcel).where(Parcel.deal_id == deal_id).order_by(Parcel.created_at, Parcel.id)
    return list(await session.scalars(query))


async def by_id(session: AsyncSession, parcel_id: uuid.UUID) -> Parcel | None:
    return await session.get(Parcel, parcel_id)


async def for_update(session: AsyncSession, parcel_id: uuid.UUID) -> Parcel | None:
    """A parcel, row locked and read anew."""
    return await session.scalar(
        select(Parcel)
        .where(Parcel.id == parcel_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


async def by_shipment(session: AsyncSession, carrier: str, shipment_id: str) -> Parcel | None:
    return await session.scalar(
        select(Parcel).where(Parcel.carrier == carrier, Parcel.shipment_id == shipment_id)
    )


async def by_tracking(session: AsyncSession, carrier: str, tracking_number: str) -> Parcel | None:
    return await session.scalar(
        select(Parcel).where(Parcel.carrier == carrier, Parcel.tracking_number == tracking_number)
    )


async def claim_due(
    session: AsyncSession, now: datetime, lease_until: datetime, limit: int
) -> list[Parcel]:
    """Up to ``limit`` parcels with a booking or a cancel due, leased to this worker until
    ``lease_until``; each counts one more attempt."""
    parcels = list(
        await session.scalars(
            select(Parcel)
            .where(Parcel.status.in_((BOOKING, CANCELLING)), Parcel.next_attempt_at <= now)
            .order_by(Parcel.next_attempt_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )
    if parcels:
        await session.execute(
            update(Parcel)
            .where(Parcel.id.in_([p.id for p in parcels]))
            .values(next_attempt_at=lease_until, attempts=Parcel.attempts + 1)
        )
    return parcels


async def to_follow(
    session: AsyncSession,
    carrier: str,
    booked_before: datetime,
    polled_before: datetime,
    limit: int,
    booked_after: datetime,
) -> list[Parcel]:
    """``carrier``'s booked parcels it has not finished with, booked between ``booked_after``
    and ``booked_before`` and not asked about since ``polled_before``: the ones whose news may
    have been missed (one booked before ``booked_after`` has had all its time: lost, or
    kept by the carrier after a cancel it refused)."""
    query = (
        select(Parcel)
        .where(
            Parcel.carrier == carrier,
            Parcel.status == BOOKED,
            Parcel.finished_at.is_(None),
            Parcel.booked_at <= booked_before,
            Parcel.booked_at > booked_after,
            or_(Parcel.polled_at.is_(None), Parcel.polled_at <= polled_before),
        )
        .order_by(Parcel.polled_at.is_not(None), Parcel.polled_at, Parcel.booked_at)
        .limit(limit)
    )
    return list(await session.scalars(query))


async def to_remind(
    session: AsyncSession, carrier: str, booked_before: datetime, limit: int
) -> list[Parcel]:
    """``carrier``'s booked outbound parcels not yet handed in, booked before
    ``booked_before``, whose seller has not been reminded."""
    query = (
        select(Parcel)
        .where(
            Parcel.carrier == carrier,
            Parcel.status == BOOKED,
            Parcel.kind == "outbound",
            Parcel.finished_at.is_(None),
            Parcel.booked_at <= booked_before,
            Parcel.reminded_at.is_(None),
            or_(Parcel.last_event.is_(None), Parcel.last_event == "booked"),
        )
        .order_by(Parcel.booked_at)
        .limit(limit)
    )
    return list(await session.scalars(query))


async def seen(session: AsyncSession, carrier: str, event_id: str) -> bool:
    key = (carrier, event_id)
    return await session.get(ParcelEventSeen, key) is not None


def mark_seen(session: AsyncSession, row: ParcelEventSeen) -> None:
    session.add(row)


async def events_seen(session: AsyncSession, parcel_id: uuid.UUID) -> list[ParcelEventSeen]:
    """The carrier events taken for the parcel, oldest first."""
    query = (
        select(ParcelEventSeen)
        .where(ParcelEventSeen.parcel_id == parcel_id)
        .order_by(ParcelEventSeen.occurred_at, ParcelEventSeen.seen_at)
    )
    return list(await session.scalars(query))
