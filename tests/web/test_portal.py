"""The developer portal's login layer, spoken to over HTTP: a login link asked for by e-mail
(the same answer for a member and a stranger, bounded per address), used once, expiring; the
choice among several integrations; the session's cookie; CSRF on every form; logout."""

import re
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import func, select

from dealbroker.app import create_app
from dealbroker.audit.models import AuditRecord
from dealbroker.audit.service import Actor
from dealbroker.core.security import hash_token
from dealbroker.notifications.models import OutboxMessage
from dealbroker.portal import service
from dealbroker.portal.models import PortalSession
from tests.conftest import make_settings
from tests.web.login_links import nonce_of, press
from tests.web.portal_helpers import (
    COOKIE,
    add_member,
    csrf,
    last_link,
    log_in,
    make_integration,
    other_client,
    portal_member,
)


async def test_a_member_logs_in_by_an_emailed_link_once(client, sessionmaker):
    created = await make_integration(sessionmaker, "Bikes & Co")
    await add_member(sessionmaker, created.integration.id, "Ann@Example.com", "owner")
    assert (await client.get("/portal/")).headers["location"] == "/portal/login"

    asked = await client.post("/portal/login", data={"email": "ann@example.com"})
    assert asked.status_code == 200
    assert "data-sent" in asked.text
    async with sessionmaker() as session:
        message = await session.scalar(select(OutboxMessage))
    assert message is not None
    assert message.to_email == "Ann@example.com"
    assert message.deal_id is None
    assert message.integration_id == created.integration.id
    path = await last_link(sessionmaker, "Ann@example.com")
    assert path is not None
    assert message.body.count(path) == 1

    answer = await press(client, path)
    assert answer.status_code == 303
    set_cookie = answer.headers["set-cookie"]
    assert set_cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in set_cookie
    assert "SameSite=lax" in set_cookie
    token = client.cookies[COOKIE]
    async with sessionmaker() as session:
        rows = (await session.scalars(select(PortalSession))).all()
    assert [r.token_hash for r in rows] == [hash_token(token)]  # stored hashed only

    home = await client.get("/portal/")
    assert home.status_code == 200
    assert "Bikes &amp; Co" in home.text
    assert f"data-client-id>{created.integration.client_id}<" in home.text
    assert home.headers["cache-control"] == "no-store"
    assert home.headers["content-security-policy"].startswith("default-src 'none'")

    # The same link again, in another browser: refused.
    async with other_client(client) as other:
        again = await press(other, path)
    assert again.status_code == 400
    assert f"{COOKIE}=" not in again.headers.get("set-cookie", "")

    async with sessionmaker() as session:
        actions = (
            await session.scalars(select(AuditRecord.actor + " " + AuditRecord.action))
        ).all()
    assert "member:Ann@example.com portal.login" in actions


async def test_the_answer_is_the_same_for_a_stranger_and_no_mail_goes(client, sessionmaker):
    created = await make_integration(sessionmaker)
    await add_member(sessionmaker, created.integration.id, "ann@example.com", "owner")
    member = await client.post("/portal/login", data={"email": "ann@example.com"})
    stranger = await client.post("/portal/login", data={"email": "bob@example.com"})
    garbage = await client.post("/portal/login", data={"email": "x" * 5000})
    assert member.status_code == stranger.status_code == garbage.status_code == 200
    assert member.text == stranger.text == garbage.text
    async with sessionmaker() as session:
        to = (await session.scalars(select(OutboxMessage.to_email))).all()
    assert to == ["ann@example.com"]


async def test_links_are_bounded_per_address_and_hour(client, sessionmaker, frozen_clock):
    created = await make_integration(sessionmaker)
    await add_member(sessionmaker, created.integration.id, "ann@example.com", "owner")
    limit = client._transport.app.state.settings.portal_links_per_hour  # type: ignore[attr-defined]
    for _ in range(limit + 3):
        answer = await client.post("/portal/login", data={"email": "ann@example.com"})
        assert answer.status_code == 200
    count = select(func.count()).select_from(OutboxMessage)
    async with sessionmaker() as session:
        assert await session.scalar(count) == limit
    frozen_clock[0] += timedelta(minutes=61)
    await client.post("/portal/login", data={"email": "ann@example.com"})
    async with sessionmaker() as session:
        assert await session.scalar(count) == limit + 1


async def test_a_link_expires_in_minutes(client, sessionmaker, frozen_clock):
    created = await make_integration(sessionmaker)
    await add_member(sessionmaker, created.integration.id, "ann@example.com", "owner")
    await client.post("/portal/login", data={"email": "ann@example.com"})
    path = await last_link(sessionmaker, "ann@example.com")
    assert path is not None
    minutes = client._transport.app.state.settings.operator_link_minutes  # type: ignore[attr-defined]
    frozen_clock[0] += timedelta(minutes=minutes, seconds=1)
    assert (await press(client, path)).status_code == 400
    assert COOKIE not in client.cookies


async def test_a_link_of_a_removed_member_logs_nobody_in(client, sessionmaker):
    created = await make_integration(sessionmaker)
    await add_member(sessionmaker, created.integration.id, "ann@example.com", "owner")
    bob = await add_member(sessionmaker, created.integration.id, "bob@example.com", "developer")
    await client.post("/portal/login", data={"email": "bob@example.com"})
    path = await last_link(sessionmaker, "bob@example.com")
    assert path is not None
    async with sessionmaker() as session, session.begin():
        await service.remove(session, created.integration.id, bob, Actor("system:test"))
    assert (await press(client, path)).status_code == 400


async def test_a_member_of_several_integrations_chooses_one(client, sessionmaker):
    first = await make_integration(sessionmaker, "Alpha market")
    second = await make_integration(sessionmaker, "Beta market")
    await add_member(sessionmaker, first.integration.id, "ann@example.com", "owner")
    await add_member(sessionmaker, second.integration.id, "ann@example.com", "read-only")
    answer = await log_in(client, sessionmaker, "ann@example.com")
    assert answer.headers["location"] == "/portal/"
    assert (await client.get("/portal/")).headers["location"] == "/portal/choose"
    chooser = await client.get("/portal/choose")
    assert chooser.status_code == 200
    assert "Alpha market" in chooser.text
    assert "Beta market" in chooser.text
    # A forged member id (another person's, or none) is refused.
    stranger = await make_integration(sessionmaker, "Gamma")
    other_id = await add_member(sessionmaker, stranger.integration.id, "bob@example.com", "owner")
    token = csrf(chooser.text)
    refused = await client.post("/portal/choose", data={"csrf": token, "member": str(other_id)})
    assert refused.status_code == 400
    assert (await client.get("/portal/")).headers["location"] == "/portal/choose"
    # Beta, as read-only.
    beta_member = re.findall(r'name="member" value="([^"]+)"', chooser.text)[1]
    chosen = await client.post("/portal/choose", data={"csrf": token, "member": beta_member})
    assert chosen.status_code == 303
    home = await client.get("/portal/")
    assert "Beta market" in home.text
    assert "Switch to another integration" in home.text
    assert 'href="/portal/members"' not in home.text  # read-only


async def test_logout_needs_the_forms_csrf_token_and_ends_the_session(client, sessionmaker):
    await portal_member(client, sessionmaker, "read-only")
    home = await client.get("/portal/")
    refused = await client.post("/portal/logout", data={"csrf": "forged"})
    assert refused.status_code == 403
    assert (await client.get("/portal/")).status_code == 200
    out = await client.post("/portal/logout", data={"csrf": csrf(home.text)})
    assert out.status_code == 303
    assert out.headers["location"] == "/portal/login?done=logged-out"
    assert (await client.get("/portal/")).status_code == 303


async def test_a_session_ends_when_idle_too_long(client, sessionmaker, frozen_clock):
    await portal_member(client, sessionmaker, "read-only")
    idle = client._transport.app.state.settings.operator_idle_minutes  # type: ignore[attr-defined]
    frozen_clock[0] += timedelta(minutes=idle - 1)
    assert (await client.get("/portal/")).status_code == 200
    frozen_clock[0] += timedelta(minutes=idle)
    assert (await client.get("/portal/")).headers["location"] == "/portal/login"


@pytest.mark.parametrize("path", ["/portal/login/" + "a" * 5000, "/portal/login/x"])
async def test_a_wrong_or_oversized_link_is_refused(client, path):
    nonce = nonce_of((await client.get("/portal/login/x")).text)  # this browser's page
    assert (await client.post(path, data={"nonce": nonce})).status_code == 400


async def test_behind_https_the_cookie_is_secure_with_the_host_prefix(db_url, engine, sessionmaker):
    app = create_app(make_settings(db_url, base_url="https://dev.example.com"), engine)
    created = await make_integration(sessionmaker)
    await add_member(sessionmaker, created.integration.id, "ann@example.com", "owner")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://dev.example.com") as c:
            await c.post("/portal/login", data={"email": "ann@example.com"})
            path = await last_link(sessionmaker, "ann@example.com")
            assert path is not None
            answer = await press(c, path)
            assert answer.status_code == 303
            cookie = answer.headers["set-cookie"]
            assert cookie.startswith("__Host-dealbroker-portal=")
            assert "Secure" in cookie
            assert "HttpOnly" in cookie
            assert "Path=/" in cookie
            assert "Domain" not in cookie
            home = await c.get("/portal/")
            assert home.status_code == 200
            # The logout form's token is the HMAC of this session's token.
            out = await c.post("/portal/logout", data={"csrf": csrf(home.text)})
            assert out.status_code == 303
            assert "__Host-dealbroker-portal=" in out.headers["set-cookie"]
