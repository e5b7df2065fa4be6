"""The local sandbox's outbox page (``/sandbox/outbox``): every message the outbox holds, a
developer portal login mail included, for a browser on the developer's own machine when the
sandbox sends no mail. Anywhere else (a sandbox with a public base URL, one that sends mail,
production, or a browser on another machine) the path is a plain 404: the page must never let
one person read another's login mail."""

import html
import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from dealbroker.app import create_app
from dealbroker.core.settings import is_loopback_host
from tests.conftest import make_settings
from tests.web.login_links import press
from tests.web.portal_helpers import add_member, make_integration

LOCAL = "http://127.0.0.1:8000"
HERE = ("127.0.0.1", 50000)


async def _client(
    db_url: str, engine: object, peer: tuple[str, int] = HERE, **settings: object
) -> AsyncIterator[httpx.AsyncClient]:
    application = create_app(make_settings(db_url, **{"base_url": LOCAL, **settings}), engine)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application, client=peer)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as c:
            yield c


@pytest.fixture
async def local(db_url, engine) -> AsyncIterator[httpx.AsyncClient]:
    async for c in _client(db_url, engine):
        yield c


async def ask_for_a_link(client: httpx.AsyncClient, sessionmaker, email: str) -> httpx.Response:
    created = await make_integration(sessionmaker)
    await add_member(sessionmaker, created.integration.id, email, "owner")
    asked = await client.post("/portal/login", data={"email": email})
    assert asked.status_code == 200, asked.text
    return asked


async def test_a_local_sandbox_shows_the_login_mail_and_its_link_logs_in(local, sessionmaker):
    email = f"ann-{uuid.uuid4().hex[:8]}@example.com"
    asked = await ask_for_a_link(local, sessionmaker, email)
    assert '<a href="/sandbox/outbox">' in asked.text  # the login page says where the mail is
    page = await local.get("/sandbox/outbox")
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-store"
    mail = re.search(
        rf'<section class="card" data-message="portal_login_link" data-to="{email}">'
        r".*?</section>",
        page.text,
        re.S,
    )
    assert mail, page.text
    link = re.search(r'<a href="(http://127\.0\.0\.1:8000(/portal/login/[^"]+))"', mail.group(0))
    assert link, mail.group(0)  # a link to open, not text to copy
    path = html.unescape(link.group(2))
    assert (await press(local, path)).status_code == 303
    assert (await local.get("/portal/")).status_code == 200


async def test_the_outbox_page_is_in_the_pages_language(local, sessionmaker):
    await ask_for_a_link(local, sessionmaker, f"bo-{uuid.uuid4().hex[:8]}@example.com")
    nb = await local.get("/sandbox/outbox", headers={"Accept-Language": "nb"})
    assert "<h1>Sandkassens utboks</h1>" in nb.text
    sv = await local.get("/sandbox/outbox", headers={"Accept-Language": "sv"})
    assert "<h1>Sandlådans utkorg</h1>" in sv.text


@pytest.mark.parametrize(
    ("peer", "settings"),
    [
        pytest.param(HERE, {"base_url": "https://sandbox.market.example.com"}, id="public-url"),
        pytest.param(
            HERE,
            {"smtp_host": "127.0.0.1", "smtp_port": 2525, "mail_from": "db@example.com"},
            id="sends-mail",
        ),
        pytest.param(HERE, {"environment": "production", "secret_key": "p" * 40}, id="prod"),
        pytest.param(("203.0.113.9", 40000), {}, id="another-machine"),
    ],
)
async def test_elsewhere_the_outbox_is_no_page(db_url, engine, sessionmaker, peer, settings):
    async for client in _client(db_url, engine, peer, **settings):
        asked = await ask_for_a_link(client, sessionmaker, f"x-{uuid.uuid4().hex[:8]}@example.com")
        assert "/sandbox/outbox" not in asked.text
        page = await client.get("/sandbox/outbox")
        assert page.status_code == 404
        assert "portal/login/" not in page.text


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("LocalHost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
        ("sandbox.example.com", False),
        ("localhost.example.com", False),
        ("", False),
    ],
)
def test_loopback_hosts(host, loopback):
    assert is_loopback_host(host) is loopback
