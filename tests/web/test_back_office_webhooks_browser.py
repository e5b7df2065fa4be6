"""The back office's webhooks pages in a real headless Chromium, in Swedish on a phone (390 px)
and in Norwegian Bokmål on a desktop (1280 px), on SQLite and PostgreSQL: a failing endpoint
from the list to a recovered backlog.

The real ``dealbroker serve`` runs beside a real ``dealbroker worker`` process (on SQLite too,
with the server's embedded worker off), delivering to a loopback receiver that answers
500 until it is fixed. The endpoint fails and the list shows it failing with its backlog; the
operator opens it and sees the attempts; the receiver is fixed; the operator recovers; the
worker delivers the backlog and the page shows it empty; the audit trail shows the recovery.
Every page state is checked with axe-core, must fit the window, and is screenshotted (to
``docs/screenshots/back-office-webhooks-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``).
"""

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser import WINDOWS, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.processes import cli
from tests.receiver import Receiver, start_receiver
from tests.web.walks import login_path

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server
EVENTS = 2  # test events queued for the failing endpoint: its backlog


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    # A worker process beside the server on SQLite too, as on PostgreSQL.
    settings = {"DEALBROKER_EMBEDDED_WORKER": "off"}
    yield from serve_module(request, tmp_path_factory, "back-office-webhooks", settings)


async def integration_api(live: LiveServer) -> httpx.AsyncClient:
    """The demo integration's API client, with a token."""
    api = httpx.AsyncClient(base_url=live.base, timeout=10)
    token = await api.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(live.credential("client id"), live.credential("client secret")),
    )
    assert token.status_code == 200, token.text
    api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
    return api


async def wait_for(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


@pytest.mark.parametrize(("device", "language", "name"), WINDOWS)
async def test_an_operator_recovers_a_failing_endpoints_backlog(
    served: tuple[LiveServer, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    name: str,
) -> None:
    live, db_url = served
    assert len(live.processes) == 2  # dealbroker serve and dealbroker worker
    receiver: Receiver = start_receiver()
    receiver.answer(500, body=b"down for maintenance", times=10_000)
    api = await integration_api(live)
    endpoint_id = None
    person = None
    try:
        created = await api.post(
            "/integrations/v1/webhook-endpoints", json={"url": receiver.url, "description": name}
        )
        assert created.status_code == 201, created.text
        endpoint_id = created.json()["id"]
        for _ in range(EVENTS):
            queued = await api.post(f"/integrations/v1/webhook-endpoints/{endpoint_id}/test")
            assert queued.status_code in (200, 201, 202), queued.text
        # Each delivery fails at once and again 5 s later; the next retry is minutes away.
        await wait_for(
            lambda: len(receiver.requests) >= 2 * EVENTS, "the worker did not try twice", 40
        )

        email = f"webhooks-{name}@operators.example.com"
        added = cli(db_url, "operators", "add", email, "--role", "admin")
        assert added.returncode == 0, added.stderr
        person = await Person.open(browser, shots, device, language=language)
        page = person.page
        await person.goto(live.base + login_path(db_url, email))
        await person.press("Log in")

        # The list: the failing endpoint first, with its backlog.
        await page.get_by_role("link", name=person.t("Webhooks"), exact=True).first.click()
        await page.wait_for_url(f"{live.base}/back-office/webhooks")
        await person.audit()
        first = page.locator("section[data-endpoint]").first
        await expect(first).to_have_attribute("data-endpoint", endpoint_id)
        await expect(first).to_have_attribute("data-failing", "true")
        await expect(first.locator("[data-backlog]")).to_have_attribute("data-backlog", str(EVENTS))
        await expect(first.locator("[data-failure-rate]")).to_have_attribute(
            "data-failure-rate", "100"
        )
        await person.shot(f"back-office-webhooks-{name}-1-list")

        # The endpoint: its failed attempts and the deliveries waiting.
        await first.get_by_role("link").click()
        await page.wait_for_url(f"{live.base}/back-office/webhooks/{endpoint_id}")
        await person.audit()
        assert await page.locator("li[data-attempt][data-status-code='500']").count() >= 2
        await expect(page.locator("li[data-delivery]")).to_have_count(EVENTS)
        await person.shot(f"back-office-webhooks-{name}-2-endpoint")

        # The receiver is fixed; the operator recovers, and the worker sends the backlog now.
        receiver.script.clear()
        seen = len(receiver.requests)
        await person.press("Recover the deliveries")
        await expect(page.locator(".flash.ok")).to_have_count(1)
        await person.shot(f"back-office-webhooks-{name}-3-recovered")
        await wait_for(
            lambda: len(receiver.requests) >= seen + EVENTS, "the backlog was not delivered"
        )
        deadline = time.monotonic() + 20
        backlog = page.locator("[data-backlog]")
        while await backlog.get_attribute("data-backlog") != "0":
            assert time.monotonic() < deadline, "the page never showed the backlog empty"
            await asyncio.sleep(0.2)
            await page.reload()
        await person.audit()
        await expect(page.locator("[data-waiting-none]")).to_have_count(1)
        await expect(page.locator("[data-state]")).to_have_attribute("data-state", "enabled")
        await person.shot(f"back-office-webhooks-{name}-4-delivered")
        # Sent again with their webhook-ids: the same events, not new ones.
        first_ids = {r.headers["webhook-id"] for r in receiver.requests[:seen]}
        assert {r.headers["webhook-id"] for r in receiver.requests[seen:]} == first_ids

        await person.goto(f"{live.base}/back-office/audit")
        recovered = page.locator("tr[data-action='webhook.recover']").first
        await expect(recovered).to_contain_text(email)
        await expect(recovered).to_contain_text(endpoint_id)
        await person.shot(f"back-office-webhooks-{name}-5-audit")
        assert not person.errors, person.errors
    finally:
        if person is not None:
            await person.context.close()
        if endpoint_id is not None:
            await api.delete(f"/integrations/v1/webhook-endpoints/{endpoint_id}")
        await api.aclose()
        receiver.close()
