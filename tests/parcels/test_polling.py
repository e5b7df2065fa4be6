"""The fallback to Bring's pushes: the follow job asks Bring's Tracking API (the emulator, its
own process) about booked parcels it has not heard from, and the events it finds move the deal
through the same handler, each once, whether pushed first or polled."""

from datetime import timedelta
from typing import Any

from sqlalchemy import update

from dealbroker.core import clock
from dealbroker.core.settings import Settings
from dealbroker.parcels.models import Parcel
from dealbroker.parcels.tasks import POLL_AFTER, FollowJob, ParcelJob
from tests.parcels.deals import book, messages, parcels_of, shipping_pending


def _settings(db_url: str, emulator: Any) -> Settings:
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in emulator.settings().items()}
    return Settings(database_url=db_url, environment="sandbox", **values)  # type: ignore[arg-type]


async def _age(sessionmaker: Any, deal_id: Any, by: timedelta) -> None:
    """The deal's parcel booked and last asked about ``by`` ago, as time would make it."""
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Parcel)
            .where(Parcel.deal_id == deal_id)
            .values(
                booked_at=clock.now() - by,
                polled_at=None,
                created_at=clock.now() - by,
            )
        )


async def test_polling_finds_what_was_not_pushed(sessionmaker, db_url, bring_emulator) -> None:
    bring_emulator.reset()
    settings = _settings(db_url, bring_emulator)
    d = await shipping_pending(sessionmaker)
    await book(d, settings)
    assert await ParcelJob(sessionmaker, settings).run_once() == 1
    [parcel] = await parcels_of(d)
    # A scan Bring never pushed (no push URL is registered).
    later = (clock.now() + timedelta(seconds=2)).isoformat()
    bring_emulator.event(parcel.shipment_id, "HANDED_IN", created=later, push=False)
    follow = FollowJob(sessionmaker, settings)
    assert await follow.run_once() == 0  # just booked: nothing to ask yet
    assert await d.status() == "Shipping_Pending"
    await _age(sessionmaker, d.deal_id, POLL_AFTER + timedelta(minutes=1))
    assert await follow.run_once() == 1
    assert await d.status() == "Shipping_In_Progress"
    # Asked again much later: the same event is found and taken no second time.
    history = len(await d.history())
    await _age(sessionmaker, d.deal_id, timedelta(days=1))
    await follow.run_once()
    assert len(await d.history()) == history


async def test_a_seller_who_does_not_hand_in_is_reminded_once(
    sessionmaker, db_url, bring_emulator
) -> None:
    bring_emulator.reset()
    settings = _settings(db_url, bring_emulator)
    d = await shipping_pending(sessionmaker)
    await book(d, settings)
    assert await ParcelJob(sessionmaker, settings).run_once() == 1
    follow = FollowJob(sessionmaker, settings)
    await _age(
        sessionmaker, d.deal_id, timedelta(days=settings.carrier_drop_off_reminder_days, hours=1)
    )
    await follow.run_once()
    await follow.run_once()
    reminded = await messages(d, "drop_off_reminder")
    assert len(reminded) == 1
    assert "Hand it in by" in reminded[0].body
