"""The provider-call job: makes the refunds, payouts, cancels and captures that transactions
decided.

A refund or payout is decided inside the transaction that holds the deal's row lock (an expiry,
a dispute, an approval, a new payout account), which records a ``ProviderCall`` row and nothing
more: a slow provider must never hold a deal's lock. This job leases due calls, makes them
outside any transaction, and applies each result in a transaction of its own, with the deal
locked again: exactly once, because the result is applied only while the call is still
``pending``, and the provider receives the call's id as its idempotency key, so a call made
again after a crash moves money once. A call that fails for a passing reason (a timeout, a
network error) is tried again with backoff; one the provider refuses is final. A payout rail
whose answer comes later (a bank file) leaves the call ``submitted``: no longer this job's, it
is settled by the bank's status report (``payments.bank_file``), or by Swish's callback or the
poll of Swish payouts (``payments.swish_payouts``).
"""

import logging
import uuid
from asyncio import timeout as asyncio_timeout
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.core import clock, wakeup
from dealbroker.core.jobs import ShortJob
from dealbroker.core.settings import Settings
from dealbroker.payments import hold, repository
from dealbroker.payments import service as payments
from dealbroker.payments.escrow import deal_side
from dealbroker.payments.models import Payment, PayoutAccount, ProviderCall
from dealbroker.payments.provider import (
    Capturing,
    PayoutOutcome,
    ProviderError,
    ReservationLapsed,
    provider_of,
    rail_name,
)

log = logging.getLogger("dealbroker.payments")

BATCH = 20
LEASE = timedelta(minutes=2)  # longer than any provider call may take (see CALL_TIMEOUT)
CALL_TIMEOUT = 60.0
MAX_BACKOFF = timedelta(hours=1)


@dataclass
class _Work:
    call_id: uuid.UUID
    kind: str
    attempts: int
    payment: Payment
    account: PayoutAccount | None


@dataclass
class _Result:
    work: _Work
    refused: str | None = None  # the provider said no, for good
    failed: str | None = None  # a passing failure: try again later
    ref: str | None = None  # the provider's id of the refund or payout it made
    submitted: bool = False  # handed to a rail that answers later
    rail: str | None = None  # that rail
    found_paid: bool = False  # a cancel found the buyer's money in already: refund it
    lapsed: bool = False  # a capture refused because the reservation is gone: parties told
    retry_after: float | None = None  # the provider asked us to wait this long (seconds)


class ProviderCallJob(ShortJob):
    name = wakeup.PROVIDER_CALLS
    _held: hold.Hold | None = None  # the hold on money out this job last saw

    async def run_once(self) -> int:
        work = await self._claim()
        for item in work:
            await self._apply(await self._call(item))
        self.more = len(work) == BATCH
        return len(work)

    async def _claim(self) -> list[_Work]:
        now = clock.now()
        async with self.sessionmaker() as session, session.begin():
            held = await hold.current(session)
            self._say_hold(held)
            calls = await repository.claim_due_calls(
                session, now, now + LEASE, BATCH, money_out=held is None
            )
            return [await self._work(session, call) for call in calls]

    def _say_hold(self, held: hold.Hold | None) -> None:
        """One line when money out becomes held and one when it is released, not one a poll."""
        if held is not None and self._held != held:
            log.warning("money out not made: %s", held.words())
        elif held is None and self._held is not None:
            log.warning("money out released: payout and refund calls are made again")
        self._held = held

    async def _work(self, session: AsyncSession, call: ProviderCall) -> _Work:
        payment = await session.get(Payment, call.payment_id)
        assert payment is not None  # the call's foreign key
        account = (
            None
            if call.account_id is None
            else await repository.account_by_id(session, call.account_id)
        )
        return _Work(call.id, call.kind, call.attempts + 1, payment, account)

    async def _call(self, work: _Work) -> _Result:
        provider = provider_of(self.settings, work.payment)
        key = str(work.call_id)
        ref = None
        try:
            async with asyncio_timeout(CALL_TIMEOUT):
                if work.kind == payments.CallKind.REFUND:
                    ref = await provider.refund(work.payment, idempotency_key=key)
                elif work.kind == payments.CallKind.CANCEL:
                    paid = await provider.cancel(work.payment, idempotency_key=key)
                    return _Result(work, found_paid=paid)
                elif work.kind == payments.CallKind.CAPTURE:
                    if not isinstance(provider, Capturing):
                        return _Result(work, refused=f"{provider.name} captures nothing")
                    await provider.capture(work.payment, idempotency_key=key)
                elif work.account is None:
                    return _Result(work, refused="the payout account no longer exists")
                else:
                    outcome = await provider.pay_out(
                        work.payment, work.account, idempotency_key=key
                    )
                    if outcome is PayoutOutcome.SUBMITTED:
                        rail = rail_name(self.settings, work.account)
                        return _Result(work, submitted=True, rail=rail)
        except ProviderError as exc:
            rail = None
            if work.kind == payments.CallKind.PAYOUT and work.account is not None:
                # A refused Swish payout stays Swish's: reconciliation asks Swish about it.
                rail = rail_name(self.settings, work.account)
            lapsed = isinstance(exc, ReservationLapsed)
            return _Result(
                work, refused=str(exc)[:500] or type(exc).__name__, rail=rail, lapsed=lapsed
            )
        except Exception as exc:  # a timeout, a network error: the call may be made again
            log.warning(
                "provider %s %s failed; will retry: %r",
                work.kind,
                work.call_id,
                exc,
                extra={"deal_id": str(work.payment.deal_id)},
            )
            wait = getattr(exc, "retry_after", None)  # a 429's Retry-After (Vipps)
            return _Result(work, failed=repr(exc)[:500], retry_after=wait)
        return _Result(work, ref=ref)

    async def _apply(self, result: _Result) -> None:
        work = result.work
        async with self.sessionmaker() as session, session.begin():
            deal = await deal_side().lock(session, work.payment.deal_id)
            call = await repository.call_for_update(session, work.call_id)
            if deal is None or call is None or call.status != "pending":
                return  # applied already (a worker whose lease ran out), or the deal is gone
            if result.failed is not None:
                call.error = result.failed
                wait = _backoff(work.attempts)
                if result.retry_after is not None:
                    wait = max(wait, timedelta(seconds=min(result.retry_after, 3600)))
                call.next_attempt_at = clock.now() + wait
            elif result.refused is not None:
                log.error(
                    "provider refused %s %s: %s",
                    work.kind,
                    work.call_id,
                    result.refused,
                    extra={"deal_id": str(deal.id)},
                )
                if result.rail == "swish":
                    call.rail = result.rail
                await payments.call_refused(
                    session, deal, call, result.refused, lapsed=result.lapsed
                )
            elif result.submitted:
                await payments.call_submitted(session, deal, call, result.rail)
            elif result.found_paid:
                await payments.call_found_paid(session, deal, call)
            else:
                await payments.call_succeeded(session, deal, call, result.ref)


async def make_pending_calls(
    sessionmaker: async_sessionmaker[AsyncSession], settings: Settings
) -> int:
    """Make every provider call that is due now, as the worker would, and return how many: for
    callers that must show the outcome at once (the sandbox clock, the operator's CLI). Safe
    beside running workers: calls are leased, and each result is applied once."""
    job = ProviderCallJob(sessionmaker, settings)
    made = 0
    while handled := await job.run_once():
        made += handled
    return made


def _backoff(attempts: int) -> timedelta:
    return min(timedelta(seconds=5 * 2 ** min(attempts, 20)), MAX_BACKOFF)
