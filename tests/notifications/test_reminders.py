"""Reminders before a deadline, at the service level, on both databases: the party who must act
is reminded once, the lead time before the deadline, in their language, with the deadline as an
absolute date in the deployment's time zone and a link to their own page; a deadline met,
cancelled or set shorter than the lead time gets no reminder. The real worker processes are in
tests/deals/test_reminder_processes.py."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from dealbroker.core import clock, i18n
from dealbroker.core.links import Links
from dealbroker.deals import flows
from dealbroker.deals.lifecycle import DEADLINES, Actor, Trigger
from dealbroker.deals.models import DealTimer
from dealbroker.integrations.service import deployment_links
from dealbroker.notifications import messages
from dealbroker.notifications import service as notifications
from dealbroker.notifications.models import OutboxMessage
from dealbroker.notifications.tasks import send_due_reminders
from tests.conftest import make_settings
from tests.lifecycle_helpers import OLA, SELLER, SETTINGS, paid
from tests.sandbox.calls import fire, signed_deal

START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)  # 13:00 in Oslo
OSLO = ZoneInfo("Europe/Oslo")
KARI = SELLER["email"]
SEVEN_DAYS = timedelta(days=7)


@pytest.fixture
def now() -> Iterator[list[datetime]]:
    """A clock the test moves by hand, ticking a microsecond a reading so messages keep their
    order."""
    current = [START]

    def read() -> datetime:
        current[0] += timedelta(microseconds=1)
        return current[0]

    clock.set_clock(read)
    yield current
    clock.reset_clock()


@pytest.fixture
async def links(sessionmaker, db_url) -> Links:
    async with sessionmaker() as session, session.begin():
        return await deployment_links(session, make_settings(db_url))


async def reminders(sessionmaker, deal_id: uuid.UUID) -> list[OutboxMessage]:
    async with sessionmaker() as session:
        return [
            m
            for m in await notifications.of_deal(session, deal_id)
            if m.kind == "deadline_reminder"
        ]


async def timers(
    sessionmaker, deal_id: uuid.UUID, trigger: Trigger | None = None
) -> list[DealTimer]:
    """The deal's pending timers (of ``trigger`` only, when given): the approval's deadline to
    pay, closed by the payment, is not among them."""
    query = select(DealTimer).where(DealTimer.deal_id == deal_id, DealTimer.fired_at.is_(None))
    if trigger is not None:
        query = query.where(DealTimer.trigger == trigger.value)
    async with sessionmaker() as session:
        return list(await session.scalars(query))


async def at(sessionmaker, now: list[datetime], moment: datetime) -> int:
    """Move the clock to ``moment`` and run the reminder job as the worker would."""
    now[0] = moment
    return await send_due_reminders(sessionmaker, 100)


def test_every_deadline_has_its_reminder() -> None:
    """A timer kind added to the lifecycle without saying whom to remind, and in which words,
    fails here rather than sending no reminder."""
    missing = {trigger for trigger, _ in DEADLINES.values()} - set(notifications.REMINDERS)
    assert not missing, f"deadlines without a reminder in notifications.REMINDERS: {missing}"
    for trigger, _ in DEADLINES.values():
        for reminder in notifications.REMINDERS[trigger]:
            for locale in ("en", "nb", "sv"):
                with i18n.using(locale):
                    text = reminder.words("Bike", "DEADLINE", "https://page.example/x")
                assert "DEADLINE" in text.subject, (trigger, locale)
                assert "DEADLINE" in text.body, (trigger, locale)
                assert "https://page.example/x" in text.body, (trigger, locale)


async def test_the_seller_is_reminded_a_day_before_the_shipping_deadline_once(
    sessionmaker, links, now
):
    d = await paid(sessionmaker, "Carrier")
    (timer,) = await timers(sessionmaker, d.deal_id)
    due = timer.due_at
    assert timer.remind_at == due - timedelta(hours=24)

    assert await at(sessionmaker, now, due - timedelta(hours=24, seconds=1)) == 0
    assert await reminders(sessionmaker, d.deal_id) == []

    assert await at(sessionmaker, now, due - timedelta(hours=23)) == 1
    (reminder,) = await reminders(sessionmaker, d.deal_id)
    deadline = messages.when(due, OSLO)
    assert "29" in deadline
    assert deadline.endswith("(Central European Time)")  # the zone as a person names it
    assert reminder.to_email == KARI
    assert reminder.subject == f"Reminder: Bike, by {deadline}"
    assert f"You have until {deadline} to hand the item to the carrier" in reminder.body
    assert f"Your deal page: {links.deal_url(d.deal_id)}" in reminder.body
    assert "support@market.example.com" in reminder.body  # as every message, the person to ask
    # The seller's mailbox shows it; the buyer's does not (it is addressed to the seller).
    async with sessionmaker() as session:
        seller_box = await notifications.mailbox(
            session, d.deal_id, notifications.Party.SELLER, KARI
        )
    assert reminder.id in {m.id for m in seller_box}

    # Exactly once: later runs find nothing, and the deadline itself still fires.
    assert await at(sessionmaker, now, due - timedelta(hours=1)) == 0
    assert len(await reminders(sessionmaker, d.deal_id)) == 1
    (timer,) = await timers(sessionmaker, d.deal_id)
    assert timer.reminded_at is not None
    assert timer.fired_at is None


async def test_both_parties_of_a_pickup_are_reminded_each_in_their_language(
    sessionmaker, links, now
):
    d = await paid(sessionmaker, "Pickup", buyer_locale="nb", seller_locale="sv")
    (timer,) = await timers(sessionmaker, d.deal_id)
    assert await at(sessionmaker, now, timer.remind_at) == 1
    found = {m.to_email: m for m in await reminders(sessionmaker, d.deal_id)}
    assert set(found) == {OLA, KARI}
    with i18n.using("nb"):
        to_buyer = messages.remind_pickup_buyer("Bike", messages.when(timer.due_at, OSLO), None)
    with i18n.using("sv"):
        to_seller = messages.remind_pickup_seller(
            "Bike", messages.when(timer.due_at, OSLO), links.deal_url(d.deal_id)
        )
    assert found[OLA].subject == to_buyer.subject
    assert found[OLA].body.startswith(to_buyer.body)
    assert found[KARI].subject == to_seller.subject
    assert found[KARI].body.startswith(to_seller.body)
    assert "Reminder" not in found[OLA].subject + found[KARI].subject  # not in English
    # Each party's mailbox shows their own reminder, not the other's.
    async with sessionmaker() as session:
        for party, email in ((notifications.Party.BUYER, OLA), (notifications.Party.SELLER, KARI)):
            box = await notifications.mailbox(session, d.deal_id, party, email)
            assert [m.id for m in box if m.kind == "deadline_reminder"] == [found[email].id]


async def test_a_deadline_met_before_the_reminder_time_sends_none(sessionmaker, now):
    d = await paid(sessionmaker, "Carrier")
    now[0] += timedelta(days=2)
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)  # handed over: the deadline is met
    # (The hand-over sets the transit deadline, whose reminder is due much later.)
    (timer,) = await timers(sessionmaker, d.deal_id, Trigger.SHIPPING_EXPIRED)
    assert await at(sessionmaker, now, timer.remind_at + timedelta(seconds=1)) == 1  # handled
    assert await reminders(sessionmaker, d.deal_id) == []
    (timer,) = await timers(sessionmaker, d.deal_id, Trigger.SHIPPING_EXPIRED)
    assert timer.reminded_at is not None  # closed, never looked at again


async def test_a_deadline_cancelled_by_a_dispute_sends_none(sessionmaker, now):
    d = await paid(sessionmaker, "Pickup")
    await d.fire(Trigger.BUYER_DENIED, Actor.BUYER)  # Pickup_Denied: the 7 days no longer run
    (timer,) = await timers(sessionmaker, d.deal_id)
    await at(sessionmaker, now, timer.remind_at + timedelta(hours=1))
    assert await reminders(sessionmaker, d.deal_id) == []


async def test_a_reminder_whose_deadline_has_passed_is_not_sent(sessionmaker, now):
    """A worker that was down for the whole day before the deadline sends no reminder of a
    deadline already due: the deadline's own messages follow."""
    d = await paid(sessionmaker, "Carrier")
    (timer,) = await timers(sessionmaker, d.deal_id)
    await at(sessionmaker, now, timer.due_at + timedelta(seconds=1))
    assert await reminders(sessionmaker, d.deal_id) == []


async def test_a_deadline_no_longer_than_the_lead_time_gets_no_reminder(sessionmaker, now):
    """The 24-hour review is as long as the default lead time: the arrival message names its
    deadline, and no reminder repeats it. With a 12-hour lead, the buyer is reminded at 12."""
    d = await paid(sessionmaker, "Carrier")
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await d.fire(Trigger.CARRIER_DELIVERED, Actor.PROVIDER)
    review = [
        t for t in await timers(sessionmaker, d.deal_id) if t.trigger == "review_period_ended"
    ]
    assert [t.remind_at for t in review] == [None]

    shorter = SETTINGS.model_copy(update={"reminder_lead_hours": 12})
    e = await paid(sessionmaker, "Carrier")
    await e.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await e.step(
        lambda s, deal: flows.fire(s, deal, Trigger.CARRIER_DELIVERED, Actor.PROVIDER, shorter)
    )
    (review_timer,) = [
        t for t in await timers(sessionmaker, e.deal_id) if t.trigger == "review_period_ended"
    ]
    assert review_timer.remind_at == review_timer.due_at - timedelta(hours=12)
    await at(sessionmaker, now, review_timer.remind_at)
    (reminder,) = await reminders(sessionmaker, e.deal_id)
    assert reminder.to_email == OLA
    assert "to approve the item" in reminder.body
    assert "Open the offer link you were given" in reminder.body  # offered without a link


async def test_no_reminders_with_a_lead_time_of_zero(sessionmaker, now):
    off = SETTINGS.model_copy(update={"reminder_lead_hours": 0})
    d = await paid(sessionmaker, "Carrier")
    await d.fire(Trigger.CARRIER_PICKED_UP, Actor.SELLER)
    await d.step(
        lambda s, deal: flows.fire(s, deal, Trigger.CARRIER_DELIVERED, Actor.PROVIDER, off)
    )
    review = [
        t for t in await timers(sessionmaker, d.deal_id) if t.trigger == "review_period_ended"
    ]
    assert [t.remind_at for t in review] == [None]


async def test_the_sandbox_clock_moves_the_reminder_with_its_deadline(sessionmaker, now):
    d = await paid(sessionmaker, "Carrier")
    (before,) = await timers(sessionmaker, d.deal_id)
    async with sessionmaker() as session, session.begin():
        assert await flows.advance_clock(session, d.integration_id, 6 * 24 * 3600 + 60) == 1
    (after,) = await timers(sessionmaker, d.deal_id)
    moved = timedelta(days=6, seconds=60)
    assert (after.due_at, after.remind_at) == (before.due_at - moved, before.remind_at - moved)
    # Six days and a minute on, the reminder is due although the real clock has not moved.
    assert await send_due_reminders(sessionmaker, 100) == 1
    (reminder,) = await reminders(sessionmaker, d.deal_id)
    assert messages.when(after.due_at, OSLO) in reminder.body


async def test_a_deadline_without_a_reminder_is_logged_and_holds_up_no_other(
    sessionmaker, now, caplog
):
    """Were a deadline to reach the job without a row in REMINDERS, it is closed as failed and
    logged, and the reminders due after it are still sent."""
    d = await paid(sessionmaker, "Carrier")
    (timer,) = await timers(sessionmaker, d.deal_id)
    async with sessionmaker() as session, session.begin():
        session.add(
            DealTimer(
                id=uuid.uuid4(),
                deal_id=d.deal_id,
                integration_id=d.integration_id,
                trigger=Trigger.CANCEL.value,  # a trigger no deadline fires
                due_at=timer.due_at,
                remind_at=timer.remind_at - timedelta(seconds=1),  # due first
                created_at=timer.created_at,
            )
        )
    assert await at(sessionmaker, now, timer.remind_at) == 2
    (reminder,) = await reminders(sessionmaker, d.deal_id)
    assert reminder.to_email == KARI
    assert "no reminder for this deadline" in caplog.text
    assert all(t.reminded_at is not None for t in await timers(sessionmaker, d.deal_id))


async def test_the_sandbox_clock_endpoint_sends_the_reminders_now_due(client, caller, sessionmaker):
    """An integrator who moves the clock sees the reminders in the answer's wake, as the
    deadlines: six days on, both parties of a pickup are reminded; a day more, the deadline
    fires and no second reminder follows."""
    deal = await signed_deal(client, caller, "Pickup")
    await fire(client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
    headers = {"webhook-secret": caller.webhook_secret}
    deal_id = uuid.UUID(deal["id"])

    early = await client.post(
        "/sandbox/v1/clock/advance", json={"seconds": 6 * 24 * 3600 - 60}, headers=headers
    )
    assert early.json()["timersFired"] == 0
    assert await reminders(sessionmaker, deal_id) == []

    due = await client.post("/sandbox/v1/clock/advance", json={"seconds": 120}, headers=headers)
    assert due.json()["timersFired"] == 0
    sent = await reminders(sessionmaker, deal_id)
    assert len(sent) == 2
    assert KARI in {m.to_email for m in sent}

    over = await client.post(
        "/sandbox/v1/clock/advance", json={"seconds": 24 * 3600}, headers=headers
    )
    assert over.json()["timersFired"] == 1
    assert len(await reminders(sessionmaker, deal_id)) == 2
