"""The back office's login layer, spoken to over HTTP: a one-time link logs in once, the
session's cookie and its timeouts, CSRF on every form, the audit trail's page and CSV, and a
route-by-route check that an operator without a page's role gets 403."""

import csv
import io
import re
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select

from dealbroker.audit import service as audit
from dealbroker.audit.models import AuditRecord
from dealbroker.audit.service import Actor, AppendOnly
from dealbroker.core import clock
from dealbroker.core.security import hash_token
from dealbroker.operators import service
from dealbroker.operators.models import OperatorSession
from dealbroker.web.backoffice.pages import PUBLIC
from tests.conftest import BASE_URL, SELLER
from tests.web.back_office import csrf, flat_routes, log_in, make_operator
from tests.web.login_links import press

# Every back office route and the role it needs (None: any operator). A route added without
# an entry here fails test_every_route_has_its_role.
ROUTES: dict[tuple[str, str], str | None] = {
    ("GET", "/back-office/"): None,
    ("POST", "/back-office/logout"): None,
    ("GET", "/back-office/audit"): "admin",
    ("GET", "/back-office/audit.csv"): "admin",
    ("GET", "/back-office/operators"): "admin",
    ("POST", "/back-office/operators"): "admin",
    ("POST", "/back-office/operators/{operator_id}/roles"): "admin",
    ("POST", "/back-office/operators/{operator_id}/disabled"): "admin",
    ("GET", "/back-office/integrations"): "admin",
    ("POST", "/back-office/integrations"): "admin",
    ("POST", "/back-office/integrations/{client_id}/disabled"): "admin",
    ("POST", "/back-office/integrations/{client_id}/secret"): "admin",
    ("POST", "/back-office/integrations/{client_id}/webhook-secret"): "admin",
    ("GET", "/back-office/deals"): "support",
    ("GET", "/back-office/disputes"): "support",
    ("GET", "/back-office/disputes/{deal_id}"): "support",
    ("POST", "/back-office/disputes/{deal_id}"): "support",
    ("POST", "/back-office/disputes/proposals/{proposal_id}/approve"): "support",
    ("POST", "/back-office/disputes/proposals/{proposal_id}/reject"): "support",
    ("GET", "/back-office/deals/{deal_id}"): "support",
    ("GET", "/back-office/deals/{deal_id}/photos/{photo_id}"): "support",
    ("GET", "/back-office/reports"): "support",
    ("POST", "/back-office/deals/{deal_id}/messages/{message_id}/hide"): "support",
    ("POST", "/back-office/deals/{deal_id}/messages/{message_id}/dismiss"): "support",
    ("POST", "/back-office/deals/{deal_id}/conversations/{conversation_id}/block"): "support",
    ("GET", "/back-office/webhooks"): "admin",
    ("GET", "/back-office/webhooks/{endpoint_id}"): "admin",
    ("POST", "/back-office/webhooks/{endpoint_id}/disable"): "admin",
    ("POST", "/back-office/webhooks/{endpoint_id}/enable"): "admin",
    ("POST", "/back-office/webhooks/{endpoint_id}/recover"): "admin",
    ("POST", "/back-office/webhooks/{endpoint_id}/resend"): "admin",
    ("GET", "/back-office/payouts"): "finance",
    ("POST", "/back-office/payouts/export"): "finance",
    ("GET", "/back-office/payouts/files/{message_id}"): "finance",
    ("POST", "/back-office/payouts/report"): "finance",
    ("GET", "/back-office/reconcile"): "finance",
    ("GET", "/back-office/refused-calls"): "finance",
    ("POST", "/back-office/refused-calls/{call_id}/retry"): "finance",
}
COOKIE = "dealbroker-operator"  # http base URL: no __Host- prefix, not Secure


async def test_a_login_link_logs_in_once_and_the_cookie_is_the_sessions(client, sessionmaker):
    await make_operator(sessionmaker, "ann@example.com", "support", "admin")
    assert (await client.get("/back-office/")).headers["location"] == "/back-office/login"
    async with sessionmaker() as session, session.begin():
        link, _ = await service.issue_login_link(
            session,
            "ann@example.com",
            client._transport.app.state.settings,
            Actor("system:t"),  # type: ignore[attr-defined]
        )
    path = link.removeprefix(BASE_URL)
    answer = await press(client, path)
    assert answer.status_code == 303
    set_cookie = answer.headers["set-cookie"]
    assert set_cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in set_cookie
    assert "SameSite=lax" in set_cookie
    assert "Path=/" in set_cookie
    token = client.cookies[COOKIE]
    async with sessionmaker() as session:
        rows = (await session.scalars(select(OperatorSession))).all()
    assert [r.token_hash for r in rows] == [hash_token(token)]  # stored hashed only

    home = await client.get("/back-office/")
    assert home.status_code == 200
    assert "ann@example.com" in home.text
    assert re.findall(r'data-role="(\w+)"', home.text) == ["support", "admin"]
    assert home.headers["content-security-policy"].startswith("default-src 'none'")
    assert home.headers["cache-control"] == "no-store"

    # The same link a second time, in another browser: refused.
    other = httpx.AsyncClient(transport=client._transport, base_url=BASE_URL)
    again = await press(other, path)
    assert again.status_code == 400
    assert COOKIE not in again.headers.get("set-cookie", "")


async def test_logout_needs_the_forms_csrf_token_and_ends_the_session(client, sessionmaker):
    await make_operator(sessionmaker, "ann@example.com", "support")
    await log_in(client, sessionmaker, "ann@example.com")
    home = await client.get("/back-office/")
    refused = await client.post("/back-office/logout", data={"csrf": "forged"})
    assert refused.status_code == 403
    assert (await client.get("/back-office/")).status_code == 200  # still logged in
    out = await client.post("/back-office/logout", data={"csrf": csrf(home.text)})
    assert out.status_code == 303
    assert out.headers["location"] == "/back-office/login?done=logged-out"
    assert (await client.get("/back-office/")).status_code == 303
    async with sessionmaker() as session:
        actions = (await session.scalars(select(AuditRecord.action).order_by(AuditRecord.id))).all()
    assert actions[-2:] == ["operator.login", "operator.logout"]


async def test_sessions_end_when_idle_and_at_their_absolute_end(client, sessionmaker):
    await make_operator(sessionmaker, "ann@example.com", "support")
    start = clock.now()
    now = [start]
    clock.set_clock(lambda: now[0])
    await log_in(client, sessionmaker, "ann@example.com")
    # Active every 20 minutes (idle timeout 30): alive until the 12 hours' end.
    for minutes in range(20, 12 * 60, 20):
        now[0] = start + timedelta(minutes=minutes)
        assert (await client.get("/back-office/")).status_code == 200, minutes
    now[0] = start + timedelta(hours=12, minutes=1)
    assert (await client.get("/back-office/")).status_code == 303

    now[0] = start + timedelta(hours=13)
    await log_in(client, sessionmaker, "ann@example.com")
    now[0] += timedelta(minutes=31)
    assert (await client.get("/back-office/")).status_code == 303


async def test_a_disabled_operators_sessions_end(client, sessionmaker):
    await make_operator(sessionmaker, "ann@example.com", "support")
    await log_in(client, sessionmaker, "ann@example.com")
    async with sessionmaker() as session, session.begin():
        await service.set_disabled(session, "ann@example.com", True, Actor("system:test"))
    assert (await client.get("/back-office/")).status_code == 303


def test_every_route_has_its_role(app):
    routes = {
        (method, route.path)
        for route in flat_routes(app.routes)
        if getattr(route, "path", "").startswith("/back-office")
        for method in getattr(route, "methods", set()) - {"HEAD"}
    }
    assert len(routes) > len(ROUTES)  # the login pages too
    public = {(m, p) for m, p in routes if p in PUBLIC}
    assert routes - public == set(ROUTES)


@pytest.mark.parametrize(("method", "path"), sorted(k for k, role in ROUTES.items() if role))
async def test_an_operator_without_the_role_gets_403(client, sessionmaker, method, path):
    role = ROUTES[(method, path)]
    others = [r for r in ("support", "finance", "admin") if r != role]
    await make_operator(sessionmaker, "bob@example.com", *others)
    await log_in(client, sessionmaker, "bob@example.com")
    home = await client.get("/back-office/")
    async with sessionmaker() as session:
        bob = await service.find(session, "bob@example.com")
    path = re.sub(r"\{[a-z_]+\}", str(bob.id), path)  # any id: the role is checked first
    answer = await client.request(
        method, path, data={"csrf": csrf(home.text)} if method == "POST" else None
    )
    assert answer.status_code == 403
    assert f'data-needs="{role}"' in answer.text  # refused for the role, not the form
    # Without a session at all: the login page.
    client.cookies.clear()
    assert (await client.request(method, path)).status_code == 303


async def test_the_audit_trail_page_and_its_csv(client, sessionmaker):
    await make_operator(sessionmaker, "ann@example.com", "admin")
    async with sessionmaker() as session, session.begin():
        for n in range(60):
            await audit.record(
                session,
                Actor("=cmd|' /C calc'!A0"),
                "test.action",
                "deal",
                f"@{n}",
                before={"n": n},
                after={"n": n + 1},
            )
    await log_in(client, sessionmaker, "ann@example.com")
    first = await client.get("/back-office/audit")
    assert first.status_code == 200
    actions = re.findall(r'<tr data-action="([^"]+)"', first.text)
    assert len(actions) == 50
    assert actions[0] == "operator.login"  # newest first
    second = await client.get("/back-office/audit?page=2")
    assert (
        len(re.findall(r"<tr data-action=", second.text)) == 13
    )  # 60, the add, the link, the login
    assert (await client.get("/back-office/audit?page=0")).status_code in (400, 422)

    exported = await client.get("/back-office/audit.csv")
    assert exported.headers["content-type"] == "text/csv; charset=utf-8"
    rows = list(csv.reader(io.StringIO(exported.text)))
    assert rows[0][:4] == ["id", "at", "actor", "action"]
    assert len(rows) == 1 + 63
    tests = [r for r in rows[1:] if r[3] == "test.action"]
    # A cell that a spreadsheet would run as a formula is text.
    assert {r[2] for r in tests} == {"'=cmd|' /C calc'!A0"}
    assert tests[0][5] == "'@59"


async def test_audit_records_cannot_be_changed_or_deleted(sessionmaker):
    async with sessionmaker() as session, session.begin():
        await audit.record(session, Actor("system:test"), "test.action", "deal", "x")
    async with sessionmaker() as session:
        row = await session.scalar(select(AuditRecord))
        assert row is not None
        row.action = "changed"
        with pytest.raises(AppendOnly):
            await session.flush()
        await session.rollback()
    async with sessionmaker() as session:
        row = await session.scalar(select(AuditRecord))
        await session.delete(row)
        with pytest.raises(AppendOnly):
            await session.flush()
        await session.rollback()
    from sqlalchemy import delete, update

    async with sessionmaker() as session:
        with pytest.raises(AppendOnly):
            await session.execute(update(AuditRecord).values(action="changed"))
        with pytest.raises(AppendOnly):
            await session.execute(delete(AuditRecord))


async def test_postgresql_refuses_changing_audit_records_from_any_client(engine, sessionmaker):
    if engine.dialect.name != "postgresql":
        pytest.skip("the trigger is PostgreSQL's; SQLite relies on the ORM's refusal")
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    async with sessionmaker() as session, session.begin():
        await audit.record(session, Actor("system:test"), "test.action", "deal", "x")
    for statement in ("UPDATE audit_records SET action = 'changed'", "DELETE FROM audit_records"):
        async with engine.connect() as conn:
            with pytest.raises(DBAPIError, match="append-only"):
                await conn.execute(text(statement))


@pytest.mark.parametrize("lang", ["nb", "sv"])
async def test_the_back_office_reads_in_norwegian_and_swedish(client, sessionmaker, lang):
    from tests.web.english import ENGLISH, WORD

    def english(html: str) -> set[str]:
        text = re.sub(r"<(code|style|script)[^>]*>.*?</\1>", " ", html, flags=re.S)
        text = re.sub(r"<[^>]+>", " ", text)
        return {w for w in WORD.findall(text) if w.lower() in ENGLISH}

    await make_operator(sessionmaker, "ann@example.com", "admin")
    await make_operator(sessionmaker, "bob@example.com", "support")
    assert not english((await client.get(f"/back-office/login?lang={lang}&again=fresh")).text)
    refused = await press(client, "/back-office/login/not-a-link")
    assert refused.status_code == 400
    assert not english(refused.text)
    await log_in(client, sessionmaker, "ann@example.com")
    for path in ("/back-office/", "/back-office/audit", "/back-office/operators"):
        assert not english((await client.get(path)).text), path
    client.cookies.clear()
    await log_in(client, sessionmaker, "bob@example.com")
    forbidden = await client.get(f"/back-office/audit?lang={lang}")
    assert forbidden.status_code == 403
    assert not english(forbidden.text)


async def test_an_admin_manages_operators_in_the_back_office(client, sessionmaker):
    await make_operator(sessionmaker, "ann@example.com", "admin")
    await log_in(client, sessionmaker, "ann@example.com")
    listed = await client.get("/back-office/operators")
    assert listed.status_code == 200
    token = csrf(listed.text)
    added = await client.post(
        "/back-office/operators",
        data={
            "csrf": token,
            "email": "Bob@Example.com",
            "name": "Bob",
            "role": ["support", "finance"],
        },
    )
    assert added.status_code == 303, added.text
    again = await client.post(
        "/back-office/operators", data={"csrf": token, "email": "bob@example.com", "role": "admin"}
    )
    assert again.status_code == 400
    no_role = await client.post(
        "/back-office/operators", data={"csrf": token, "email": "c@example.com"}
    )
    assert no_role.status_code == 400
    async with sessionmaker() as session:
        bob = await service.find(session, "bob@example.com")
    assert bob.roles == ["support", "finance"]
    forged = await client.post(
        f"/back-office/operators/{bob.id}/disabled", data={"csrf": "x", "disabled": "1"}
    )
    assert forged.status_code == 403
    changed = await client.post(
        f"/back-office/operators/{bob.id}/roles", data={"csrf": token, "role": "admin"}
    )
    assert changed.status_code == 303
    disabled = await client.post(
        f"/back-office/operators/{bob.id}/disabled", data={"csrf": token, "disabled": "1"}
    )
    assert disabled.status_code == 303
    page = (await client.get("/back-office/operators")).text
    assert 'data-operator="bob@example.com" data-disabled="true"' in page.replace(
        "Bob@example.com", "bob@example.com"
    )
    async with sessionmaker() as session:
        rows = (await session.scalars(select(AuditRecord).order_by(AuditRecord.id))).all()
    mine = [r for r in rows if r.actor == "operator:ann@example.com"]
    assert [r.action for r in mine] == [
        "operator.login",
        "operator.add",
        "operator.roles",
        "operator.disable",
    ]
    assert all(r.request_id for r in mine)
    assert (mine[2].before["roles"], mine[2].after["roles"]) == (["support", "finance"], ["admin"])


async def test_a_money_action_wants_a_recent_login(app, client, sessionmaker):
    """``require_operator(role, fresh=True)``, which finance's money routes will use: a login
    older than DEALBROKER_OPERATOR_FRESH_LOGIN_MINUTES (15) is sent to log in again, the
    session kept."""
    from fastapi import Depends

    from dealbroker.web.backoffice.session import require_operator

    async def pay(logged_in=Depends(require_operator("finance", fresh=True))) -> dict:  # noqa: B008
        return {"by": logged_in.email}

    app.router.add_api_route("/back-office/test-money", pay, methods=["GET"])
    await make_operator(sessionmaker, "fin@example.com", "finance")
    start = clock.now()
    now = [start]
    clock.set_clock(lambda: now[0])
    await log_in(client, sessionmaker, "fin@example.com")
    assert (await client.get("/back-office/test-money")).json() == {"by": "fin@example.com"}
    now[0] = start + timedelta(minutes=14)
    assert (await client.get("/back-office/test-money")).status_code == 200
    now[0] = start + timedelta(minutes=16)
    stale = await client.get("/back-office/test-money")
    assert stale.status_code == 303
    assert stale.headers["location"] == "/back-office/login?again=fresh"
    assert (await client.get("/back-office/")).status_code == 200  # still logged in
    await log_in(client, sessionmaker, "fin@example.com")
    assert (await client.get("/back-office/test-money")).status_code == 200


async def test_behind_https_the_cookie_is_secure_with_the_host_prefix(db_url, engine, sessionmaker):
    from dealbroker.app import create_app
    from tests.conftest import make_settings

    app = create_app(make_settings(db_url, base_url="https://bo.example.com"), engine)
    await make_operator(sessionmaker, "ann@example.com", "support")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://bo.example.com") as c:
            async with sessionmaker() as session, session.begin():
                link, _ = await service.issue_login_link(
                    session, "ann@example.com", app.state.settings, Actor("system:test")
                )
            answer = await press(c, link.removeprefix("https://bo.example.com"))
            assert answer.status_code == 303
            cookie = answer.headers["set-cookie"]
            assert cookie.startswith("__Host-dealbroker-operator=")
            assert "Secure" in cookie
            assert "HttpOnly" in cookie
            assert "Path=/" in cookie
            assert "Domain" not in cookie
            assert (await c.get("/back-office/")).status_code == 200


@pytest.mark.parametrize(("lang", "placeholder"), [("nb", "(uten navn)"), ("sv", "(utan namn)")])
async def test_a_deal_without_a_name_is_found_by_a_placeholder(
    client, sessionmaker, caller, lang, placeholder
):
    """The API lets a deal be created without a name: the search lists it by a placeholder and
    the start of its id, never ``None``."""
    created = await client.post(
        "/deals/v1/deals", json={"price": 100, "seller": SELLER}, headers=caller.headers
    )
    assert created.status_code == 201, created.text
    deal_id = created.json()["id"]
    await make_operator(sessionmaker, "sue@example.com", "support")
    await log_in(client, sessionmaker, "sue@example.com")
    found = await client.get(f"/back-office/deals?q={deal_id}&lang={lang}")
    assert found.status_code == 200
    heading = re.search(rf'<a href="/back-office/deals/{deal_id}">([^<]*)</a>', found.text)
    assert heading, found.text
    assert heading.group(1) == f"{placeholder} {deal_id[:8]}"
