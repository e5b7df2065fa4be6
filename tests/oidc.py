"""A real OpenID provider on loopback (panva's oidc-provider, tests/operators/oidc_provider.mjs),
for the back office's and the portal's logins and for eID signing."""

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from dealbroker.app import create_app
from dealbroker.operators import oidc
from tests.conftest import BASE_URL, make_settings
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / ".cache" / "oidc-provider" / "node_modules"
SCRIPT = Path(__file__).parent / "operators" / "oidc_provider.mjs"
CALLBACK = BASE_URL + oidc.CALLBACK_PATH
EMAIL = "ann@example.com"


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


async def issuer_documents(provider: Provider) -> tuple[dict, dict]:
    async with httpx.AsyncClient() as http:
        metadata = (await http.get(f"{provider.issuer}/.well-known/openid-configuration")).json()
        return metadata, (await http.get(metadata["jwks_uri"])).json()
