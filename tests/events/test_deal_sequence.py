"""Each event about a deal carries its place among that deal's events, so a receiver can put
back in order what at-least-once delivery mixes."""

import asyncio
import uuid

import pytest
from alembic import command
from sqlalchemy import select

from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.migrate import alembic_config
from dealbroker.deals.lifecycle import Actor, Trigger
from dealbroker.deals.models import Deal
from dealbroker.events.models import Event
from tests.conftest import BACKENDS, create_deal, database_url
from tests.lifecycle_helpers import new_deal


async def deal_events(client, caller, deal_id: str) -> list[dict]:
    items = (await client.get("/events/v1/events?pageSize=100", headers=caller.headers)).json()[
        "items"
    ]
    return [e for e in items if e["data"].get("dealId") == deal_id]


async def test_a_deals_events_are_numbered_in_the_order_they_happened(client, caller):
    deal = await create_deal(client, caller)
    path = f"/deals/v1/deals/{deal['id']}/status"
    for status in ("Ad", "Cancelled"):
        assert (await client.post(path, json={"status": status}, headers=caller.headers)).is_success
    other = await create_deal(client, caller)

    mine = sorted(await deal_events(client, caller, deal["id"]), key=lambda e: e["created"])
    assert [e["deal_sequence"] for e in mine] == [1, 2, 3]
    assert [e["data"]["status"] for e in mine] == ["Draft", "Ad", "Cancelled"]
    # Each deal counts its own events.
    assert [e["deal_sequence"] for e in await deal_events(client, caller, other["id"])] == [1]


async def test_racing_changes_get_distinct_numbers_without_gaps(client, caller, sessionmaker):
    deal = await create_deal(client, caller)
    path = f"/deals/v1/deals/{deal['id']}/status"
    bodies = [{"status": "Ad"}, {"status": "Cancelled"}] * 10
    await asyncio.gather(*(client.post(path, json=b, headers=caller.headers) for b in bodies))
    async with sessionmaker() as session:
        numbers = list(
            await session.scalars(
                select(Event.deal_sequence)
                .where(Event.deal_id == uuid.UUID(deal["id"]))
                .order_by(Event.seq)
            )
        )
        stored = await session.get(Deal, uuid.UUID(deal["id"]))
    assert numbers == list(range(1, len(numbers) + 1))
    assert stored.events_emitted == len(numbers)
    assert stored.version == len(numbers)  # one per change: counting events never bumps it


async def test_the_numbers_are_in_the_delivered_envelope(sessionmaker):
    driver = await new_deal(sessionmaker)
    (created,) = await driver.events("deal.status")
    assert '"deal_sequence":1' in created.payload


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_events_from_before_the_migration_are_numbered_by_it(backend, tmp_path):
    if backend not in BACKENDS:
        pytest.skip(f"{backend} is not among the test backends")
    url = database_url(backend, tmp_path, "sequence_migration")

    async def two_deals() -> list[uuid.UUID]:
        engine = create_engine(url, pool_size=2)
        try:
            sessions = create_sessionmaker(engine)
            first, second = await new_deal(sessions), await new_deal(sessions)
            await first.fire(Trigger.SELLER_SIGNED, Actor.SELLER)
            return [first.deal_id, second.deal_id]
        finally:
            await engine.dispose()

    ids = asyncio.run(two_deals())
    config = alembic_config(url)
    command.downgrade(config, "0011")  # as a deployment before the numbers
    command.upgrade(config, "head")

    async def numbers() -> dict[uuid.UUID, tuple[list[int], int]]:
        engine = create_engine(url, pool_size=2)
        try:
            async with engine.connect() as conn:
                found = {}
                for deal_id in ids:
                    rows = await conn.execute(
                        select(Event.deal_sequence)
                        .where(Event.deal_id == deal_id)
                        .order_by(Event.seq)
                    )
                    count = await conn.scalar(select(Deal.events_emitted).where(Deal.id == deal_id))
                    found[deal_id] = ([r[0] for r in rows], count)
                return found
        finally:
            await engine.dispose()

    found = asyncio.run(numbers())
    assert found[ids[0]] == ([1, 2], 2)  # created, then published
    assert found[ids[1]] == ([1], 1)
