"""The in-memory cache of live tokens (PostgreSQL): bounded, never stale after a revocation,
off while revocations could be missed, and a revocation heard by every server process."""

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from dealbroker.auth import repository, service
from dealbroker.auth.token_cache import APPLICATION_NAME, CachedToken, Listener, TokenCache
from dealbroker.core.background import Supervisor
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.security import hash_token
from dealbroker.integrations import service as integrations
from tests.conftest import BACKENDS, database_url
from tests.processes import Server, cli, drop_database, wait_until
from tests.proxy import StallingProxy

pytestmark = pytest.mark.skipif("postgresql" not in BACKENDS, reason="PostgreSQL only")

LATER = datetime(2100, 1, 1, tzinfo=UTC)


def _entry(integration_id: uuid.UUID) -> CachedToken:
    return CachedToken(integration_id, frozenset({"deals:read"}), LATER)


def _listening_cache(max_entries: int = 10) -> TokenCache:
    cache = TokenCache(max_entries)
    cache.listening = True
    return cache


def test_a_fill_that_raced_an_eviction_is_not_stored():
    """A request read the token before its revocation committed; the eviction ran meanwhile:
    what it read must not land in the cache after the eviction."""
    cache = _listening_cache()
    integration = uuid.uuid4()
    generation = cache.generation  # taken before the database read
    cache.evict_integration(integration)  # the revocation, heard while the read was in flight
    cache.put("h", _entry(integration), generation)
    assert cache.get("h") is None
    cache.put("h", _entry(integration), cache.generation)  # a read after it is stored
    assert cache.get("h") is not None


def test_nothing_is_stored_while_not_listening_and_the_size_is_bounded():
    cache = TokenCache(max_entries=2)
    cache.put("a", _entry(uuid.uuid4()), cache.generation)
    assert len(cache) == 0  # revocations could be missed: no caching
    cache.listening = True
    for key in ("a", "b", "a", "c"):  # "b" is the least recently used when "c" comes
        cache.put(key, _entry(uuid.uuid4()), cache.generation)
    assert cache.get("b") is None
    assert cache.get("a") is not None
    assert cache.get("c") is not None
    cache.stop_caching()
    assert len(cache) == 0
    assert not cache.listening


def test_eviction_takes_only_that_integrations_tokens():
    cache = _listening_cache()
    gone, kept = uuid.uuid4(), uuid.uuid4()
    cache.put("a", _entry(gone), cache.generation)
    cache.put("b", _entry(kept), cache.generation)
    cache.evict_integration(gone)
    assert cache.get("a") is None
    assert cache.get("b") is not None


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = database_url("postgresql", tmp_path_factory.mktemp("tokencache"), "tokencache")
    yield url
    drop_database(url)


@pytest.fixture
async def maker(pg: str) -> AsyncIterator[object]:
    engine = create_engine(pg, pool_size=2)
    yield create_sessionmaker(engine)
    await engine.dispose()


async def _until(condition: object, timeout: float = 5) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    start = time.monotonic()
    while not condition():  # type: ignore[operator]
        assert time.monotonic() - start < timeout, "condition not met in time"
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def _issued(maker: object) -> tuple[str, str]:
    """A new integration's client id and a live token of it."""
    async with maker() as session, session.begin():  # type: ignore[operator]
        created = await integrations.create(session, f"Cache {uuid.uuid4()}")
        client_id, secret = created.integration.client_id, created.client_secret
        issued = await service.issue_token(session, client_id, secret, None, 3600)
    return client_id, issued.access_token


async def test_a_read_racing_a_revocation_leaves_nothing_cached(maker, monkeypatch):
    """Through ``principal_for``: the revocation commits and is heard while the token's row is
    being read; the answer may still be the row read, but the cache stays empty."""
    cache = _listening_cache()
    client_id, token = await _issued(maker)
    real = repository.live_token

    async def read_then_revoked(session, token_hash):  # type: ignore[no-untyped-def]
        row = await real(session, token_hash)
        async with maker() as other, other.begin():
            await integrations.rotate_secret(other, client_id)  # evicts at commit
        return row

    monkeypatch.setattr(repository, "live_token", read_then_revoked)
    async with maker() as session:
        assert await service.principal_for(session, token, cache) is not None
    assert cache.get(hash_token(token)) is None
    monkeypatch.setattr(repository, "live_token", real)
    async with maker() as session:
        assert await service.principal_for(session, token, cache) is None


async def test_the_listener_hears_revocations_and_turns_the_cache_off_when_cut(pg, maker):
    cache = TokenCache()
    listener = Listener(cache, maker.kw["bind"])
    background = Supervisor()
    background.start("token-cache-listener", listener.run, Listener.STOP_WITHIN)
    try:
        await _until(lambda: cache.listening)
        client_id, token = await _issued(maker)
        async with maker() as session:
            assert await service.principal_for(session, token, cache) is not None
        assert cache.get(hash_token(token)) is not None  # cached

        # Another process's revocation: a plain pg_notify, as the CLI's transaction sends it.
        integration_id = cache.get(hash_token(token)).integration_id  # type: ignore[union-attr]
        async with maker() as session, session.begin():
            await session.execute(
                text("SELECT pg_notify('dealbroker_tokens_revoked', :i)"),
                {"i": str(integration_id)},
            )
        await _until(lambda: cache.get(hash_token(token)) is None, timeout=1)

        # The listening connection is cut: the cache is emptied and stores nothing until LISTEN
        # is back.
        cache.put("other", _entry(uuid.uuid4()), cache.generation)
        async with maker() as session, session.begin():
            await session.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = :name"
                ),
                {"name": APPLICATION_NAME},
            )
        await _until(lambda: not cache.listening, timeout=2)
        assert len(cache) == 0
        cache.put("other", _entry(uuid.uuid4()), cache.generation)
        assert len(cache) == 0
        await _until(lambda: cache.listening, timeout=5)  # reconnected and listening again
    finally:
        await background.stop()
    assert not cache.listening


@pytest.fixture
def empty_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database with no integration yet: the first server registers one and prints it."""
    url = database_url("postgresql", tmp_path_factory.mktemp("twoservers"), "twoservers")
    yield url
    drop_database(url)


@pytest.mark.server
def test_a_revocation_reaches_the_other_server_process_at_once(empty_pg, tmp_path, record_property):
    """Two ``serve`` processes on one database both cache a token; rotating the client secret
    from the CLI (a third process) makes both refuse it well within a second."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pg = empty_pg
    first = Server(pg, tmp_path / "a")
    second = Server(pg, tmp_path / "b")
    try:
        client_id = first.credential("client id")
        token = httpx.post(
            f"{first.base}/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(client_id, first.credential("client secret")),
        ).json()["access_token"]
        bearer = {"Authorization": f"Bearer {token}"}
        for server in (first, second, first, second):  # read, then served from each cache
            assert httpx.get(f"{server.base}/deals/v1/deals", headers=bearer).status_code == 200

        rotated = cli(pg, "integrations", "rotate-secret", client_id)
        assert rotated.returncode == 0, rotated.stderr
        revoked_at = time.monotonic()
        waits = {}
        for name, server in (("second", second), ("first", first)):
            while True:
                status = httpx.get(f"{server.base}/deals/v1/deals", headers=bearer).status_code
                if status == 401:
                    waits[name] = time.monotonic() - revoked_at
                    break
                assert status == 200
                assert time.monotonic() - revoked_at < 2, f"{name} still accepts the token"
                time.sleep(0.005)
        record_property("seconds_until_refused", waits)
        assert waits["second"] < 0.5, waits
    finally:
        first.stop()
        second.stop()


def _json(lines: list[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


@pytest.mark.server
def test_an_outage_is_logged_as_one_run_and_revocations_are_heard_after_it(empty_pg, tmp_path):
    """The database goes away for some 15 s (a loopback proxy drops every connection and
    refuses new ones): the listener's retries write one line and its recovery one more, not a
    line per attempt; once back, a secret rotated in another process is refused at once."""
    url = make_url(empty_pg)
    with StallingProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        proxied = url.set(port=proxy.port).render_as_string(hide_password=False)
        server = Server(
            proxied, tmp_path, DEALBROKER_LOG_FORMAT="json", DEALBROKER_EMBEDDED_WORKER="off"
        )
        try:
            client_id = server.credential("client id")
            token = httpx.post(
                f"{server.base}/oauth2/token",
                data={"grant_type": "client_credentials"},
                auth=(client_id, server.credential("client secret")),
            ).json()["access_token"]
            bearer = {"Authorization": f"Bearer {token}"}
            deals = f"{server.base}/deals/v1/deals"
            assert httpx.get(deals, headers=bearer).status_code == 200
            before = len(server.lines)

            def listener_lines() -> list[str]:
                return [
                    str(line["message"])
                    for line in _json(server.lines[before:])
                    if str(line["message"]).startswith("token cache")
                ]

            proxy.down()
            time.sleep(15)
            during = listener_lines()
            proxy.up()
            assert len(during) == 1, during  # about 15 attempts: one line
            wait_until(
                lambda: any("recovered" in m for m in listener_lines()), 20, "listening again"
            )
            wait_until(
                lambda: httpx.get(deals, headers=bearer).status_code == 200, 20, "serving again"
            )
            lines = listener_lines()
            assert len(lines) == 2, lines
            assert re.fullmatch(r"token cache listener failed; cache off, .*", lines[0]), lines
            assert re.fullmatch(r"token cache listener recovered after \d+ failures .*", lines[1])

            for _ in range(2):  # read, then served from the cache
                assert httpx.get(deals, headers=bearer).status_code == 200
            rotated = cli(empty_pg, "integrations", "rotate-secret", client_id)
            assert rotated.returncode == 0, rotated.stderr
            revoked_at = time.monotonic()
            while (status := httpx.get(deals, headers=bearer).status_code) != 401:
                assert status == 200
                assert time.monotonic() - revoked_at < 0.5, "the revoked token still works"
                time.sleep(0.005)
        finally:
            server.stop()
