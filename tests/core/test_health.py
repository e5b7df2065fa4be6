"""Health checks: liveness without the database, readiness with a current schema."""

import time

import httpx
import pytest
from alembic import command

from dealbroker.app import create_app
from dealbroker.core.db import create_engine
from dealbroker.core.migrate import alembic_config, head_revision
from tests.conftest import BACKENDS, BASE_URL, database_url, make_settings
from tests.processes import silent_port


async def test_healthz_and_readyz_answer_on_a_current_schema(client):
    alive = await client.get("/healthz")
    assert (alive.status_code, alive.json()) == (200, {"status": "ok"})
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.json()) == (
        200,
        {"status": "ready", "schema": head_revision(), "restarting": []},
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def behind(request: pytest.FixtureRequest, tmp_path) -> str:
    """A database one migration behind the code (made outside the event loop: Alembic runs
    its own)."""
    if request.param not in BACKENDS:
        pytest.skip(f"{request.param} is not among the test backends")
    url = database_url(request.param, tmp_path, "readyz")
    command.downgrade(alembic_config(url), "-1")
    return url


async def test_readyz_refuses_a_schema_behind_the_code(behind):
    url = behind
    engine = create_engine(url, pool_size=2)
    app = create_app(make_settings(url), engine)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
                assert (await client.get("/healthz")).status_code == 200
                ready = await client.get("/readyz")
                assert ready.status_code == 503
                assert ready.headers["content-type"] == "application/problem+json"
                assert "run dealbroker migrate" in ready.json()["detail"]
    finally:
        await engine.dispose()


async def test_an_unreachable_database_is_503_not_500(app, client):
    """PostgreSQL down or restarting: connecting fails in the driver (ConnectionRefusedError),
    before SQLAlchemy wraps it. The API says to try again shortly."""
    from dealbroker.core.db import create_read_sessionmaker, create_sessionmaker

    closed = create_engine("postgresql+asyncpg://postgres@127.0.0.1:1/nothing", pool_size=1)
    saved = app.state.sessionmaker, app.state.read_sessionmaker, app.state.probe_engine
    app.state.sessionmaker = create_sessionmaker(closed)
    app.state.read_sessionmaker = create_read_sessionmaker(closed)
    app.state.probe_engine = closed  # the health checks' own connection
    try:
        for path in ("/ping", "/readyz"):
            response = await client.get(path)
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "5"
            assert response.json()["type"].endswith("service-unavailable")
        assert (await client.get("/healthz")).status_code == 200  # the process itself is alive
    finally:
        app.state.sessionmaker, app.state.read_sessionmaker, app.state.probe_engine = saved
        await closed.dispose()


async def test_a_database_that_does_not_answer_is_503_within_the_connect_timeout(
    app, client, monkeypatch
):
    """PostgreSQL hung, or behind a stuck proxy: the connection is made and never answered.
    Opening one gives up after ``CONNECT_TIMEOUT`` (asyncpg's own default is 60 s), and the
    API says to try again shortly: a fast 503, not a 500 a minute later."""
    from dealbroker.core import db
    from dealbroker.core.db import create_read_sessionmaker, create_sessionmaker

    monkeypatch.setattr(db, "CONNECT_TIMEOUT", 0.5)
    saved = app.state.sessionmaker, app.state.read_sessionmaker, app.state.probe_engine
    with silent_port() as port:
        silent = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/none", pool_size=1)
        app.state.sessionmaker = create_sessionmaker(silent)
        app.state.read_sessionmaker = create_read_sessionmaker(silent)
        app.state.probe_engine = silent
        try:
            # A request that reads the database through the pool (the probes have a deadline
            # of their own, ``ping.PROBE_TIMEOUT``).
            started = time.monotonic()
            response = await client.post(
                "/oauth2/token",
                data={"grant_type": "client_credentials"},
                auth=("an-unknown-client", "its-secret"),
            )
            assert response.status_code == 503, response.text
            assert time.monotonic() - started < 10  # the connect timeout's, not 60 s
            assert response.headers["retry-after"] == "5"
            assert response.json()["type"].endswith("service-unavailable")
        finally:
            app.state.sessionmaker, app.state.read_sessionmaker, app.state.probe_engine = saved
            await silent.dispose()
