"""The back office's OpenID Connect login against a real OpenID provider on loopback: panva's
``oidc-provider`` (npm, installed by scripts/test under .cache/oidc-provider), started by
``oidc_provider.mjs`` with our client, another client and one account that every
authorization logs in. The browser's part is followed with httpx: our login route's redirect,
the provider's redirects, back to our callback.

A login succeeds for an enabled operator with that e-mail address; a wrong nonce, an ID token
for another client, an expired ID token, a code used twice, and a key the provider no longer
publishes are each refused, with no session made."""

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from authlib.integrations.httpx_client import AsyncOAuth2Client
from sqlalchemy import select

from dealbroker.app import create_app
from dealbroker.audit.service import Actor
from dealbroker.core import clock
from dealbroker.operators import oidc, service
from dealbroker.operators.models import OperatorSession
from tests.conftest import BASE_URL, make_settings
from tests.oidc import CALLBACK, EMAIL, Provider, issuer_documents, oidc_client, secret

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    running = Provider()
    yield running
    running.stop()


@pytest.fixture
async def client(provider, db_url, engine) -> AsyncIterator[httpx.AsyncClient]:
    async with oidc_client(provider, db_url, engine) as c:
        yield c


@pytest.fixture
async def ann(sessionmaker) -> None:
    async with sessionmaker() as session, session.begin():
        await service.add(session, EMAIL, ["support"], Actor("system:test"))


async def at_provider(url: str) -> str:
    """Follow the provider's redirects (its own cookies kept) until it sends the browser back
    to our callback; that URL."""
    async with httpx.AsyncClient(timeout=10) as browser:
        for _ in range(10):
            answer = await browser.get(url)
            assert answer.status_code in (302, 303), answer.text[:500]
            url = (
                str(answer.next_request.url) if answer.next_request else answer.headers["location"]
            )
            if url.startswith(CALLBACK):
                return url
    raise AssertionError("the provider never sent the browser back")


async def to_callback(client: httpx.AsyncClient) -> str:
    start = await client.get("/back-office/login/oidc")
    assert start.status_code == 303
    sent = urlsplit(start.headers["location"])
    query = parse_qs(sent.query)
    assert query["code_challenge_method"] == ["S256"]
    assert all(query.get(k) for k in ("state", "nonce", "code_challenge"))
    return (await at_provider(start.headers["location"])).removeprefix(BASE_URL)


async def sessions(sessionmaker) -> int:
    async with sessionmaker() as session:
        return len((await session.scalars(select(OperatorSession))).all())


async def test_an_operator_logs_in_with_the_identity_provider(client, ann, sessionmaker, caplog):
    callback = await to_callback(client)
    pending = client.cookies["dealbroker-oidc"]
    answer = await client.get(callback)
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/back-office/"
    home = await client.get("/back-office/")
    assert home.status_code == 200
    assert EMAIL in home.text
    # The same return again, from a browser holding the same pending login: the provider
    # refuses the code it exchanged already.
    client.cookies.clear()
    client.cookies.set("dealbroker-oidc", pending)
    refused = await client.get(callback)
    assert refused.status_code == 400
    assert "the code was not accepted" in caplog.text
    assert await sessions(sessionmaker) == 1


async def test_no_operator_no_login(client, sessionmaker):
    answer = await client.get(await to_callback(client))
    assert answer.status_code == 400
    assert await sessions(sessionmaker) == 0


async def test_a_wrong_nonce_is_refused(client, ann, sessionmaker):
    callback = await to_callback(client)
    state, nonce, verifier = client.cookies["dealbroker-oidc"].split(".")
    client.cookies.set("dealbroker-oidc", f"{state}.not-the-nonce.{verifier}")
    assert (await client.get(callback)).status_code == 400
    assert await sessions(sessionmaker) == 0


async def test_another_browsers_state_is_refused(client, ann, sessionmaker):
    callback = await to_callback(client)
    client.cookies.clear()
    assert (await client.get(callback)).status_code == 400
    assert await sessions(sessionmaker) == 0


async def test_an_expired_id_token_is_refused(client, ann, sessionmaker):
    callback = await to_callback(client)
    later = clock.now() + timedelta(hours=2)  # the ID token lives an hour
    clock.set_clock(lambda: later)
    assert (await client.get(callback)).status_code == 400
    assert await sessions(sessionmaker) == 0


async def tokens_for(provider: Provider, client_id: str) -> tuple[dict, str]:
    """The token response of a whole code flow by ``client_id``, run by authlib, and its
    nonce."""
    nonce = "n-" + client_id
    async with AsyncOAuth2Client(
        client_id=client_id,
        client_secret=secret(client_id),
        scope="openid email",
        redirect_uri=CALLBACK,
        code_challenge_method="S256",
    ) as oauth:
        verifier = "v" * 64
        url, _ = oauth.create_authorization_url(
            f"{provider.issuer}/auth", nonce=nonce, code_verifier=verifier
        )
        back = await at_provider(url)
        token = await oauth.fetch_token(
            f"{provider.issuer}/token", authorization_response=back, code_verifier=verifier
        )
    return dict(token), nonce


async def test_an_id_token_for_another_client_is_refused(provider, db_url):
    settings = make_settings(db_url, oidc_issuer=provider.issuer, oidc_client_id="dealbroker")
    token, nonce = await tokens_for(provider, "other-app")
    metadata, jwks = await issuer_documents(provider)
    with pytest.raises(oidc.OidcRefused, match="aud"):
        oidc.validate_id_token(settings, metadata, jwks, token["id_token"], nonce, token)
    # The same token for the client it was issued to is valid: only the audience is wrong.
    other = make_settings(db_url, oidc_issuer=provider.issuer, oidc_client_id="other-app")
    assert oidc.validate_id_token(other, metadata, jwks, token["id_token"], nonce, token) == EMAIL


async def test_key_rotation(provider, client, ann, sessionmaker, db_url):
    settings = make_settings(db_url, oidc_issuer=provider.issuer, oidc_client_id="dealbroker")
    old_token, nonce = await tokens_for(provider, "dealbroker")
    provider.rotate("key-2")
    # A login after the rotation works (the new key is fetched)...
    assert (await client.get(await to_callback(client))).status_code == 303
    assert await sessions(sessionmaker) == 1
    # ... and a token signed with the key the provider no longer publishes is refused.
    metadata, jwks = await issuer_documents(provider)
    assert [k["kid"] for k in jwks["keys"]] == ["key-2"]
    with pytest.raises(oidc.OidcRefused):
        oidc.validate_id_token(settings, metadata, jwks, old_token["id_token"], nonce, old_token)


CONSOLES = [("/back-office", "dealbroker-oidc"), ("/portal", "dealbroker-portal-oidc")]


@pytest.mark.parametrize(("prefix", "pending"), CONSOLES)
async def test_behind_https_the_pending_login_cookie_is_secure_with_the_host_prefix(
    provider, db_url, engine, prefix, pending
):
    """Both consoles' pending login: set for ten minutes, ``__Host-`` and Secure behind https,
    and deleted by the callback with the same attributes (or the browser keeps it)."""
    base = "https://bo.example.com"
    async with oidc_client(provider, db_url, engine, base) as c:
        start = await c.get(f"{prefix}/login/oidc")
        assert start.status_code == 303
        query = parse_qs(urlsplit(start.headers["location"]).query)
        assert query["redirect_uri"] == [f"{base}{prefix}/login/oidc/callback"]
        cookie = start.headers["set-cookie"]
        assert cookie.startswith(f"__Host-{pending}=")
        for attribute in ("Max-Age=600", "HttpOnly", "Path=/", "SameSite=lax", "Secure"):
            assert attribute in cookie
        assert "Domain" not in cookie
        back = await c.get(f"{prefix}/login/oidc/callback?code=x&state=another")
        assert back.status_code == 400
        deleted = back.headers["set-cookie"]
        assert deleted.startswith(f'__Host-{pending}=""')
        for attribute in ("Max-Age=0", "HttpOnly", "Path=/", "SameSite=lax", "Secure"):
            assert attribute in deleted


@pytest.mark.parametrize(("prefix", "pending"), CONSOLES)
async def test_without_an_issuer_there_is_no_oidc_login(db_url, engine, prefix, pending):
    app = create_app(make_settings(db_url), engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as c:
            start = await c.get(f"{prefix}/login/oidc")
            assert start.status_code == 303
            assert start.headers["location"] == f"{prefix}/login"
            assert "set-cookie" not in start.headers
            c.cookies.set(pending, "state.nonce.verifier")
            back = await c.get(f"{prefix}/login/oidc/callback?code=x&state=state")
            assert back.status_code == 400
            assert back.headers["set-cookie"].startswith(f'{pending}=""')
