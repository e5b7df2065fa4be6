"""The developer portal's pages over HTTP: a route-by-route check that a member without a
page's role gets 403; a member of one integration reaches nothing of another's (by URL
tampering too); a secret's rotation shown once; the requests page from the request log; the
event catalog from the OpenAPI document's source; the members page and its last owner."""

import json
import re
import uuid
from datetime import timedelta

import pytest
from markupsafe import escape
from sqlalchemy import select

from dealbroker.audit.models import AuditRecord
from dealbroker.audit.service import Actor
from dealbroker.core.security import hash_token
from dealbroker.events.webhook_docs import CATALOG
from dealbroker.integrations import service as integrations
from dealbroker.integrations.models import Integration
from dealbroker.portal import service
from dealbroker.web.portal.pages import PUBLIC
from tests.web.back_office import flat_routes
from tests.web.portal_helpers import (
    add_member,
    csrf,
    make_integration,
    other_client,
    portal_member,
)

# Every portal route and the least role it needs (None: any logged-in person, before they
# chose an integration too). A route added without an entry here fails
# test_every_route_has_its_role.
ROUTES: dict[tuple[str, str], str | None] = {
    ("POST", "/portal/logout"): None,
    ("GET", "/portal/choose"): None,
    ("POST", "/portal/choose"): None,
    ("GET", "/portal/"): "read-only",
    ("GET", "/portal/requests"): "read-only",
    ("GET", "/portal/events"): "read-only",
    ("GET", "/portal/credentials"): "owner",
    ("POST", "/portal/credentials/secret"): "owner",
    ("POST", "/portal/credentials/webhook-secret"): "owner",
    ("GET", "/portal/members"): "owner",
    ("POST", "/portal/members"): "owner",
    ("POST", "/portal/members/{member_id}/role"): "owner",
    ("POST", "/portal/members/{member_id}/remove"): "owner",
    ("GET", "/portal/audit"): "owner",
    ("GET", "/portal/webhooks"): "read-only",
    ("POST", "/portal/webhooks"): "developer",
    ("GET", "/portal/webhooks/{endpoint_id}"): "read-only",
    ("POST", "/portal/webhooks/{endpoint_id}/edit"): "developer",
    ("POST", "/portal/webhooks/{endpoint_id}/test"): "developer",
    ("POST", "/portal/webhooks/{endpoint_id}/disable"): "developer",
    ("POST", "/portal/webhooks/{endpoint_id}/enable"): "developer",
    ("POST", "/portal/webhooks/{endpoint_id}/recover"): "developer",
    ("GET", "/portal/webhooks/{endpoint_id}/deliveries/{delivery_id}"): "read-only",
    ("POST", "/portal/webhooks/{endpoint_id}/deliveries/{delivery_id}/resend"): "developer",
    ("GET", "/portal/sandbox"): "read-only",
    ("POST", "/portal/sandbox/clock"): "developer",
    ("POST", "/portal/sandbox/deal"): "read-only",
    ("GET", "/portal/sandbox/deals/{deal_id}"): "read-only",
    ("POST", "/portal/sandbox/deals/{deal_id}/clock"): "developer",
    ("POST", "/portal/sandbox/scenarios"): "developer",
}
# The ids in the other sections' paths: any id will do (a role is checked before the id).
IDS = ("{endpoint_id}", "{delivery_id}", "{deal_id}")


def _url(path: str, member_id: object) -> str:
    url = path.replace("{member_id}", str(member_id))
    for name in IDS:
        url = url.replace(name, str(uuid.uuid4()))
    return url


BELOW = {"developer": "read-only", "owner": "developer"}


def test_every_route_has_its_role(app):
    routes = {
        (method, route.path)
        for route in flat_routes(app.routes)
        if getattr(route, "path", "").startswith("/portal")
        for method in getattr(route, "methods", set()) - {"HEAD"}
    }
    public = {(m, p) for m, p in routes if p in PUBLIC}
    assert (
        len(public) == 6
    )  # the login page and its form, OIDC, its callback, the link and its button
    assert routes - public == set(ROUTES)


@pytest.mark.parametrize(
    ("method", "path"), sorted(k for k, role in ROUTES.items() if role not in (None, "read-only"))
)
async def test_a_member_without_the_role_gets_403(client, sessionmaker, method, path):
    role = ROUTES[(method, path)]
    assert role is not None
    me = await portal_member(client, sessionmaker, BELOW[role])
    home = await client.get("/portal/")
    url = _url(path, me.member_id)
    if method == "GET":
        answer = await client.get(url)
    else:
        answer = await client.post(url, data={"csrf": csrf(home.text), "role": "owner"})
    assert answer.status_code == 403, answer.text
    assert f'data-needs="{role}"' in answer.text
    async with sessionmaker() as session:
        assert await service.members(session, me.integration_id)  # nothing removed
        roles = [m.role for m in await service.members(session, me.integration_id)]
    assert roles == [BELOW[role]]  # nor promoted


@pytest.mark.parametrize(("method", "path"), sorted(k for k in ROUTES if k[0] == "POST"))
async def test_every_form_needs_its_csrf_token(client, sessionmaker, method, path):
    me = await portal_member(client, sessionmaker, "owner")
    url = _url(path, me.member_id)
    answer = await client.post(url, data={"csrf": "forged", "role": "read-only"})
    assert answer.status_code == 403
    assert "This form has expired" in answer.text


async def test_nobody_logged_in_is_sent_to_the_login_page(client):
    for method, path in ROUTES:
        url = _url(path, uuid.uuid4())
        answer = await client.request(method, url)
        assert answer.status_code == 303, (method, path)
        assert answer.headers["location"] == "/portal/login"


async def test_a_member_of_one_integration_reaches_nothing_of_another(client, sessionmaker, app):
    mine = await portal_member(client, sessionmaker, "owner", "ann@example.com")
    theirs = await make_integration(sessionmaker, "Their market")
    their_owner = await add_member(sessionmaker, theirs.integration.id, "eve@example.com", "owner")
    their_dev = await add_member(
        sessionmaker, theirs.integration.id, "dan@example.com", "developer"
    )
    # Requests of both integrations in the log.
    for created in (theirs,):
        token = await client.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(created.integration.client_id, created.client_secret),
        )
        assert token.status_code == 200
    await app.state.api_requests.flush(sessionmaker)

    token = csrf((await client.get("/portal/members")).text)
    for member_id in (their_owner, their_dev):
        role = await client.post(
            f"/portal/members/{member_id}/role", data={"csrf": token, "role": "read-only"}
        )
        assert role.status_code == 404
        removed = await client.post(f"/portal/members/{member_id}/remove", data={"csrf": token})
        assert removed.status_code == 404
    async with sessionmaker() as session:
        theirs_now = await service.members(session, theirs.integration.id)
    assert sorted((m.email, m.role) for m in theirs_now) == [
        ("dan@example.com", "developer"),
        ("eve@example.com", "owner"),
    ]
    # Choosing another person's member is refused too.
    chosen = await client.post("/portal/choose", data={"csrf": token, "member": str(their_dev)})
    assert chosen.status_code == 400

    for path in ("/portal/", "/portal/members", "/portal/requests", "/portal/credentials"):
        page = await client.get(path)
        assert page.status_code == 200
        assert theirs.integration.client_id not in page.text
        assert "eve@example.com" not in page.text
        assert "Their market" not in page.text
    # A rotation rotates one's own secret only.
    async with sessionmaker() as session:
        before = await session.get(Integration, theirs.integration.id)
        assert before is not None
        their_hash = before.client_secret_hash
    rotated = await client.post("/portal/credentials/secret", data={"csrf": token})
    assert rotated.status_code == 200
    async with sessionmaker() as session:
        after = await session.get(Integration, theirs.integration.id)
        assert after is not None
        assert after.client_secret_hash == their_hash
        mine_now = await session.get(Integration, mine.integration_id)
        assert mine_now is not None
        assert mine_now.client_secret_hash != hash_token(mine.client_secret)


async def test_rotating_the_client_secret_shows_it_once(client, sessionmaker):
    me = await portal_member(client, sessionmaker, "owner")
    page = await client.get("/portal/credentials")
    assert page.status_code == 200
    rotated = await client.post("/portal/credentials/secret", data={"csrf": csrf(page.text)})
    assert rotated.status_code == 200
    assert rotated.headers["cache-control"] == "no-store"
    secret = re.search(r"data-client-secret>([^<]+)<", rotated.text)
    assert secret is not None
    new = secret.group(1)
    # The new secret gets tokens, the old one does not.
    ok = await client.post(
        "/oauth2/token", data={"grant_type": "client_credentials"}, auth=(me.client_id, new)
    )
    assert ok.status_code == 200
    old = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(me.client_id, me.client_secret),
    )
    assert old.status_code == 401
    # Never again on a page, never in the audit trail.
    for path in ("/portal/", "/portal/credentials"):
        assert new not in (await client.get(path)).text
    async with sessionmaker() as session:
        rows = (await session.scalars(select(AuditRecord))).all()
    assert not any(new in json.dumps(r.after) + json.dumps(r.before) for r in rows)
    rotation = [r for r in rows if r.action == "integration.rotate_secret"]
    assert [r.actor for r in rotation] == [f"member:{me.email}"]


async def test_rotating_the_webhook_secret_keeps_the_overlap(client, sessionmaker):
    me = await portal_member(client, sessionmaker, "owner")
    page = await client.get("/portal/credentials")
    async with sessionmaker() as session:
        integration = await session.get(Integration, me.integration_id)
        assert integration is not None
        old = integration.webhook_secret
    refused = await client.post(
        "/portal/credentials/webhook-secret", data={"csrf": csrf(page.text), "overlap_hours": "5"}
    )
    assert refused.status_code == 400
    rotated = await client.post(
        "/portal/credentials/webhook-secret",
        data={"csrf": csrf(page.text), "overlap_hours": "24"},
    )
    assert rotated.status_code == 200
    assert rotated.headers["cache-control"] == "no-store"
    found = re.search(r"data-webhook-secret>([^<]+)<", rotated.text)
    assert found is not None
    async with sessionmaker() as session:
        integration = await session.get(Integration, me.integration_id)
        assert integration is not None
        assert integration.webhook_secret == found.group(1)
        assert integration.previous_webhook_secret == old
        assert integration.previous_webhook_secret_expires_at is not None
        left = integration.previous_webhook_secret_expires_at - integration.updated_at
    assert left == timedelta(hours=24)


async def test_rotating_needs_a_fresh_login(client, sessionmaker, frozen_clock):
    await portal_member(client, sessionmaker, "owner")
    settings = client._transport.app.state.settings  # type: ignore[attr-defined]
    # Active all along (the idle timeout never ends the session), but logged in long ago.
    for _ in range(settings.operator_fresh_login_minutes // 10 + 1):
        frozen_clock[0] += timedelta(minutes=10)
        page = await client.get("/portal/credentials")
        assert page.status_code == 200
    answer = await client.post("/portal/credentials/secret", data={"csrf": csrf(page.text)})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/portal/login?again=fresh"
    assert (await client.get("/portal/")).status_code == 200  # still logged in


async def test_the_requests_page_lists_the_log_newest_first(client, sessionmaker, app):
    me = await portal_member(client, sessionmaker, "read-only")
    for secret in (me.client_secret, "wrong"):
        await client.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(me.client_id, secret),
        )
    await app.state.api_requests.flush(sessionmaker)
    page = await client.get("/portal/requests")
    assert page.status_code == 200
    assert re.findall(r'data-status="(\d+)"', page.text) == ["401", "200"]
    assert "/oauth2/token" in page.text
    assert "wrong" not in page.text
    failed = await client.get("/portal/requests?status=4xx")
    assert re.findall(r'data-status="(\d+)"', failed.text) == ["401"]
    assert (await client.get("/portal/requests?status=3xx")).status_code == 400
    assert (await client.get("/portal/requests?page=0")).status_code == 400


async def test_the_event_catalog_is_the_openapi_documents(client, sessionmaker, app):
    await portal_member(client, sessionmaker, "read-only")
    page = await client.get("/portal/events")
    assert page.status_code == 200
    kinds = re.findall(r'data-event="([^"]+)"', page.text)
    assert kinds == [k.kind for k in CATALOG]
    assert kinds == list(app.openapi()["webhooks"])
    for kind in CATALOG:
        documented = app.openapi()["webhooks"][kind.kind]["post"]
        assert documented["summary"] == kind.summary
        assert kind.example["event"] == kind.kind
        shown = json.dumps(kind.example, indent=2)
        assert str(escape(shown)) in page.text


async def test_owners_manage_members_and_the_last_owner_stays(client, sessionmaker):
    me = await portal_member(client, sessionmaker, "owner", "ann@example.com")
    page = await client.get("/portal/members")
    token = csrf(page.text)
    added = await client.post(
        "/portal/members", data={"csrf": token, "email": "bob@example.com", "role": "developer"}
    )
    assert added.status_code == 303
    assert added.headers["location"] == "/portal/members?done=member-added"
    twice = await client.post(
        "/portal/members", data={"csrf": token, "email": "BOB@example.com", "role": "owner"}
    )
    assert twice.status_code == 400
    assert "member already" in twice.text
    bad = await client.post(
        "/portal/members", data={"csrf": token, "email": "not an address", "role": "owner"}
    )
    assert bad.status_code == 400
    demote = await client.post(
        f"/portal/members/{me.member_id}/role", data={"csrf": token, "role": "developer"}
    )
    assert demote.status_code == 400
    assert "last owner" in demote.text
    remove = await client.post(f"/portal/members/{me.member_id}/remove", data={"csrf": token})
    assert remove.status_code == 400

    async with sessionmaker() as session:
        bob = await service.find(session, me.integration_id, "bob@example.com")
    # Bob logs in, then is demoted: his next request has the new role.
    async with other_client(client) as browser:
        from tests.web.portal_helpers import log_in

        await log_in(browser, sessionmaker, "bob@example.com")
        assert (await browser.get("/portal/")).status_code == 200
        promoted = await client.post(
            f"/portal/members/{bob.id}/role", data={"csrf": token, "role": "owner"}
        )
        assert promoted.status_code == 303
        assert (await browser.get("/portal/members")).status_code == 200
        removed = await client.post(f"/portal/members/{bob.id}/remove", data={"csrf": token})
        assert removed.status_code == 303
        assert (await browser.get("/portal/")).headers["location"] == "/portal/login"

    async with sessionmaker() as session:
        rows = (await session.scalars(select(AuditRecord).order_by(AuditRecord.id))).all()
    mine = [r.action for r in rows if r.actor == "member:ann@example.com"]
    assert mine == [
        "portal.login",
        "portal.member.add",
        "portal.member.role",
        "portal.member.remove",
    ]


async def test_owners_read_their_own_integrations_audit_trail(client, sessionmaker):
    mine = await portal_member(client, sessionmaker, "owner", "ann@example.com")
    async with other_client(client) as eve:
        theirs = await portal_member(eve, sessionmaker, "owner", "eve@example.com")
        page = await eve.get("/portal/credentials")
        await eve.post("/portal/credentials/secret", data={"csrf": csrf(page.text)})
    # An operator's change of my integration, by the CLI's service call.
    async with sessionmaker() as session, session.begin():
        await integrations.rotate_webhook_secret(
            session, mine.integration_id, timedelta(0), Actor("system:ops")
        )
    trail = await client.get("/portal/audit")
    assert trail.status_code == 200
    assert re.findall(r'data-action="([^"]+)"', trail.text) == [
        "integration.rotate_webhook_secret",
        "portal.login",
        "portal.member.add",
    ]
    assert "eve@example.com" not in trail.text
    assert theirs.client_id not in trail.text
    assert "system:ops" in trail.text
