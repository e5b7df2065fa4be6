"""The application's routes are its own, not included routers: each request is matched as a
bare FastAPI app matches (``core.routing``), the health checks first."""

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from dealbroker.app import create_app
from dealbroker.core import routing
from tests.conftest import make_settings


def test_the_app_holds_its_routes_itself_the_health_checks_first(tmp_path):
    app = create_app(make_settings(f"sqlite+aiosqlite:///{tmp_path}/r.db"))
    api = [r for r in app.router.routes if isinstance(r, APIRoute)]
    # No router is left as a branch that every request would walk.
    assert all(type(r).__name__ != "_IncludedRouter" for r in app.router.routes)
    paths = [r.path for r in api]
    assert paths.index("/healthz") < paths.index("/oauth2/token") < paths.index("/deals/v1/deals")
    assert "/back-office/login" in paths


def test_a_nested_router_is_refused():
    outer, inner = APIRouter(), APIRouter()

    @inner.get("/x")
    async def x() -> None:
        return None

    outer.include_router(inner)
    with pytest.raises(TypeError, match="flattened"):
        routing.include(FastAPI(), outer)
