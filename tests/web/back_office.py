"""Operators made and logged in to the back office through its pages, for the back office's tests."""

import re

import httpx

from dealbroker.audit.service import Actor
from dealbroker.operators import service
from tests.conftest import BASE_URL
from tests.web.login_links import press


async def make_operator(sessionmaker, email: str, *roles: str) -> None:
    async with sessionmaker() as session, session.begin():
        await service.add(session, email, list(roles), Actor("system:test"))


async def log_in(client: httpx.AsyncClient, sessionmaker, email: str) -> None:
    async with sessionmaker() as session, session.begin():
        link, _ = await service.issue_login_link(
            session,
            email,
            client._transport.app.state.settings,
            Actor("system:test"),  # type: ignore[attr-defined]
        )
    answer = await press(client, link.removeprefix(BASE_URL))
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/back-office/"


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)


def flat_routes(routes: list) -> list:
    """Every route of the app, through its included routers."""
    found = []
    for route in routes:
        included = getattr(route, "original_router", None)
        found += flat_routes(included.routes) if included is not None else [route]
    return found
