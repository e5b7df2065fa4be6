"""The parcel jobs: book and cancel at the carrier, and follow what it does not push.

``ParcelJob`` leases due bookings and cancels (``Parcel.status`` ``booking`` or
``cancelling``), calls the carrier outside any transaction, and applies each answer in a
transaction of its own with the deal locked again (``parcels.service``): once, because an
answer is applied only while the parcel is still at that step. A booking whose outcome is
unknown is repeated with the same reference, so the carrier makes one parcel.

``FollowJob`` is the fallback to the carrier's pushes: it asks the carrier for the events of
booked parcels it has not heard from for a while (``POLL_EVERY``) and hands them to the one
handler (``parcels.service.take_events``), which applies each once whichever way it came. It
also reminds the seller once of a parcel not handed in ``carrier_drop_off_reminder_days``
after booking.
"""

import logging
import uuid
from asyncio import timeout as asyncio_timeout
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from dealbroker.carriers.base import (
    Booking,
    BookingRequest,
    Carrier,
    CarrierRefused,
    CarrierUnavailable,
    ParcelEvent,
)
from dealbroker.carriers.registry import carrier_for
from dealbroker.core import clock, wakeup
from dealbroker.core.jobs import ShortJob
from dealbroker.parcels import repository, service
from dealbroker.parcels.models import BOOKING, Parcel
from dealbroker.signatures import repository as eid_flows
from dealbroker.signatures.service import SignatureType

log = logging.getLogger("dealbroker.parcels")

BATCH = 20
CALL_TIMEOUT = 90.0  # seconds a carrier call may take, whatever the adapter's own timeouts
# A booking cut short by CALL_TIMEOUT may have been made: the repeat waits as long as after the
# carrier's own timeout, so the carrier can show the first one (``carriers.bring``).
UNKNOWN_OUTCOME_WAIT = 120.0
LEASE = timedelta(minutes=2)  # longer than CALL_TIMEOUT: a lease outlives its call
POLL_EVERY = timedelta(hours=2)  # how long a booked parcel may go unheard before we ask
POLL_AFTER = timedelta(minutes=30)  # a parcel just booked has nothing to tell yet
FOLLOW_EXTRA_DAYS = 21


class ParcelJob(ShortJob):
    name = wakeup.PARCELS
    every = 0.0  # each poll: retries come due without a commit to wake the job

    async def run_once(self) -> int:
        carrier = carrier_for(self.settings)
        if carrier is None:
            self.more = False
            return 0
        now = clock.now()
        async with self.sessionmaker() as session, session.begin():
            parcels = await repository.claim_due(session, now, now + LEASE, BATCH)
            # ``claim_due``'s update has counted this attempt on the rows loaded.
            work = [(p.id, p.status, p.attempts, p.shipment_id) for p in parcels]
            requests = {
                p.id: await service.booking_request(
                    session, p, await _buyer_name(session, p), self.settings
                )
                for p in parcels
                if p.status == BOOKING
            }
        for parcel_id, status, attempts, shipment_id in work:
            if status == BOOKING:
                await self._book(carrier, parcel_id, attempts, requests[parcel_id])
            else:
                await self._cancel(carrier, parcel_id, attempts, shipment_id or "")
        self.more = len(work) == BATCH
        return len(work)

    async def _book(
        self, carrier: Carrier, parcel_id: uuid.UUID, attempts: int, request: BookingRequest
    ) -> None:
        try:
            async with asyncio_timeout(CALL_TIMEOUT):
                booking: Booking = await (
                    carrier.book_return(request) if request.return_of else carrier.book(request)
                )
        except CarrierRefused as exc:
            async with self.sessionmaker() as session, session.begin():
                await service.booking_refused(session, parcel_id, exc.reason, str(exc))
            return
        except (CarrierUnavailable, TimeoutError, OSError) as exc:
            retry_after = (
                exc.retry_after if isinstance(exc, CarrierUnavailable) else UNKNOWN_OUTCOME_WAIT
            )
            await self._later(parcel_id, attempts, retry_after, exc)
            return
        async with self.sessionmaker() as session, session.begin():
            await service.booked(session, parcel_id, booking, self.settings)

    async def _cancel(
        self, carrier: Carrier, parcel_id: uuid.UUID, attempts: int, shipment_id: str
    ) -> None:
        try:
            async with asyncio_timeout(CALL_TIMEOUT):
                await carrier.cancel(shipment_id)
        except CarrierRefused as exc:
            async with self.sessionmaker() as session, session.begin():
                await service.cancelled(session, parcel_id, f"{exc.reason}: {exc}")
            return
        except (CarrierUnavailable, TimeoutError, OSError) as exc:
            retry_after = exc.retry_after if isinstance(exc, CarrierUnavailable) else None
            await self._later(parcel_id, attempts, retry_after, exc)
            return
        async with self.sessionmaker() as session, session.begin():
            await service.cancelled(session, parcel_id, None)

    async def _later(
        self, parcel_id: uuid.UUID, attempts: int, retry_after: float | None, exc: Exception
    ) -> None:
        log.warning("carrier call for parcel %s failed; will retry: %r", parcel_id, exc)
        retry_at = clock.now() + service.due_in(attempts, retry_after)
        async with self.sessionmaker() as session, session.begin():
            await service.booking_delayed(session, parcel_id, repr(exc), retry_at)


async def _buyer_name(session: AsyncSession, parcel: Parcel) -> str | None:
    """The buyer's name as their eID verified it (the deal keeps no typed name then)."""
    for flow in await eid_flows.completed_of_deal(session, parcel.deal_id):
        if flow.signature_type == SignatureType.BUYER.value and flow.name:
            return str(flow.name)
    return None


class FollowJob(ShortJob):
    """Polls the carrier for booked parcels not heard from, and reminds sellers to hand in."""

    name = "parcel-follow"
    every = 300.0

    async def run_once(self) -> int:
        carrier = carrier_for(self.settings)
        if carrier is None:
            self.more = False
            return 0
        done = await self._remind(carrier.name)
        now = clock.now()
        async with self.sessionmaker() as session, session.begin():
            # Followed for as long as a parcel may travel, and the return of one not
            # collected (a fortnight at the pickup point) after it.
            days = self.settings.carrier_lost_after_days + FOLLOW_EXTRA_DAYS
            parcels = await repository.to_follow(
                session,
                carrier.name,
                now - POLL_AFTER,
                now - POLL_EVERY,
                BATCH,
                booked_after=now - timedelta(days=days),
            )
            for parcel in parcels:
                parcel.polled_at = now
            asked = [(p.id, p.tracking_number or "") for p in parcels]
        for parcel_id, tracking in asked:
            try:
                async with asyncio_timeout(CALL_TIMEOUT):
                    events: list[ParcelEvent] = await carrier.track(tracking)
            except (CarrierRefused, CarrierUnavailable, TimeoutError, OSError) as exc:
                log.warning("tracking parcel %s failed: %r", parcel_id, exc)
                continue
            async with self.sessionmaker() as session, session.begin():
                await service.take_events(session, carrier.name, events, self.settings)
            done += 1
        self.more = len(asked) == BATCH
        return done

    async def _remind(self, carrier: str) -> int:
        days = self.settings.carrier_drop_off_reminder_days
        now = clock.now()
        async with self.sessionmaker() as session:
            since = now - timedelta(days=days)
            due = [p.id for p in await repository.to_remind(session, carrier, since, BATCH)]
        for parcel_id in due:
            async with self.sessionmaker() as session, session.begin():
                await service.remind_drop_off(session, parcel_id)
        return len(due)
