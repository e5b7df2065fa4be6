"""OAuth 2.0 client credentials and bearer-token checks (RFC 6749 sections 4.4 and 5)."""

import base64
from datetime import timedelta

import pytest

from dealbroker.integrations import service as integrations
from tests.conftest import create_deal, make_caller

FORM = {"grant_type": "client_credentials"}


async def _token(client, data=None, auth=None, headers=None):
    return await client.post("/oauth2/token", data=data or FORM, auth=auth, headers=headers)


async def test_basic_auth_issues_a_bearer_token(client, caller):
    response = await _token(client, auth=(caller.client_id, caller.client_secret))
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert set(body) == {"access_token", "token_type", "expires_in", "scope"}
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    assert body["scope"] == "deals:read deals:write"
    assert len(body["access_token"]) >= 43  # 256 bits, base64url


async def test_form_credentials_are_accepted(client, caller):
    data = {**FORM, "client_id": caller.client_id, "client_secret": caller.client_secret}
    response = await _token(client, data=data)
    assert response.status_code == 200
    listed = await client.get(
        "/deals/v1/deals", headers={"Authorization": f"Bearer {response.json()['access_token']}"}
    )
    assert listed.status_code == 200


async def test_tokens_are_stored_only_as_hashes(client, caller, sessionmaker):
    from sqlalchemy import select

    from dealbroker.auth.models import AccessToken

    async with sessionmaker() as session:
        stored = list(await session.scalars(select(AccessToken.token_hash)))
    assert caller.token not in stored
    assert len(stored) == 1
    assert len(stored[0]) == 64


@pytest.mark.parametrize(
    ("credentials", "error"),
    [
        (("unknown", "secret"), "invalid_client"),
        (None, "invalid_client"),  # no credentials at all
    ],
)
async def test_bad_client_is_401_with_challenge(client, caller, credentials, error):
    response = await _token(client, auth=credentials)
    assert response.status_code == 401
    assert response.json() == {
        "error": error,
        "error_description": response.json()["error_description"],
    }
    assert response.headers["www-authenticate"].startswith("Basic realm=")


async def test_wrong_secret_is_invalid_client(client, caller):
    response = await _token(client, auth=(caller.client_id, caller.client_secret + "x"))
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


async def test_unknown_client_and_wrong_secret_do_the_same_work(
    client, caller, sessionmaker, monkeypatch
):
    """A wrong secret must not answer measurably slower than an unknown client id (which would
    tell which client ids exist): every refusal verifies one secret against one stored hash,
    and they all answer alike. Asserted by counting, as timing would be flaky."""
    from dealbroker.auth import service
    from dealbroker.core import security

    verified: list[str] = []

    def counting(given: str, stored_hash: str) -> bool:
        verified.append(stored_hash)
        return security.verify_secret(given, stored_hash)

    monkeypatch.setattr(service, "verify_secret", counting, raising=False)
    async with sessionmaker() as session, session.begin():
        disabled = await integrations.create(session, "Disabled")
        await integrations.set_active(session, disabled.integration.client_id, False)
    attempts = {
        "unknown client": ("dbc_" + "0" * 24, caller.client_secret),
        "wrong secret": (caller.client_id, caller.client_secret + "x"),
        "disabled client": (disabled.integration.client_id, disabled.client_secret),
    }
    answers = {}
    for name, credentials in attempts.items():
        verified.clear()
        response = await _token(client, auth=credentials)
        assert len(verified) == 1, name
        assert len(verified[0]) == 64, name  # a SHA-256 in hex, like every stored secret
        answers[name] = (
            response.status_code,
            response.content,
            response.headers["www-authenticate"],
            response.headers["cache-control"],
        )
    assert len(set(answers.values())) == 1, answers
    assert answers["unknown client"][:2] == (
        401,
        b'{"error":"invalid_client","error_description":"Client authentication failed."}',
    )


async def test_malformed_basic_header_is_invalid_client(client, caller):
    response = await _token(client, headers={"Authorization": "Basic !!!notbase64"})
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"
    no_colon = base64.b64encode(b"just-a-client-id").decode()
    response = await _token(client, headers={"Authorization": f"Basic {no_colon}"})
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"grant_type": "password"}, "unsupported_grant_type"),
        ({"grant_type": "authorization_code"}, "unsupported_grant_type"),
        ({}, "invalid_request"),
        ({"grant_type": "client_credentials", "scope": "deals:delete"}, "invalid_scope"),
    ],
)
async def test_bad_grant_is_400(client, caller, data, error):
    response = await client.post(
        "/oauth2/token", data=data or {"x": "y"}, auth=(caller.client_id, caller.client_secret)
    )
    assert response.status_code == 400
    assert response.json()["error"] == error


async def test_json_body_is_invalid_request(client, caller):
    response = await client.post(
        "/oauth2/token", json=FORM, auth=(caller.client_id, caller.client_secret)
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


async def test_two_authentication_methods_are_refused(client, caller):
    data = {**FORM, "client_id": caller.client_id, "client_secret": caller.client_secret}
    response = await _token(client, data=data, auth=(caller.client_id, caller.client_secret))
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


async def test_basic_auth_may_repeat_the_client_id_in_the_form(client, caller):
    """RFC 6749 2.3.1; requests-oauthlib sends it so with include_client_id=True."""
    auth = (caller.client_id, caller.client_secret)
    same = await _token(client, data={**FORM, "client_id": caller.client_id}, auth=auth)
    assert same.status_code == 200, same.text
    other = await _token(client, data={**FORM, "client_id": "dbc_someone_else"}, auth=auth)
    assert other.status_code == 400
    assert other.json()["error"] == "invalid_request"


async def test_scope_can_be_narrowed(client, caller):
    data = {**FORM, "scope": "deals:read"}
    response = await _token(client, data=data, auth=(caller.client_id, caller.client_secret))
    assert response.json()["scope"] == "deals:read"
    headers = {"Authorization": f"Bearer {response.json()['access_token']}"}
    assert (await client.get("/deals/v1/deals", headers=headers)).status_code == 200
    created = await client.post("/deals/v1/deals", json={}, headers=headers)
    assert created.status_code == 403
    assert created.headers["content-type"] == "application/problem+json"
    assert created.json()["status"] == 403
    assert 'error="insufficient_scope"' in created.headers["www-authenticate"]


async def test_integration_without_write_scope_gets_403(client, sessionmaker):
    reader = await make_caller(client, sessionmaker, "Reader", scopes=["deals:read"])
    response = await client.post("/deals/v1/deals", json={}, headers=reader.headers)
    assert response.status_code == 403
    assert response.json()["title"] == "Not Allowed"


async def test_integration_without_read_scope_gets_403_on_list(client, sessionmaker):
    writer = await make_caller(client, sessionmaker, "Writer", scopes=["deals:write"])
    response = await client.get("/deals/v1/deals", headers=writer.headers)
    assert response.status_code == 403
    assert (
        await client.post("/deals/v1/deals", json={}, headers=writer.headers)
    ).status_code == 201


@pytest.mark.parametrize(
    "header",
    [None, "Bearer", "Bearer ", "Bearer not-a-token", "Basic Zm9vOmJhcg==", "Token abc"],
)
async def test_missing_or_invalid_bearer_is_401(client, caller, header):
    headers = {} if header is None else {"Authorization": header}
    response = await client.get("/deals/v1/deals", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"].startswith('Bearer realm="dealbroker"')
    body = response.json()
    assert body["status"] == 401
    assert body["title"] == "Not Authorized"


async def test_expired_token_is_401(client, sessionmaker, frozen_clock):
    fresh = await make_caller(client, sessionmaker)  # issued at the frozen time
    assert (await client.get("/deals/v1/deals", headers=fresh.headers)).status_code == 200
    frozen_clock[0] += timedelta(seconds=3599)
    assert (await client.get("/deals/v1/deals", headers=fresh.headers)).status_code == 200
    frozen_clock[0] += timedelta(seconds=2)
    response = await client.get("/deals/v1/deals", headers=fresh.headers)
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_rotating_the_secret_revokes_tokens_at_once(client, caller, sessionmaker):
    async with sessionmaker() as session, session.begin():
        rotated = await integrations.rotate_secret(session, caller.client_id)
    assert (await client.get("/deals/v1/deals", headers=caller.headers)).status_code == 401
    old = await _token(client, auth=(caller.client_id, caller.client_secret))
    assert old.status_code == 401
    new = await _token(client, auth=(caller.client_id, rotated.client_secret))
    assert new.status_code == 200


async def test_disabling_revokes_tokens_and_refuses_new_ones(client, caller, sessionmaker):
    async with sessionmaker() as session, session.begin():
        await integrations.set_active(session, caller.client_id, False)
    assert (await client.get("/deals/v1/deals", headers=caller.headers)).status_code == 401
    again = await _token(client, auth=(caller.client_id, caller.client_secret))
    assert again.status_code == 401
    async with sessionmaker() as session, session.begin():
        await integrations.set_active(session, caller.client_id, True)
    assert (await _token(client, auth=(caller.client_id, caller.client_secret))).status_code == 200


async def test_every_integration_endpoint_needs_a_token(client, caller):
    deal = await create_deal(client, caller)
    calls = [
        ("GET", "/deals/v1/deals"),
        ("POST", "/deals/v1/deals"),
        ("GET", f"/deals/v1/deals/{deal['id']}"),
        ("POST", f"/deals/v1/deals/{deal['id']}/status"),
        ("POST", f"/deals/{deal['id']}/status"),
        ("POST", f"/deals/v1/deals/{deal['id']}/offer"),
    ]
    for method, path in calls:
        response = await client.request(method, path, json={})
        assert response.status_code == 401, (method, path)


async def test_ping_needs_no_token(client):
    response = await client.get("/ping")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_authorization_server_metadata_lets_clients_discover(client, caller):
    """RFC 8414: a discovering client (e.g. openid-client) finds the token endpoint there."""
    meta = (await client.get("/.well-known/oauth-authorization-server")).json()
    assert meta["issuer"] == "http://testserver"
    assert meta["token_endpoint"] == "http://testserver/oauth2/token"
    assert meta["grant_types_supported"] == ["client_credentials"]
    assert set(meta["token_endpoint_auth_methods_supported"]) == {
        "client_secret_basic",
        "client_secret_post",
    }
    token = await _token(
        client,
        data={"grant_type": "client_credentials"},
        auth=(caller.client_id, caller.client_secret),
    )
    assert token.status_code == 200
