"""Test fixtures: every API test runs on SQLite and on PostgreSQL, against migrated databases.

``DEALBROKER_TEST_BACKENDS`` (comma-separated, default ``sqlite,postgresql``) picks backends;
``DEALBROKER_TEST_PG_URL`` points at the PostgreSQL server (default: local, user postgres).
Each backend's database is created fresh and migrated once; every table is emptied after each
test, so tests never see each other's rows.
"""

import asyncio
import inspect
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from dealbroker.app import create_app
from dealbroker.cli.common import start_messages
from dealbroker.core import clock
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.migrate import upgrade
from dealbroker.core.settings import Settings
from dealbroker.events.tasks import DeliveryJob
from dealbroker.integrations import service as integrations
from dealbroker.models import metadata
from tests.receiver import Receiver, start_receiver

# The virtual environment holding only the Python client (``client_venv``), made once a session
# for the tests of its command line and of the integration guide.
pytest_plugins = ["tests.client_venv"]

PG_SERVER = os.environ.get("DEALBROKER_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432")
BACKENDS = [
    b for b in os.environ.get("DEALBROKER_TEST_BACKENDS", "sqlite,postgresql").split(",") if b
]
BASE_URL = "http://testserver"
# Rows the app creates for itself once (the link-signing key) survive between tests.
KEEP_TABLES = {"instance_settings", "alembic_version"}


# The PostgreSQL databases this run created, dropped when it ends (``pytest_sessionfinish``).
CREATED_DATABASES: set[str] = set()


def _create_pg_database(name: str) -> str:
    CREATED_DATABASES.add(name)

    async def run() -> None:
        admin = create_engine(f"{PG_SERVER}/postgres", pool_size=1)
        try:
            async with admin.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                await conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            await admin.dispose()

    asyncio.run(run())
    return f"{PG_SERVER}/{name}"


def drop_databases(names: set[str]) -> None:
    """Drop these PostgreSQL databases, even with connections still open (a killed server's)."""

    async def run() -> None:
        admin = create_engine(f"{PG_SERVER}/postgres", pool_size=1)
        try:
            async with admin.connect() as conn:
                conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                for name in sorted(names):
                    await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            await admin.dispose()

    if names:
        asyncio.run(run())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run leaves no database behind, whether its tests passed or not."""
    drop_databases(CREATED_DATABASES)
    CREATED_DATABASES.clear()


def database_url(backend: str, tmp_dir: Path, label: str) -> str:
    """A fresh, migrated database of ``backend`` for this test run."""
    if backend == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_dir / f'{label}.db'}"
    else:
        url = _create_pg_database(f"dealbroker_test_{label}_{os.getpid()}")
    upgrade(url)
    return url


@pytest.fixture(scope="session", params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return database_url(request.param, tmp_path_factory.mktemp(request.param), "api")


@pytest.fixture
def pg_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database of the test's own, dropped after it: for the tests
    of processes that run beside PostgreSQL (skipped where it is not among the backends)."""
    if "postgresql" not in BACKENDS:
        pytest.skip("the worker processes run beside PostgreSQL")
    url = database_url("postgresql", tmp_path, "p_" + request.node.name.removeprefix("test_")[:20])
    yield url
    drop_databases({url.rsplit("/", 1)[1]})


@pytest.fixture(scope="session")
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(db_url, pool_size=10)
    yield eng
    await eng.dispose()


@pytest.fixture(scope="session")
def sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return create_sessionmaker(engine)


def make_settings(db_url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "database_url": db_url,
        "base_url": BASE_URL,
        "embedded_worker": "off",
        # The tests read the pages and messages in English, the words of the code; the
        # translations and the locale choice have tests of their own (tests/web/test_locale.py).
        "default_locale": "en",
        # Production needs one; every environment shows it on its pages and messages.
        "support_email": "support@market.example.com",
        # The request log is written when the app stops, not every second: a test that runs a
        # CLI command blocks its event loop, and a flush caught holding SQLite's write lock
        # then would hold it for the command's whole run ("database is locked" in the command).
        "api_request_log_flush_seconds": 3600,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
def fast_paths_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast paths on (``DEALBROKER_FAST_PATHS``), whatever the environment says: for the
    tests of the fast paths themselves, which ``scripts/test`` may run with them off."""
    monkeypatch.setenv("DEALBROKER_FAST_PATHS", "true")


@pytest.fixture
async def app(db_url: str, engine: AsyncEngine) -> AsyncIterator[object]:
    application = create_app(make_settings(db_url), engine)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


@pytest.fixture
async def production_app(db_url: str, engine: AsyncEngine) -> AsyncIterator[object]:
    """The app as production builds it, on the same database as ``client``'s sandbox app."""
    settings = make_settings(db_url, environment="production", secret_key="p" * 40)
    application = create_app(settings, engine)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def production_client(production_app: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=production_app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
        yield c


@pytest.fixture
def loopback_is_public(monkeypatch: pytest.MonkeyPatch) -> None:
    """Treat 127.0.0.0/8 as public, so a loopback receiver stands in for a public endpoint
    (only a public destination's answer is kept with an attempt)."""
    import ipaddress

    from dealbroker.events import egress

    real = egress._non_public_reason

    def reason(address):  # type: ignore[no-untyped-def]
        return None if address in ipaddress.ip_network("127.0.0.0/8") else real(address)

    monkeypatch.setattr(egress, "_non_public_reason", reason)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback (``tests/receiver.py``), closed after the test."""
    r = start_receiver()
    yield r
    r.close()


@pytest.fixture
async def worker(sessionmaker: async_sessionmaker[AsyncSession]) -> AsyncIterator[DeliveryJob]:
    """A webhook delivery job that may deliver to loopback, with no jitter, so the schedule is
    exact (the clock is whatever the test sets), with the fast paths as the environment sets
    them (``scripts/test`` runs the webhook tests with them off too)."""
    w = DeliveryJob(
        sessionmaker, allow_private=True, rng=lambda: 0.0, fast_paths=Settings().fast_paths
    )
    yield w
    await w.aclose()


@pytest.fixture(autouse=True)
async def _messages(request: pytest.FixtureRequest) -> None:
    """Tests that call the services directly are a process of their own: like the app and the
    worker at their start, they tell the notifications this deployment's links."""
    if "sessionmaker" not in request.fixturenames:
        return
    maker: async_sessionmaker[AsyncSession] = request.getfixturevalue("sessionmaker")
    await start_messages(maker, make_settings(request.getfixturevalue("db_url")))


@pytest.fixture(autouse=True)
async def _clean(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    yield
    clock.reset_clock()
    if "engine" not in request.fixturenames:
        return
    eng: AsyncEngine = request.getfixturevalue("engine")
    async with eng.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            if table.name in KEEP_TABLES:
                continue
            if table.name == "audit_records" and conn.dialect.name == "postgresql":
                # Append-only: its trigger refuses DELETE; TRUNCATE is no row change.
                await conn.execute(text("TRUNCATE audit_records"))
            else:
                await conn.execute(delete(table))


@dataclass
class Caller:
    """An integration with a token, ready to call the API."""

    integration_id: uuid.UUID
    client_id: str
    client_secret: str
    webhook_secret: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


async def make_caller(
    client: httpx.AsyncClient,
    sessionmaker: async_sessionmaker[AsyncSession],
    name: str = "Marketplace",
    scopes: list[str] | None = None,
) -> Caller:
    async with sessionmaker() as session, session.begin():
        created = await integrations.create(session, name, scopes)
    i = created.integration
    response = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(i.client_id, created.client_secret),
    )
    assert response.status_code == 200, response.text
    return Caller(
        i.id, i.client_id, created.client_secret, i.webhook_secret, response.json()["access_token"]
    )


@pytest.fixture
async def caller(
    client: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> Caller:
    return await make_caller(client, sessionmaker)


@pytest.fixture
async def other(
    client: httpx.AsyncClient, sessionmaker: async_sessionmaker[AsyncSession]
) -> Caller:
    return await make_caller(client, sessionmaker, "Other marketplace")


SELLER = {
    "firstname": "Kari",
    "lastname": "Nordmann",
    "phone": "+47 400 00 000",
    "email": "kari@example.com",
    "address": "Storgata 1",
    "postcode": "0155",
    "town": "Oslo",
}


async def advance_clock(client: httpx.AsyncClient, caller: "Caller", seconds: int) -> dict:
    """Move the integration's sandbox clock ``seconds`` on (its deals' deadlines come closer
    and fire when due): the endpoint's answer, which says how many deadlines fired."""
    moved = await client.post(
        "/sandbox/v1/clock/advance",
        json={"seconds": seconds},
        headers={"webhook-secret": caller.webhook_secret},
    )
    assert moved.status_code == 200, moved.text
    return moved.json()


async def create_deal(client: httpx.AsyncClient, caller: Caller, **fields: object) -> dict:
    body: dict[str, object] = {"name": "Road bike", "price": 4500.5, "seller": SELLER}
    body.update(fields)
    response = await client.post("/deals/v1/deals", json=body, headers=caller.headers)
    assert response.status_code == 201, response.text
    return response.json()


async def row_counts(sessionmaker: async_sessionmaker[AsyncSession]) -> dict[str, int]:
    """Rows per table: compared before and after a refused request to prove nothing was stored.
    The rate limits' counters and the request log are left out: every request with a credential
    may claim some of its integration's budget, and is in its log, refused or not."""
    async with sessionmaker() as session:
        return {
            t.name: int(await session.scalar(select(func.count()).select_from(t)) or 0)
            for t in metadata.sorted_tables
            if t.name not in ("rate_limit_counters", "api_requests")
        }


@pytest.fixture
def frozen_clock() -> Iterator[list]:
    """A clock the test moves by hand: ``frozen_clock[0]`` is the current time."""
    from datetime import UTC, datetime

    now = [datetime(2026, 11, 22, 12, 0, tzinfo=UTC)]
    clock.set_clock(lambda: now[0])
    yield now
    clock.reset_clock()


async def eventually(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    """Wait, checking every 10 ms, until ``predicate()`` holds (awaited, if it is a coroutine
    function's); fail after ``timeout`` s."""
    for _ in range(int(timeout / 0.01)):
        held = predicate()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


def inside_one_window(seconds: float) -> None:
    """Wait, if need be, for a rate-limit window with ``seconds`` left in it: the limits count
    per fixed minute, so a test that counts requests must not straddle two."""
    from dealbroker.core.ratelimit import WINDOW_SECONDS

    if time.time() % WINDOW_SECONDS > WINDOW_SECONDS - seconds:
        time.sleep(WINDOW_SECONDS - time.time() % WINDOW_SECONDS + 0.1)


# --- the browser tests' Chromium and screenshots (tests/browser.py) ------------------------------


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[object]:
    """Debian's Chromium, launched once per test process for every browser test it runs; each
    test opens browser contexts of its own."""
    from tests.browser import launch

    async for launched in launch():
        yield launched


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the test's screenshots go (``tests.browser.screenshots``)."""
    from tests.browser import screenshots

    return screenshots(tmp_path)


# --- the Bring emulator (tests/carriers/emulator.py) ----------------------------------------------


@pytest.fixture(scope="session")
def vipps_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Vipps MobilePay's APIs, emulated in a process of their own on loopback, once per test
    process (``VippsEmulator``: its ``settings()`` and control methods)."""
    from tests.payments.vipps_process import VippsEmulator

    emulator = VippsEmulator(tmp_path_factory.mktemp("vipps"))
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def bring_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Bring's APIs, emulated in a process of their own on loopback, once per test process
    (``BringEmulator``: its ``settings()`` and control helpers); ``reset()`` it between tests
    that count bookings."""
    from tests.carriers.emulator import BringEmulator

    emulator = BringEmulator(tmp_path_factory.mktemp("bring"))
    try:
        yield emulator
    finally:
        emulator.stop()


# --- the Swish emulator (tests/payments/swish_fixture.py) ------------------------------------------


@pytest.fixture(scope="session")
def swish_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Swish's Commerce API emulated over mutual TLS in a process of its own on loopback
    (``tests.payments.swish_fixture.SwishEmulator``), with the test certificates."""
    from tests.payments.swish_fixture import SwishEmulator

    emulator = SwishEmulator(tmp_path_factory.mktemp("swish"))
    try:
        yield emulator
    finally:
        emulator.stop()


# --- the Swish payouts emulator (tests/payments/swish_payouts_process.py) ---------------------


@pytest.fixture(scope="session")
def swish_payouts_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Swish's Payouts API, emulated in a process of its own on loopback behind mutual TLS
    (``SwishPayoutsEmulator``); ``reset()`` it in each test."""
    from tests.payments.swish_payouts_process import SwishPayoutsEmulator

    emulator = SwishPayoutsEmulator(tmp_path_factory.mktemp("swish-payouts"))
    try:
        yield emulator
    finally:
        emulator.stop()
