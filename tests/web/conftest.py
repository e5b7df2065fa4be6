"""The browser walks' fixtures of tests/web: the real server, the demo integration calling its
API (the setup itself is in ``tests/browser.py``)."""

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.browser import Integration, LiveServer, serve_module
from tests.conftest import BACKENDS


@pytest.fixture(scope="module", params=BACKENDS)
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """``dealbroker serve`` on an empty database (it makes the demo integration), per module."""
    for server, _ in serve_module(request, tmp_path_factory, "browser"):
        yield server


@pytest.fixture
async def integration(live: LiveServer) -> AsyncIterator[Integration]:
    async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
        token = await api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(live.credential("client id"), live.credential("client secret")),
        )
        assert token.status_code == 200, token.text
        assert token.json()["token_type"] == "Bearer"
        api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        yield Integration(api, live.credential("webhook secret"))
