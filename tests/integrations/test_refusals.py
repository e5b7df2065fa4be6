"""Rate-limit refusals per integration (``integrations.refusals``): the tally is bounded, adds
to one row per integration, limit and hour, counts a made-up client id nowhere, and the
back office's windows (the last day, the last week) add up the right hours."""

import logging
import time
from datetime import timedelta

from sqlalchemy import select

from dealbroker.core import clock
from dealbroker.integrations import refusals
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import RateLimitRefusal


async def registered(sessionmaker, name: str = "Market") -> integrations.Credentials:
    async with sessionmaker() as session, session.begin():
        return await integrations.create(session, name)


async def rows(sessionmaker) -> set[tuple]:
    async with sessionmaker() as session:
        found = await session.scalars(select(RateLimitRefusal))
        return {(r.integration_id, r.hour, r.limit_name, r.count) for r in found}


async def test_the_tally_adds_to_one_row_per_hour_and_limit(sessionmaker):
    market = (await registered(sessionmaker)).integration
    tally = refusals.Tally()
    now = time.time()
    hour = refusals.hour_of(now)
    for _ in range(3):
        tally.note("api", market.id, now)
    tally.note("token_failures", market.client_id, now)
    tally.note("token_failures", "dbc_made_up", now)  # no integration: no row
    tally.note("api", market.id, now - 3600)
    await tally.flush(sessionmaker)
    tally.note("api", market.id, now)
    await tally.flush(sessionmaker)
    await tally.flush(sessionmaker)  # nothing pending: nothing written
    assert await rows(sessionmaker) == {
        (market.id, hour, "api", 4),
        (market.id, hour, "token_failures", 1),
        (market.id, hour - 1, "api", 1),
    }


async def test_the_tally_is_bounded_and_says_what_it_dropped(sessionmaker, caplog):
    markets = [(await registered(sessionmaker, f"M{n}")).integration for n in range(3)]
    tally = refusals.Tally(max_pending=2)
    for market in markets:
        tally.note("api", market.id)
    tally.note("api", markets[0].id)  # a triple it holds already is still counted
    with caplog.at_level(logging.WARNING, logger="dealbroker.ratelimit"):
        await tally.flush(sessionmaker)
    assert "1 rate-limit refusals dropped: the buffer was full" in caplog.text
    assert sorted(r[3] for r in await rows(sessionmaker)) == [1, 2]


async def test_the_windows_count_the_last_day_and_the_last_week(sessionmaker):
    market = (await registered(sessionmaker)).integration
    quiet = (await registered(sessionmaker, "Quiet")).integration
    now = clock.now()
    current = refusals.hour_of(now.timestamp())
    async with sessionmaker() as session, session.begin():
        for hours_ago, limit, count in (
            (0, "api", 5),
            (0, "token_failures", 1),
            (23, "api", 2),  # the 24th hour back, this one included
            (24, "api", 7),  # the last week only
            (6 * 24 + 23, "api", 11),
            (7 * 24, "api", 100),  # older than the week
        ):
            session.add(
                RateLimitRefusal(
                    integration_id=market.id,
                    hour=current - hours_ago,
                    limit_name=limit,
                    count=count,
                )
            )
    async with sessionmaker() as session:
        counts = await refusals.counts(session, now)
    assert counts[market.id] == refusals.Counts(last_day=8, last_week=26)
    assert quiet.id not in counts
    async with sessionmaker() as session, session.begin():
        assert await refusals.purge(session, now + timedelta(hours=1), 10) == 1
    assert (market.id, current - 7 * 24, "api", 100) not in await rows(sessionmaker)
