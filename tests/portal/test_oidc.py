"""The developer portal's OpenID Connect login, through the back office's layer (the same
provider settings) on its own callback, against the real ``oidc-provider`` on loopback (see
tests/operators/test_oidc.py): the verified e-mail of a member logs in; anyone else, a replayed
code or another browser's state, does not."""

from collections.abc import AsyncIterator, Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import select

from dealbroker.audit.models import AuditRecord
from dealbroker.integrations import service as integrations
from dealbroker.portal.models import PortalSession
from dealbroker.web.portal.pages import CALLBACK_PATH
from tests.conftest import BASE_URL
from tests.oidc import EMAIL, Provider, oidc_client
from tests.web.portal_helpers import add_member, make_integration

pytestmark = pytest.mark.server

CALLBACK = BASE_URL + CALLBACK_PATH
PENDING = "dealbroker-portal-oidc"


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    running = Provider(callback=CALLBACK)
    yield running
    running.stop()


@pytest.fixture
async def client(provider, db_url, engine) -> AsyncIterator[httpx.AsyncClient]:
    async with oidc_client(provider, db_url, engine) as c:
        yield c


async def to_callback(client: httpx.AsyncClient) -> str:
    """Our login route's redirect, the provider's (its own cookies kept), back to our
    callback: that path."""
    start = await client.get("/portal/login/oidc")
    assert start.status_code == 303
    url = start.headers["location"]
    assert parse_qs(urlsplit(url).query)["redirect_uri"] == [CALLBACK]
    async with httpx.AsyncClient(timeout=10) as browser:
        for _ in range(10):
            answer = await browser.get(url)
            assert answer.status_code in (302, 303), answer.text[:500]
            url = (
                str(answer.next_request.url) if answer.next_request else answer.headers["location"]
            )
            if url.startswith(CALLBACK):
                return url.removeprefix(BASE_URL)
    raise AssertionError("the provider never sent the browser back")


async def sessions(sessionmaker) -> int:
    async with sessionmaker() as session:
        return len((await session.scalars(select(PortalSession))).all())


async def test_a_member_logs_in_with_the_identity_provider(client, sessionmaker):
    created = await make_integration(sessionmaker, "Bikes")
    await add_member(sessionmaker, created.integration.id, EMAIL, "developer")
    assert "/portal/login/oidc" in (await client.get("/portal/login")).text
    callback = await to_callback(client)
    pending = client.cookies[PENDING]
    answer = await client.get(callback)
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/portal/"
    home = await client.get("/portal/")
    assert home.status_code == 200
    assert created.integration.client_id in home.text
    # The same return again, from a browser holding the same pending login: refused.
    client.cookies.clear()
    client.cookies.set(PENDING, pending)
    assert (await client.get(callback)).status_code == 400
    assert await sessions(sessionmaker) == 1
    async with sessionmaker() as session:
        login = await session.scalar(
            select(AuditRecord).where(AuditRecord.action == "portal.login")
        )
    assert login is not None
    assert login.actor == f"member:{EMAIL}"
    assert login.after["method"] == "oidc"


async def test_no_member_no_login(client, sessionmaker):
    answer = await client.get(await to_callback(client))
    assert answer.status_code == 400
    assert await sessions(sessionmaker) == 0


async def test_a_member_of_a_disabled_integration_does_not_log_in(client, sessionmaker):
    created = await make_integration(sessionmaker, "Bikes")
    await add_member(sessionmaker, created.integration.id, EMAIL, "owner")
    async with sessionmaker() as session, session.begin():
        await integrations.set_active(session, created.integration.client_id, False)
    assert (await client.get(await to_callback(client))).status_code == 400
    assert await sessions(sessionmaker) == 0


async def test_another_browsers_state_is_refused(client, sessionmaker):
    created = await make_integration(sessionmaker, "Bikes")
    await add_member(sessionmaker, created.integration.id, EMAIL, "owner")
    callback = await to_callback(client)
    client.cookies.clear()
    assert (await client.get(callback)).status_code == 400
    assert await sessions(sessionmaker) == 0
