"""The back office's OpenID Connect login against a real OpenID provider on loopback: panva's
``oidc-provider`` (npm, installed by scripts/test under .cache/oidc-provider), started by
``oidc_provider.mjs`` with our client, another client and one account that every
authorization logs in. The browser's part is followed with httpx: our login route's redirect,
the provider's redirects, back to our callback.

A login succeeds for an enabled operator with that e-mail address; a wrong nonce, an ID token
for another client, an expired ID token, a code used twice, and a key the provider no longer
publishes are each refused, with no session made."""

import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
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
from tests.processes import free_port

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / ".cache" / "oidc-provider" / "node_modules"
SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
EMAIL = "ann@example.com"
CALLBACK = BASE_URL + oidc.CALLBACK_PATH


def secret(client_id: str) -> str:
    return f"{client_id}-secret-that-is-long-enough-for-hs256-0123456789"


class Provider:
    """The provider process; ``rotate`` restarts it with a new signing key (same issuer).
    ``mode`` "eid" makes it an eID broker (see oidc_provider.mjs)."""

    def __init__(self, callback: str = CALLBACK, mode: str = "", port: int | None = None) -> None:
        if not (MODULES / "oidc-provider").is_dir():
            pytest.fail(f"The OIDC tests need oidc-provider in {MODULES}: run scripts/test")
        self.port = port or free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[str] | None = None
        self.arguments = [callback, "key-1", EMAIL, *([mode] if mode else [])]
        self.start("key-1")

    def start(self, key_id: str) -> None:
        self.arguments[1] = key_id
        self.process = subprocess.Popen(
            ["node", str(SCRIPT), str(self.port), *self.arguments],
            env={**os.environ, "OIDC_PROVIDER_MODULES": str(MODULES)},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.strip() == "ready", f"the provider did not start: {line!r}"

    def rotate(self, key_id: str) -> None:
        self.stop()
        self.start(key_id)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    running = Provider()
    yield running
    running.stop()


@asynccontextmanager
async def oidc_client(
    provider: "Provider", db_url: str, engine: Any, base_url: str = BASE_URL
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app at ``base_url``, its OpenID provider the loopback one."""
    settings = make_settings(
        db_url,
        base_url=base_url,
        oidc_issuer=provider.issuer,
        oidc_client_id="dealbroker",
        oidc_client_secret=secret("dealbroker"),
    )
    app = create_app(settings, engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as c:
            yield c


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


async def issuer_documents(provider: Provider) -> tuple[dict, dict]:
    async with httpx.AsyncClient() as http:
        metadata = (await http.get(f"{provider.issuer}/.well-known/openid-configuration")).json()
        return metadata, (await http.get(metadata["jwks_uri"])).json()


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
