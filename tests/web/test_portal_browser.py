"""The developer portal in a real headless Chromium, in Swedish on a phone (390 px) and in
Norwegian Bokmål on a desktop (1280 px): the login page, the link it e-mails (read from the
outbox: the test server has no SMTP server), its button, home, a client secret's rotation shown
once, the requests page with the calls made with the new secret, the event catalog, the
members page (adding a member), the integration's audit trail, and logging out.

The real ``dealbroker serve`` runs (plus a ``dealbroker worker`` on PostgreSQL); the member is
added by ``dealbroker portal members add``. Every page state is checked with axe-core, must fit
the window, and is screenshotted (to ``docs/screenshots/portal-*.png`` with
``DEALBROKER_TEST_SCREENSHOTS=1``), as in ``tests/browser.py``.
"""

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser import WINDOWS, LiveServer, Person, serve_module
from tests.conftest import BACKENDS, SELLER
from tests.processes import cli
from tests.web.walks import emailed_link

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The running server and its database (the operator's commands and the outbox)."""
    yield from serve_module(request, tmp_path_factory, "portal")


@pytest.mark.parametrize(("device", "language", "name"), WINDOWS)
async def test_a_member_logs_in_rotates_a_secret_and_reads_the_portal(
    served: tuple[LiveServer, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    name: str,
) -> None:
    live, db_url = served
    client_id = live.credential("client id")
    email = f"{name}@members.example.com"
    added = cli(db_url, "portal", "members", "add", client_id, email, "owner")
    assert added.returncode == 0, added.stderr
    person = await Person.open(browser, shots, device, language=language)
    page = person.page
    try:
        # Not logged in: the portal sends a person to its login page.
        await page.goto(f"{live.base}/portal/requests")
        assert page.url == f"{live.base}/portal/login"
        await person.audit()
        await person.shot(f"portal-{name}-1-login")
        await person.label("Your e-mail address").fill(email)
        await person.press("E-mail me a login link")
        await expect(page.locator("[data-sent]")).to_have_count(1)
        await person.audit()
        await person.shot(f"portal-{name}-2-sent")

        # No mail server on this loopback sandbox: the login page points to its outbox, where
        # the mail's link is one to open.
        path = await emailed_link(db_url, email)
        async with page.expect_navigation():
            await page.locator("[data-outbox] a").click()
        assert page.url == f"{live.base}/sandbox/outbox"
        await expect(page.locator("h1")).to_have_text(person.t("Sandbox outbox"))
        await person.audit()
        await person.shot(f"portal-{name}-2b-outbox")
        async with page.expect_navigation():
            await page.locator(f'[data-to="{email}"] a[href="{live.base}{path}"]').click()
        assert page.url == f"{live.base}{path}"
        await person.audit()
        await person.shot(f"portal-{name}-3-link")
        await person.press("Log in")
        assert page.url == f"{live.base}/portal/"
        await expect(page.locator("[data-client-id]")).to_have_text(client_id)
        await expect(page.locator("html")).to_have_attribute("lang", language)
        await person.audit()
        await person.shot(f"portal-{name}-4-home")

        await person.goto(f"{live.base}/portal/credentials")
        await person.shot(f"portal-{name}-5-credentials")
        await person.press("New client secret")
        secret = await page.locator("[data-client-secret]").inner_text()
        assert secret.startswith("dbs_")
        await person.audit()
        await person.shot(f"portal-{name}-6-secret")

        # The integration calls the API with the new secret, and once with a wrong one.
        async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
            for attempt in (secret, "wrong"):
                await api.post(
                    "/oauth2/token",
                    data={"grant_type": "client_credentials"},
                    auth=(client_id, attempt),
                )
        rows = page.locator("tr[data-request]")
        for _ in range(50):  # the server writes its request log every second
            await person.goto(f"{live.base}/portal/requests")
            # The newest row is the wrong secret's (the other window's run made older ones).
            if await rows.count() >= 2 and await rows.first.get_attribute("data-status") == "401":
                break
            await asyncio.sleep(0.2)
        await expect(rows.first).to_have_attribute("data-status", "401")
        await person.shot(f"portal-{name}-7-requests")

        await person.goto(f"{live.base}/portal/events")
        await expect(page.locator("[data-event]")).to_have_count(9)
        await expect(page.locator('[data-event="webhook.test"] p').first).to_have_text(
            person.t("A test event, sent only to the endpoint you asked it for")
        )
        await person.shot(f"portal-{name}-8-events")

        # A deal the integration created without a name, on the sandbox page.
        async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
            token = await api.post(
                "/oauth2/token",
                data={"grant_type": "client_credentials"},
                auth=(client_id, secret),
            )
            created = await api.post(
                "/deals/v1/deals",
                json={"price": 100, "seller": SELLER},
                headers={"Authorization": f"Bearer {token.json()['access_token']}"},
            )
        deal_id = created.json()["id"]
        await person.goto(f"{live.base}/portal/sandbox")
        await expect(page.locator(f'[data-deal="{deal_id}"] a')).to_have_text(
            f"{person.t('(no name)')} {deal_id[:8]}"
        )
        await person.shot(f"portal-{name}-8b-sandbox")

        await person.goto(f"{live.base}/portal/members")
        await person.label("E-mail address", exact=True).fill(f"dev-{name}@members.example.com")
        await person.press("Add the member")
        assert page.url.endswith("/portal/members?done=member-added")
        await expect(page.locator(f'[data-member="dev-{name}@members.example.com"]')).to_have_count(
            1
        )
        await person.audit()
        await person.shot(f"portal-{name}-9-members")

        await person.goto(f"{live.base}/portal/audit")
        await expect(page.locator("tr[data-action]").first).to_have_attribute(
            "data-action", "portal.member.add"
        )
        await person.shot(f"portal-{name}-10-audit")

        await person.press("Log out", within="nav")
        assert page.url.endswith("/portal/login?done=logged-out")
        await expect(page.locator(".flash.ok")).to_have_text(person.t("You are logged out."))
        await person.shot(f"portal-{name}-11-logged-out")
        assert not person.errors, person.errors
    finally:
        await person.context.close()
