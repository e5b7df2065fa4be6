"""Login CSRF on the consoles' one-time links (``web.console.link_login``), spoken to over HTTP: the
link's POST logs in only the browser that opened its page. A form posted from elsewhere (no
cookie of the page, or not its nonce) is refused with the login page, logs nobody in, and
leaves the link usable by the browser that opened it. The back office and the developer
portal share the one implementation; each is tested here."""

from collections.abc import Awaitable, Callable

import httpx
import pytest

from dealbroker.audit.service import Actor
from dealbroker.core import i18n
from dealbroker.operators import service as operators
from tests.conftest import BASE_URL
from tests.web.english import english_in
from tests.web.login_links import nonce_of, press
from tests.web.portal_helpers import add_member, last_link, make_integration, other_client

REFUSED = "This login link was not opened in this browser"


async def back_office_link(client: httpx.AsyncClient, sessionmaker) -> str:
    async with sessionmaker() as session, session.begin():
        await operators.add(session, "mallory@example.com", ["support"], Actor("system:test"))
        settings = client._transport.app.state.settings  # type: ignore[attr-defined]
        link, _ = await operators.issue_login_link(
            session, "mallory@example.com", settings, Actor("system:test")
        )
    return link.removeprefix(BASE_URL)


async def portal_link(client: httpx.AsyncClient, sessionmaker) -> str:
    created = await make_integration(sessionmaker)
    await add_member(sessionmaker, created.integration.id, "mallory@example.com", "owner")
    async with other_client(client) as asking:
        await asking.post("/portal/login", data={"email": "mallory@example.com"})
    path = await last_link(sessionmaker, "mallory@example.com")
    assert path is not None
    return path


CONSOLES: dict[str, tuple[Callable[..., Awaitable[str]], str, str]] = {
    # the link, the session cookie, the link page's nonce cookie
    "back-office": (back_office_link, "dealbroker-operator", "dealbroker-link"),
    "portal": (portal_link, "dealbroker-portal", "dealbroker-portal-link"),
}


@pytest.mark.parametrize("console", CONSOLES)
async def test_a_cross_site_post_of_a_link_logs_nobody_in_and_uses_nothing_up(
    client, sessionmaker, console
):
    make_link, session_cookie, nonce_cookie = CONSOLES[console]
    path = await make_link(client, sessionmaker)
    home = f"/{console}/"
    # The attacker opens their own link: the page's nonce, and its cookie in their browser.
    shown = await client.get(path)
    assert shown.status_code == 200
    cookie = shown.headers["set-cookie"]
    assert cookie.startswith(f"{nonce_cookie}=")
    for attribute in ("HttpOnly", "SameSite=strict", "Path=/", "Max-Age=600"):
        assert attribute in cookie, cookie
    attackers_nonce = nonce_of(shown.text)
    assert client.cookies[nonce_cookie] == attackers_nonce

    async with other_client(client) as victim:
        # The attacker's page on another site posts the link from the victim's browser: an
        # empty form, or one with the attacker's nonce; SameSite keeps the cookie back.
        for form in ({}, {"nonce": attackers_nonce}):
            refused = await victim.post(path, data=form)
            assert refused.status_code == 403, refused.text
            assert REFUSED in refused.text
            assert path not in refused.text  # no button to log in as the attacker
            assert session_cookie not in victim.cookies
            assert (await victim.get(home)).status_code == 303  # to the login page
        # A cookie of its own (the victim opened a link page once) with another nonce.
        victim.cookies.set(nonce_cookie, "the-victims-own-nonce")
        assert (await victim.post(path, data={"nonce": attackers_nonce})).status_code == 403
        assert session_cookie not in victim.cookies

    # Nothing was used up: the browser that opened the link logs in with its button.
    answer = await client.post(path, data={"nonce": attackers_nonce})
    assert answer.status_code == 303, answer.text
    assert session_cookie in client.cookies
    assert nonce_cookie not in client.cookies  # forgotten once used
    assert (await client.get(home)).status_code == 200
    # And once only.
    async with other_client(client) as later:
        assert (await press(later, path)).status_code == 400


@pytest.mark.parametrize("console", CONSOLES)
async def test_a_tampered_nonce_is_refused(client, sessionmaker, console):
    make_link, session_cookie, _nonce_cookie = CONSOLES[console]
    path = await make_link(client, sessionmaker)
    nonce = nonce_of((await client.get(path)).text)
    for forged in ("", nonce[:-1], nonce + "x", "x" * 5000):
        assert (await client.post(path, data={"nonce": forged})).status_code == 403
    assert session_cookie not in client.cookies
    assert (await client.post(path, data={"nonce": nonce})).status_code == 303


@pytest.mark.parametrize("console", CONSOLES)
async def test_behind_https_the_nonce_cookie_has_the_host_prefix(
    db_url, engine, sessionmaker, console
):
    from dealbroker.app import create_app
    from tests.conftest import make_settings

    base = "https://console.example.com"
    app = create_app(make_settings(db_url, base_url=base), engine)
    make_link, _session_cookie, nonce_cookie = CONSOLES[console]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base) as c:
            path = (await make_link(c, sessionmaker)).removeprefix(base)
            shown = await c.get(path)
            cookie = shown.headers["set-cookie"]
            assert cookie.startswith(f"__Host-{nonce_cookie}=")
            assert "Secure" in cookie
            assert "Domain" not in cookie
            assert (await c.post(path, data={})).status_code == 403
            assert (await c.post(path, data={"nonce": nonce_of(shown.text)})).status_code == 303


@pytest.mark.parametrize("console", CONSOLES)
@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_the_refusal_reads_without_english(client, sessionmaker, console, language):
    make_link, _session_cookie, _nonce_cookie = CONSOLES[console]
    path = await make_link(client, sessionmaker)
    client.cookies.set("lang", language)
    refused = await client.post(path, data={})
    assert refused.status_code == 403
    with i18n.using(language):
        assert (
            i18n.gettext(
                REFUSED + ", so nobody was logged in. Open the link again, in the "
                "browser you want to log in with."
            )
            in refused.text
        )
    assert english_in(refused.text) == []
