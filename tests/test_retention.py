"""Retention: the worker deletes what has outlived its keep time, in bounded batches, and
nothing else.

* Real processes on both databases (``dealbroker worker`` on each, and ``serve`` with its
  embedded worker on SQLite): old events with their deliveries and attempts, sent messages,
  idempotency keys past 24 hours, expired tokens, refusal counts and API requests past a week,
  and the conversations (with their messages) of deals that ended long ago go; fresh rows,
  events with a pending delivery, unsent messages, and the conversations of a deal that ended
  lately or is still open, however old, stay.
* One run deletes at most ``retention_max_batches`` batches of at most
  ``retention_batch_size`` rows, and the job stays due while there is more.
* On PostgreSQL each purge's scan goes through its index, not a sequential scan.
"""

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError
from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.auth import repository as tokens
from dealbroker.auth.models import AccessToken
from dealbroker.conversations import repository as conversations
from dealbroker.conversations.models import Conversation, ConversationMessage
from dealbroker.core import clock, idempotency
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.idempotency import IdempotencyKey
from dealbroker.core.settings import Settings
from dealbroker.core.statuses import DealStatus
from dealbroker.core.webhook_schedule import RETRY_WINDOW_DAYS
from dealbroker.deals.models import Deal, DealStatusChange
from dealbroker.events import repository as events
from dealbroker.events.models import Delivery, DeliveryAttempt, Event, WebhookEndpoint
from dealbroker.integrations import refusals
from dealbroker.integrations import repository as integrations
from dealbroker.integrations.models import ApiRequest, RateLimitRefusal
from dealbroker.notifications import repository as outbox
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers.models import OfferLink
from dealbroker.retention import RetentionJob
from dealbroker.signatures import repository as eid_flows
from tests.conftest import BACKENDS, create_deal, database_url, make_settings
from tests.lifecycle_helpers import new_deal
from tests.processes import Server, Worker, drop_database, free_port, wait_until

OLD = timedelta(days=40)  # past every keep time
CONVERSATION_DAYS = 30  # the conversations' keep time in these tests
RECENT = timedelta(days=1)  # within the events' and messages' keep time, past a key's 24 h


@dataclass
class Rows:
    """Ids of the seeded rows that must go and of those that must stay."""

    gone: dict[str, set] = field(default_factory=dict)
    kept: dict[str, set] = field(default_factory=dict)

    def add(self, table: str, key: object, *, goes: bool) -> None:
        (self.gone if goes else self.kept).setdefault(table, set()).add(key)


async def seed(sessionmaker: async_sessionmaker[AsyncSession]) -> Rows:
    """Old and fresh rows of every purged table, written directly as the services would."""
    rows = Rows()
    now = clock.now()
    deal = await new_deal(sessionmaker)
    async with sessionmaker() as session, session.begin():
        # Disabled: its pending deliveries wait, so the worker never sends them.
        endpoint = WebhookEndpoint(
            id=uuid.uuid4(),
            integration_id=deal.integration_id,
            url="https://hooks.example.com/in",
            description=None,
            event_kinds=None,
            enabled=False,
            disabled_reason="disabled by the integration",
            failing_since=None,
            created_at=now - OLD,
            updated_at=now - OLD,
        )
        session.add(endpoint)

        async def event(age: timedelta, statuses: tuple[str, ...], goes: bool) -> None:
            e = Event(
                id=uuid.uuid4(),
                integration_id=deal.integration_id,
                deal_id=None,
                kind="deal.status",
                payload="{}",
                created_at=now - age,
            )
            session.add(e)
            await session.flush()
            rows.add("events", e.seq, goes=goes)
            for status in statuses:
                d = Delivery(
                    id=uuid.uuid4(),
                    event_seq=e.seq,
                    endpoint_id=endpoint.id,
                    integration_id=deal.integration_id,
                    status=status,
                    attempts=2,
                    next_attempt_at=now - age,
                    created_at=now - age,
                    updated_at=now - age,
                )
                session.add(d)
                rows.add("deliveries", d.id, goes=goes)
                for n in range(2):
                    a = DeliveryAttempt(
                        id=uuid.uuid4(),
                        delivery_id=d.id,
                        endpoint_id=endpoint.id,
                        event_id=e.id,
                        integration_id=deal.integration_id,
                        attempted_at=now - age + timedelta(minutes=n),
                        success=status == "succeeded" and n == 1,
                        status_code=200,
                        latency_ms=12,
                        error=None,
                        response_excerpt="ok",
                    )
                    session.add(a)
                    rows.add("delivery_attempts", a.id, goes=goes)

        for _ in range(4):
            await event(OLD, ("succeeded",), goes=True)
        await event(OLD, ("failed", "succeeded"), goes=True)
        await event(OLD, (), goes=True)
        await event(OLD, ("succeeded", "pending"), goes=False)  # still being delivered
        await event(RECENT, ("succeeded",), goes=False)

        def message(sent: timedelta | None, goes: bool) -> None:
            m = OutboxMessage(
                id=uuid.uuid4(),
                integration_id=deal.integration_id,
                deal_id=deal.deal_id,
                kind="offer_received",
                to_email="kari@example.com",
                subject="New offer on Bike",
                body="…",
                created_at=now - OLD,
                sent_at=None if sent is None else now - sent,
                attempts=1,
                next_attempt_at=None,
            )
            session.add(m)
            rows.add("outbox_messages", m.id, goes=goes)

        for _ in range(5):
            message(OLD, goes=True)
        message(RECENT, goes=False)
        message(None, goes=False)  # never sent (given up): kept for the operator

        def key(age: timedelta, goes: bool) -> None:
            k = IdempotencyKey(
                integration_id=deal.integration_id,
                key=str(uuid.uuid4()),
                fingerprint="f" * 64,
                response_status=201,
                response_body=b"{}",
                created_at=now - age,
            )
            session.add(k)
            rows.add("idempotency_keys", (k.integration_id, k.key), goes=goes)

        for _ in range(5):
            key(timedelta(hours=25), goes=True)
        key(timedelta(hours=1), goes=False)

        def token(expires_in: timedelta, goes: bool) -> None:
            t = AccessToken(
                token_hash=uuid.uuid4().hex,
                integration_id=deal.integration_id,
                scopes="deals:read",
                expires_at=now + expires_in,
                created_at=now + expires_in - timedelta(hours=1),
            )
            session.add(t)
            rows.add("access_tokens", t.token_hash, goes=goes)

        for _ in range(5):
            token(-timedelta(days=2), goes=True)
        token(-timedelta(minutes=10), goes=False)  # within the grace
        token(timedelta(minutes=30), goes=False)

        def refusal(age: timedelta, limit: str, goes: bool) -> None:
            r = RateLimitRefusal(
                integration_id=deal.integration_id,
                hour=refusals.hour_of((now - age).timestamp()),
                limit_name=limit,
                count=3,
            )
            session.add(r)
            rows.add("rate_limit_refusals", (r.integration_id, r.hour, r.limit_name), goes=goes)

        refusal(timedelta(days=8), "api", goes=True)
        refusal(timedelta(days=9), "token_failures", goes=True)
        refusal(timedelta(days=6), "api", goes=False)  # the back office shows the last week

        async def api_request(age: timedelta, goes: bool) -> None:
            r = ApiRequest(
                integration_id=deal.integration_id,
                at=now - age,
                method="GET",
                route="/deals/v1/deals/{dealId}",
                deal_id=deal.deal_id,
                status=200,
                request_id=uuid.uuid4().hex,
                duration_us=700,
            )
            session.add(r)
            await session.flush()
            rows.add("api_requests", r.seq, goes=goes)

        await api_request(timedelta(days=8), goes=True)
        await api_request(timedelta(days=7, minutes=1), goes=True)
        await api_request(timedelta(days=6), goes=False)  # the log keeps a week
    # Conversations go with their deal's end: long ago, lately, not yet.
    await conversation(sessionmaker, rows, ended=OLD, goes=True)
    await conversation(sessionmaker, rows, ended=OLD, goes=True, status=DealStatus.COMPLETED)
    await conversation(sessionmaker, rows, ended=RECENT, goes=False)
    await conversation(sessionmaker, rows, ended=None, goes=False)
    return rows


async def conversation(
    sessionmaker: async_sessionmaker[AsyncSession],
    rows: Rows,
    *,
    ended: timedelta | None,
    goes: bool,
    status: DealStatus = DealStatus.CANCELLED,
) -> None:
    """A deal of its own with a conversation whose messages are all older than the keep time;
    the deal ended ``ended`` ago (its last status change), or is still open (None)."""
    deal = await new_deal(sessionmaker)
    now = clock.now()
    older = now - OLD - timedelta(days=5)
    async with sessionmaker() as session, session.begin():
        # Its history (the creation's Draft) goes back to before the conversation.
        await session.execute(
            update(DealStatusChange)
            .where(DealStatusChange.deal_id == deal.deal_id)
            .values(created_at=older)
        )
        if ended is not None:
            await session.execute(
                update(Deal)
                .where(Deal.id == deal.deal_id)
                .values(status=status, updated_at=now - ended)
            )
            session.add(
                DealStatusChange(
                    id=uuid.uuid4(),
                    deal_id=deal.deal_id,
                    integration_id=deal.integration_id,
                    from_status="Draft",
                    to_status=status.value,
                    trigger="test",
                    actor="integration",
                    deal_version=2,
                    created_at=now - ended,
                )
            )
        link = OfferLink(
            id=uuid.uuid4(),
            deal_id=deal.deal_id,
            integration_id=deal.integration_id,
            token_hash=uuid.uuid4().hex,
            created_at=older,
        )
        session.add(link)
        await session.flush()
        c = Conversation(
            id=uuid.uuid4(),
            deal_id=deal.deal_id,
            integration_id=deal.integration_id,
            offer_link_id=link.id,
            created_at=older,
            last_message_at=older + timedelta(minutes=5),
        )
        session.add(c)
        await session.flush()
        rows.add("conversations", c.id, goes=goes)
        for n, author in enumerate(("buyer", "seller")):
            m = ConversationMessage(
                id=uuid.uuid4(),
                conversation_id=c.id,
                deal_id=deal.deal_id,
                author=author,
                body="Is the frame 56 cm?",
                warnings=[],
                created_at=older + timedelta(minutes=n * 5),
            )
            session.add(m)
            rows.add("conversation_messages", m.id, goes=goes)


KEYS: dict[str, tuple] = {
    "events": (Event.seq,),
    "deliveries": (Delivery.id,),
    "delivery_attempts": (DeliveryAttempt.id,),
    "outbox_messages": (OutboxMessage.id,),
    "idempotency_keys": (IdempotencyKey.integration_id, IdempotencyKey.key),
    "access_tokens": (AccessToken.token_hash,),
    "rate_limit_refusals": (
        RateLimitRefusal.integration_id,
        RateLimitRefusal.hour,
        RateLimitRefusal.limit_name,
    ),
    "api_requests": (ApiRequest.seq,),
    "conversations": (Conversation.id,),
    "conversation_messages": (ConversationMessage.id,),
}


async def present(sessionmaker: async_sessionmaker[AsyncSession], table: str) -> set:
    async with sessionmaker() as session:
        result = await session.execute(select(*KEYS[table]))
        return {r[0] if len(r) == 1 else tuple(r) for r in result}


async def purged(sessionmaker: async_sessionmaker[AsyncSession], rows: Rows) -> bool:
    """Whether every row meant to go went; asserts that every row meant to stay is there."""
    done = True
    for table in KEYS:
        here = await present(sessionmaker, table)
        assert rows.kept.get(table, set()) <= here, table
        done = done and not (rows.gone.get(table, set()) & here)
    return done


RETENTION = {
    "DEALBROKER_RETENTION_INTERVAL_SECONDS": "0.2",
    "DEALBROKER_RETENTION_BATCH_SIZE": "2",
    "DEALBROKER_RETENTION_MAX_BATCHES": "3",
    "DEALBROKER_RETENTION_PAUSE_SECONDS": "0",
    "DEALBROKER_CONVERSATION_RETENTION_DAYS": str(CONVERSATION_DAYS),
    "DEALBROKER_LOG_LEVEL": "info",
}


@pytest.mark.server
@pytest.mark.parametrize(
    ("backend", "process"),
    [(b, "worker") for b in BACKENDS] + [("sqlite", "serve")] * ("sqlite" in BACKENDS),
)
def test_the_worker_purges_what_outlived_its_keep_time(
    backend: str, process: str, tmp_path: Path
) -> None:
    db_url = database_url(backend, tmp_path, f"retention_{process}")

    async def run(step):  # type: ignore[no-untyped-def]
        engine = create_engine(db_url, pool_size=2)
        try:
            return await step(create_sessionmaker(engine))
        finally:
            await engine.dispose()

    running: Worker | Server | None = None
    metrics_port = free_port()
    settings = {
        **RETENTION,
        "DEALBROKER_METRICS_BIND": f"127.0.0.1:{metrics_port}",
        "DEALBROKER_METRICS_DIR": str(tmp_path / "metrics"),
    }
    try:
        rows = asyncio.run(run(seed))
        assert not asyncio.run(run(lambda sm: purged(sm, rows)))
        if process == "worker":
            running = Worker(db_url, tmp_path, **settings)
            running.wait_ready()
        else:
            running = Server(db_url, tmp_path, **settings)
        deadline = time.monotonic() + 30
        while not asyncio.run(run(lambda sm: purged(sm, rows))):
            assert time.monotonic() < deadline, "timed out waiting for the purge"
            time.sleep(0.2)
        # Counted by purge, as /metrics shows them: an event's deliveries and attempts go with
        # it, counted as the event; a conversation's messages with it, counted as it.
        expected = {
            table: len(keys)
            for table, keys in rows.gone.items()
            if table not in ("deliveries", "delivery_attempts", "conversation_messages")
        }
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        wait_until(lambda: _purged_by_table(metrics) == expected, 10, f"purge counts {expected}")
        if isinstance(running, Worker):
            running.process.terminate()
            assert running.wait() == 0, running.output()
        else:
            running.stop()
        output = running.output()
        # 27 rows at 3 batches of 2 a run: the purge took several runs, the job staying due.
        runs = [line for line in output.splitlines() if "retention: deleted" in line]
        assert len(runs) >= 3, output
        assert any("more to go" in line for line in runs), output
    finally:
        if isinstance(running, Worker):
            running.close()
        elif running is not None:
            running.stop()
        if backend == "postgresql":
            drop_database(db_url)


def _purged_by_table(url: str) -> dict[str, float]:
    try:
        text = httpx.get(url, timeout=5).text
    except httpx.TransportError:
        return {}
    return {
        sample.labels["table"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "dealbroker_retention_rows_purged_total"
    }


# --- in-process -----------------------------------------------------------------------------


async def old_events(sessionmaker: async_sessionmaker[AsyncSession], count: int) -> None:
    deal = await new_deal(sessionmaker)
    async with sessionmaker() as session, session.begin():
        for _ in range(count):
            session.add(
                Event(
                    id=uuid.uuid4(),
                    integration_id=deal.integration_id,
                    kind="deal.status",
                    payload="{}",
                    created_at=clock.now() - OLD,
                )
            )


def spied(job: RetentionJob) -> list[int]:
    """The size of every events batch the job deletes, in order."""
    sizes: list[int] = []
    purge = job._purges["events"]

    async def spy(session: AsyncSession, now: datetime, limit: int) -> int:
        count = await purge(session, now, limit)
        sizes.append(count)
        return count

    job._purges["events"] = spy
    return sizes


async def test_a_run_deletes_in_bounded_batches(sessionmaker, db_url):
    await old_events(sessionmaker, 10)
    # A cap above what one pass over every table takes: this run finishes.
    settings = make_settings(
        db_url, retention_batch_size=3, retention_max_batches=100, retention_pause_seconds=0
    )
    job = RetentionJob(sessionmaker, settings)
    sizes = spied(job)
    assert await job.run_once() == 10
    assert sizes == [3, 3, 3, 1]
    assert job.every == settings.retention_interval_seconds  # all clean: wait for the next run


async def test_a_run_stops_at_its_cap_and_stays_due(sessionmaker, db_url):
    await old_events(sessionmaker, 10)
    settings = make_settings(
        db_url, retention_batch_size=3, retention_max_batches=1, retention_pause_seconds=0
    )
    job = RetentionJob(sessionmaker, settings)
    sizes = spied(job)
    assert await job.run_once() == 3
    assert job.every == 0  # more to go: due again at the runner's next round
    while job.every == 0:
        await job.run_once()
    assert sizes == [3, 3, 3, 1]
    async with sessionmaker() as session:
        assert await session.scalar(select(func.count()).select_from(Event)) == 1  # new_deal's


async def test_after_a_purged_event_the_events_api_answers_404(
    client, caller, sessionmaker, db_url
):
    await create_deal(client, caller)
    first = (await client.get("/events/v1/events", headers=caller.headers)).json()["items"][0]
    async with sessionmaker() as session, session.begin():
        await session.execute(update(Event).values(created_at=clock.now() - OLD))
    job = RetentionJob(sessionmaker, make_settings(db_url, retention_pause_seconds=0))
    assert await job.run_once() >= 1
    response = await client.get(
        "/events/v1/events", params={"after": first["id"]}, headers=caller.headers
    )
    assert response.status_code == 404
    assert first["id"] in response.json()["detail"]


def test_the_event_retention_may_not_be_shorter_than_the_retry_window():
    assert RETRY_WINDOW_DAYS == 4  # about 3 days of retries, stretched by jitter, rounded up
    Settings(event_retention_days=RETRY_WINDOW_DAYS)
    with pytest.raises(ValidationError, match="EVENT_RETENTION_DAYS must be at least 4"):
        Settings(event_retention_days=RETRY_WINDOW_DAYS - 1)


# --- the query plans (PostgreSQL) -----------------------------------------------------------


async def explain(session: AsyncSession, statement) -> str:  # type: ignore[no-untyped-def]
    sql = statement.compile(
        dialect=session.get_bind().dialect, compile_kwargs={"literal_binds": True}
    )
    return "\n".join(await session.scalars(text(f"EXPLAIN {sql}")))


async def test_the_event_purge_reads_an_index_on_a_big_table(sessionmaker, db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("query plans are PostgreSQL's")
    deal = await new_deal(sessionmaker)
    async with sessionmaker() as session, session.begin():
        params = {"integration": deal.integration_id, "old": clock.now() - OLD}
        await session.execute(
            text(
                "INSERT INTO webhook_endpoints (id, integration_id, url, enabled, created_at,"
                " updated_at) VALUES (gen_random_uuid(), :integration, 'https://e.example',"
                " true, :old, :old)"
            ),
            params,
        )
        await session.execute(
            text(
                "INSERT INTO events (id, integration_id, kind, payload, created_at)"
                " SELECT gen_random_uuid(), :integration, 'deal.status', '{}',"
                " CAST(:old AS timestamptz) + i * interval '1 second'"
                " FROM generate_series(1, 20000) AS i"
            ),
            params,
        )
        await session.execute(
            text(
                "INSERT INTO deliveries (id, event_seq, endpoint_id, integration_id, status,"
                " attempts, next_attempt_at, created_at, updated_at)"
                " SELECT gen_random_uuid(), seq, (SELECT id FROM webhook_endpoints), integration_id,"
                " 'succeeded', 1, created_at, created_at, created_at FROM events"
            )
        )
    async with sessionmaker() as session:
        await session.execute(text("ANALYZE events"))
        await session.execute(text("ANALYZE deliveries"))
        plan = await explain(
            session, events.purgeable_events(clock.now() - timedelta(days=30), 1000)
        )
    assert "ix_events_created_at" in plan, plan
    assert "Seq Scan" not in plan, plan


async def test_every_purge_can_use_an_index(sessionmaker, db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("query plans are PostgreSQL's")
    now = clock.now()
    statements = {
        "ix_outbox_messages_sent": outbox.purgeable_messages(now, 1000),
        "ix_idempotency_keys_created_at": idempotency.purgeable_keys(now, 1000),
        "ix_access_tokens_expires_at": tokens.purgeable_tokens(now, 1000),
        "ix_eid_signatures_started_at": eid_flows.purgeable_unfinished(now, 1000),
        "ix_eid_signatures_finished_at": eid_flows.forgettable_evidence(now, 1000),
        "ix_rate_limit_refusals_hour": integrations.purgeable_refusals(
            refusals.hour_of(now.timestamp()), 1000
        ),
        "ix_api_requests_at": integrations.purgeable_api_requests(now, 1000),
    }
    async with sessionmaker() as session, session.begin():
        # The tables are nearly empty here, where a sequential scan is cheapest: forbid it to
        # see which index the planner has for the query.
        await session.execute(text("SET LOCAL enable_seqscan = off"))
        for index, statement in statements.items():
            plan = await explain(session, statement)
            assert index in plan, plan
            assert "Seq Scan" not in plan, plan


async def test_the_conversation_purge_reads_each_deal_by_key(sessionmaker, db_url):
    """The conversations' purge reads the conversations quiet longest first, through their
    index on the last message's time, and for each its deal by key and the deal's last status
    change backwards through its index; never a scan of the deals or their history."""
    if not db_url.startswith("postgresql"):
        pytest.skip("query plans are PostgreSQL's")
    statement = conversations.purgeable_conversations(clock.now(), 1000)
    async with sessionmaker() as session, session.begin():
        await session.execute(text("SET LOCAL enable_seqscan = off"))
        plan = await explain(session, statement)
    assert "ix_conversations_last_message_at" in plan, plan
    assert "pk_deals" in plan, plan
    assert "ix_deal_status_history_deal" in plan, plan
    assert "Seq Scan on deals" not in plan, plan
    assert "Seq Scan on deal_status_history" not in plan, plan
