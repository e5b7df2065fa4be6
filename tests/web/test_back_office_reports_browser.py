"""The back office's reported messages in a real headless Chromium, in Swedish on a phone
(390 px) and in Norwegian Bokmål on a desktop (1280 px): an operator sees the count on the
home page, opens the queue from the navigation, hides the message that asks to pay outside the
deal, opens the other report's deal and leaves its message, stops the seller writing on the
deal, and finds every step in the audit trail.

The real ``dealbroker serve`` runs (plus a ``dealbroker worker`` on PostgreSQL); the parties'
messages and reports are written through ``conversations.service`` on the server's database.
Every page state is checked with axe-core, must fit the window, and is screenshotted (to
``docs/screenshots/back-office-reports-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``), as in
``tests/browser.py``.
"""

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from dealbroker.core.db import create_engine, create_sessionmaker
from tests.browser import FLOW_SECONDS, WINDOWS, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.processes import cli
from tests.web.conversations import OFF_PLATFORM, Talked, talked
from tests.web.walks import login_path

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The running server and its database (the operator's commands and the messages need it)."""
    yield from serve_module(request, tmp_path_factory, "back-office-reports")


async def _talked(live: LiveServer, db_url: str) -> Talked:
    """The deal of ``tests.web.conversations.talked`` on the running server."""
    engine = create_engine(db_url, pool_size=1)
    try:
        async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
            token = await api.post(
                "/oauth2/token",
                data={"grant_type": "client_credentials"},
                auth=(live.credential("client id"), live.credential("client secret")),
            )
            assert token.status_code == 200, token.text
            caller = SimpleNamespace(
                headers={"Authorization": f"Bearer {token.json()['access_token']}"}
            )
            return await talked(api, caller, create_sessionmaker(engine), db_url)
    finally:
        await engine.dispose()


@pytest.mark.parametrize(("device", "language", "name"), WINDOWS)
async def test_an_operator_works_the_reported_messages(
    served: tuple[LiveServer, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    name: str,
) -> None:
    live, db_url = served
    shot = f"back-office-reports-{name}"
    email = f"sue-{name}@ops.example.com"
    added = cli(db_url, "operators", "add", email, "--role", "support", "--role", "admin")
    assert added.returncode == 0, added.stderr
    sue = await Person.open(browser, shots, device, language=language)
    page = sue.page
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            t = await _talked(live, db_url)
            await sue.goto(live.base + login_path(db_url, email))
            await sue.press("Log in")
            await expect(page.locator("[data-open-reports]")).not_to_have_attribute(
                "data-open-reports", "0"
            )
            await sue.audit()
            await (
                page.locator("nav.back-office")
                .get_by_role("link", name=sue.t("Reported messages"), exact=True)
                .click()
            )
            await page.wait_for_url(f"{live.base}/back-office/reports")
            await sue.audit()
            mine = page.locator(f'[data-report-of="{t.off_platform}"]')
            await expect(mine).to_have_count(1)
            await expect(mine).to_contain_text(OFF_PLATFORM)
            await expect(mine.locator("[data-warned]").first).to_be_visible()
            await sue.shot(f"{shot}-1-queue")

            await sue.press(
                "Hide the message", within=f'[data-conversation-message="{t.off_platform}"]'
            )
            await expect(page.locator(".flash.ok")).to_have_text(
                sue.t("The message is hidden from both parties. Its report is closed.")
            )
            await expect(mine).to_have_count(0)
            await sue.shot(f"{shot}-2-hidden")

            # The other report, on its deal's page: its conversations, the hidden one marked.
            await page.locator(f'[data-report-of="{t.answer}"] h2 a').click()
            await page.wait_for_url(f"{live.base}/back-office/deals/{t.deal_id}")
            await sue.audit()
            await expect(page.locator("[data-conversation]")).to_have_count(2)
            await expect(
                page.locator(f'[data-conversation-message="{t.off_platform}"] [data-hidden-by]')
            ).to_contain_text(email)
            await sue.press(
                "Leave it, close the report", within=f'[data-conversation-message="{t.answer}"]'
            )
            await expect(page.locator(".flash.ok")).to_have_text(
                sue.t("The report is closed. The message stays as it is.")
            )
            await sue.press(
                "Stop the seller writing on this deal",
                within="[data-conversation][data-approved-buyer]",
            )
            await expect(page.locator('[data-blocked-party="seller"]')).to_have_count(2)
            await page.locator("#conversations").scroll_into_view_if_needed()
            await sue.shot(f"{shot}-3-deal")

            await sue.goto(f"{live.base}/back-office/reports")
            await expect(page.locator("[data-empty]")).to_be_visible()
            await sue.goto(f"{live.base}/back-office/audit")
            actions = await page.locator("tr[data-action]").evaluate_all(
                "rows => rows.map(r => r.dataset.action)"
            )
            assert actions[:3] == [
                "conversation.party_blocked",
                "conversation.report_dismissed",
                "conversation.message_hidden",
            ], actions
            await sue.shot(f"{shot}-4-audit")
            assert not sue.errors, sue.errors
    finally:
        await sue.context.close()
