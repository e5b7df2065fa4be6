"""A new integrator's first sandbox deal, from credentials to verified webhooks, on SQLite and
PostgreSQL: the developer portal in a real headless Chromium and the standalone
``dealbroker-client`` command from a virtual environment holding only the client package,
against a real ``dealbroker serve`` and ``dealbroker worker`` on loopback.

An operator adds the integrator as the demo integration's owner (``dealbroker portal members
add``). In the portal the integrator logs in by the e-mailed link, reads the client id, issues a
new client secret and a new webhook secret (each shown once), and registers a loopback receiver
as a webhook endpoint. With those credentials only, ``dealbroker-client trigger
carrier-completed`` drives a new deal to Completed and paid out; the worker delivers each of its
events to the receiver, and every delivery verifies (Standard Webhooks) with the webhook secret
the portal showed. The portal's endpoint page then lists those deliveries, delivered, and a
delivery's page shows the headers and body the receiver got. Screenshots go to
``docs/screenshots/portal-first-deal-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``.
"""

import asyncio
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from standardwebhooks.webhooks import Webhook

from dealbroker.core.db import create_engine, create_sessionmaker
from tests.browser import DESKTOP, LiveServer, Person, serve_module
from tests.client_venv import ClientVenv
from tests.conftest import BACKENDS
from tests.processes import cli
from tests.receiver import Receiver
from tests.web.portal_helpers import last_link

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server
SCENARIO = "carrier-completed"


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    # A worker process of its own beside the server, on SQLite too.
    settings = {"DEALBROKER_EMBEDDED_WORKER": "off"}
    yield from serve_module(request, tmp_path_factory, "portal-first-deal", settings)


@pytest.fixture
async def outbox(
    served: tuple[LiveServer, str],
) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """The served database, read for the e-mailed login link (the server has no SMTP)."""
    engine = create_engine(served[1])
    yield create_sessionmaker(engine)
    await engine.dispose()


async def wait_for(condition: Any, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def client_command(venv: ClientVenv, env: dict[str, str], *args: str) -> Any:
    """``dealbroker-client`` from the client's own virtual environment; its JSON output."""
    done = subprocess.run(
        ["dealbroker-client", *args],
        env=venv.env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_from_credentials_to_a_completed_sandbox_deal_with_verified_webhooks(
    served: tuple[LiveServer, str],
    outbox: async_sessionmaker[AsyncSession],
    client_venv: ClientVenv,
    receiver: Receiver,
    browser: "Browser",
    shots: Path,
    tmp_path: Path,
) -> None:
    live, db_url = served
    assert len(live.processes) == 2  # dealbroker serve and dealbroker worker
    # The operator adds the integrator as the demo integration's owner.
    demo = live.credential("client id")
    email = "first@market.example.com"
    added = cli(db_url, "portal", "members", "add", demo, email, "owner")
    assert added.returncode == 0, added.stderr

    person = await Person.open(browser, shots, DESKTOP, language="nb")
    page = person.page
    try:
        # Logged in by the e-mailed link.
        await person.goto(f"{live.base}/portal/login")
        await person.label("Your e-mail address").fill(email)
        await person.press("E-mail me a login link")
        path = None
        deadline = time.monotonic() + 10
        while path is None:
            assert time.monotonic() < deadline, "no login link was e-mailed"
            path = await last_link(outbox, email)
            await asyncio.sleep(0.1)
        await person.goto(live.base + path)
        await person.press("Log in")
        await page.wait_for_url(f"{live.base}/portal/")

        # The credentials: the client id, a new client secret and a new webhook secret.
        await page.get_by_role("link", name=person.t("Credentials"), exact=True).first.click()
        await page.wait_for_url(f"{live.base}/portal/credentials")
        await person.audit()
        client_id = await page.locator("[data-client-id]").inner_text()
        assert client_id == demo
        await person.press("New client secret")
        client_secret = await page.locator("[data-client-secret]").inner_text()
        await person.shot("portal-first-deal-1-client-secret")
        await person.goto(f"{live.base}/portal/credentials")
        await person.press("New webhook secret")
        webhook_secret = await page.locator("[data-webhook-secret]").inner_text()
        assert webhook_secret.startswith("whsec_")
        await person.shot("portal-first-deal-2-webhook-secret")

        # The receiver, registered as the integration's webhook endpoint (every kind).
        await page.get_by_role("link", name=person.t("Webhooks"), exact=True).first.click()
        await page.wait_for_url(f"{live.base}/portal/webhooks")
        await person.label("URL").fill(receiver.url)
        await person.label("Description (optional)").fill("First receiver")
        await person.press("Register the endpoint")
        endpoint_page = page.url.split("?")[0]
        assert re.fullmatch(r".*/portal/webhooks/[0-9a-f-]{36}", endpoint_page)

        # The first deal, with the client package's command and the portal's credentials only.
        env = {
            "DEALBROKER_API_URL": live.base,
            "DEALBROKER_CLIENT_ID": client_id,
            "DEALBROKER_CLIENT_SECRET": client_secret,
            "DEALBROKER_WEBHOOK_SECRET": webhook_secret,
            "XDG_STATE_HOME": str(tmp_path / "state"),
        }
        listed = client_command(client_venv, env, "deals", "list")
        assert isinstance(listed, dict)
        result = client_command(client_venv, env, "trigger", SCENARIO)
        assert result["status"] == "Completed"
        ids = [e["id"] for e in result["events"]]
        assert len(ids) >= 5
        assert [e["event"] for e in result["events"]][-1] == "payment.status"

        # Every event reaches the receiver, and verifies with the secret the portal showed.
        await wait_for(
            lambda: {r.headers.get("webhook-id") for r in receiver.requests} >= set(ids),
            f"the worker did not deliver the deal's {len(ids)} events",
        )
        verifier = Webhook(webhook_secret)
        delivered = [verifier.verify(r.body, r.headers) for r in receiver.requests]
        # Once each; sent concurrently, they may arrive in any order: deal_sequence orders them.
        assert [d["id"] for d in sorted(delivered, key=lambda d: d["deal_sequence"])] == ids
        assert all(d["data"]["dealId"] == result["dealId"] for d in delivered)

        # The portal's delivery pages show them.
        deliveries = page.locator("li[data-delivery]")
        deadline = time.monotonic() + 20
        while True:
            await person.goto(f"{endpoint_page}?status=delivered")
            if await deliveries.count() == len(ids):
                break
            assert time.monotonic() < deadline, "the portal never listed every delivery"
            await asyncio.sleep(0.3)
        await person.shot("portal-first-deal-3-deliveries")
        await deliveries.last.get_by_role("link").click()
        await page.wait_for_url(re.compile(r".*/deliveries/[0-9a-f-]{36}$"))
        await person.audit()
        first = next(r for r in receiver.requests if r.headers["webhook-id"] == ids[0])
        await expect(page.locator("[data-event-id]")).to_have_text(ids[0])
        assert await page.locator("[data-body]").inner_text() == first.body.decode()
        headers = await page.locator("[data-headers]").inner_text()
        assert f"webhook-signature: {first.headers['webhook-signature']}" in headers
        await person.shot("portal-first-deal-4-delivery")
        assert person.errors == []
    finally:
        await person.context.close()
