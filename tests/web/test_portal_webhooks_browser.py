"""The developer portal's webhook and sandbox pages in a real headless Chromium, in Swedish on a
phone (390 px) and in Norwegian Bokmål on a desktop (1280 px), on SQLite and PostgreSQL.

The real ``dealbroker serve`` runs beside a real ``dealbroker worker`` process (on SQLite too,
with the server's embedded worker off), which delivers to a loopback receiver. A developer of
the demo integration logs in by the e-mailed link, registers the receiver, sends a test event
that the receiver first refuses (500), and the worker's attempt then shows on the delivery's
page with the headers and body it sent (the receiver's own copy is compared); they resend it,
disable and enable the endpoint; then in the sandbox they move the clock, run a scenario and
open the deal's own clock. Every page state is checked with axe-core, must fit the window,
holds no English sentence, and is screenshotted (to ``docs/screenshots/portal-*.png`` with
``DEALBROKER_TEST_SCREENSHOTS=1``).
"""

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from dealbroker.audit.models import AuditRecord
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.integrations.models import Integration
from tests.browser import WINDOWS, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.receiver import Receiver, start_receiver
from tests.web.portal_helpers import add_member, last_link

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server
# Words of English sentences that are no Norwegian or Swedish word (tests/web/test_no_english).
ENGLISH = frozenset(
    "the is are was were has have been cannot not your you this that with and must will "
    "which what when where there their of from into than deal payment offer seller buyer "
    "please try again".split()
)
WORD = re.compile(r"[A-Za-z']+")
# The page's text but what is shown as sent or stored: codes, ids, URLs, bodies and headers,
# the deal's name (the scenario's, in English as the API creates it), the scenarios' names.
PROSE = """() => {
  const main = document.querySelector('main').cloneNode(true);
  main.querySelectorAll(
    'code, pre, select#scenario, [data-integration], nav.languages, a[href^="/portal/sandbox/deals/"]'
  ).forEach(e => e.remove());
  return main.innerText;
}"""


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    # A worker process beside the server on SQLite too, as on PostgreSQL.
    settings = {"DEALBROKER_EMBEDDED_WORKER": "off"}
    yield from serve_module(request, tmp_path_factory, "portal-webhooks", settings)


@pytest.fixture
async def database(
    served: tuple[LiveServer, str],
) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """The served database, for what an owner or the e-mail would do (a member, a link)."""
    engine = create_engine(served[1])
    yield create_sessionmaker(engine)
    await engine.dispose()


async def wait_for(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def no_english(person: Person) -> None:
    words = {w.lower() for w in WORD.findall(await person.page.evaluate(PROSE))}
    assert not words & ENGLISH, f"English on {person.page.url}: {sorted(words & ENGLISH)}"


async def state(person: Person, shot: str) -> None:
    """A page state: axe-core, no English, within the window, screenshotted."""
    await person.audit()
    await no_english(person)
    await person.shot(shot)


async def log_in(person: Person, base: str, database: Any, email: str) -> None:
    """Ask for a login link on the login page, open it from the e-mail (the outbox), press."""
    await person.goto(f"{base}/portal/login")
    await person.label("Your e-mail address").fill(email)
    await person.press("E-mail me a login link")
    path = None
    deadline = time.monotonic() + 10
    while path is None:
        assert time.monotonic() < deadline, "no login link was e-mailed"
        path = await last_link(database, email)
        await asyncio.sleep(0.1)
    await person.goto(base + path)
    await person.press("Log in")
    await person.page.wait_for_url(f"{base}/portal/")


@pytest.mark.parametrize(("device", "language", "name"), WINDOWS)
async def test_a_developer_follows_a_webhook_and_drives_the_sandbox(
    served: tuple[LiveServer, str],
    database: async_sessionmaker[AsyncSession],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    name: str,
) -> None:
    live, _db_url = served
    assert len(live.processes) == 2  # dealbroker serve and dealbroker worker
    receiver: Receiver = start_receiver()
    receiver.answer(500, body=b"<b>not yet</b>")
    client_id = live.credential("client id")
    async with database() as session:
        integration = await session.scalar(
            select(Integration).where(Integration.client_id == client_id)
        )
        assert integration is not None
    email = f"dev-{name}@market.example.com"
    await add_member(database, integration.id, email, "developer")
    person = await Person.open(browser, shots, device, language=language)
    page = person.page
    try:
        await log_in(person, live.base, database, email)

        # The webhooks: none of this run's yet; register the receiver.
        await page.get_by_role("link", name=person.t("Webhooks"), exact=True).first.click()
        await page.wait_for_url(f"{live.base}/portal/webhooks")
        await person.audit()
        await person.label("URL").fill(receiver.url + f"/{name}")
        await person.label("Description (optional)").fill(f"Receiver ({name})")
        await person.press("Register the endpoint")
        assert re.search(r"/portal/webhooks/[0-9a-f-]{36}\?done=created$", page.url), page.url
        await expect(page.locator(".flash.ok")).to_have_count(1)
        await state(person, f"portal-webhooks-{name}-1-registered")

        # A test event: the receiver answers 500, then the worker's retry gets 200.
        await person.press("Send a test event")
        await wait_for(lambda: len(receiver.requests) >= 2, "the worker did not retry", 40)
        delivery = page.locator("li[data-delivery]")
        deadline = time.monotonic() + 20
        while await delivery.first.get_attribute("data-status") != "succeeded":
            assert time.monotonic() < deadline, "the page never showed the delivery delivered"
            await asyncio.sleep(0.3)
            await page.reload()
        await state(person, f"portal-webhooks-{name}-2-endpoint")

        # The delivery: both attempts, each with the headers it sent, and the body.
        await delivery.first.get_by_role("link").click()
        await page.wait_for_url(re.compile(r".*/deliveries/[0-9a-f-]{36}$"))
        attempts = page.locator("li[data-attempt]")
        await expect(attempts).to_have_count(2)
        await expect(attempts.first).to_have_attribute("data-success", "true")
        await expect(attempts.nth(1)).to_have_attribute("data-status-code", "500")
        body = await page.locator("[data-body]").inner_text()
        assert body == receiver.requests[0].body.decode()
        for i, sent in enumerate(reversed(receiver.requests[:2])):
            headers = await attempts.nth(i).locator("[data-headers]").inner_text()
            for header in ("webhook-id", "webhook-timestamp", "webhook-signature"):
                assert f"{header}: {sent.headers[header]}" in headers
        await state(person, f"portal-webhooks-{name}-3-delivery")

        # Resend it; disable and enable the endpoint.
        await person.press("Resend the event")
        await expect(page.locator(".flash.ok")).to_have_text(
            person.t("The event is queued for this endpoint again.")
        )
        await wait_for(lambda: len(receiver.requests) >= 3, "the resent event did not arrive")
        assert (
            receiver.requests[2].headers["webhook-id"] == receiver.requests[0].headers["webhook-id"]
        )
        await person.press("Disable the endpoint")
        await expect(page.locator("[data-state]")).to_have_attribute("data-state", "disabled")
        await state(person, f"portal-webhooks-{name}-4-disabled")
        await person.press("Enable the endpoint")
        await expect(page.locator("[data-state]")).to_have_attribute("data-state", "enabled")

        # The sandbox: the clock, a scenario, the deal's own clock.
        await page.get_by_role("link", name=person.t("Sandbox"), exact=True).first.click()
        await page.wait_for_url(f"{live.base}/portal/sandbox")
        await state(person, f"portal-sandbox-{name}-1-sandbox")
        await person.label("How far ahead").first.fill("2")
        await person.press("Move the clock ahead")
        await expect(page.locator("[data-moved]")).to_have_count(1)
        await page.locator("#scenario").select_option("pickup-completed")
        await person.press("Run the scenario")
        await expect(page.locator("[data-status]")).to_have_text("Completed")
        assert await page.locator("ol[data-events] li").count() >= 5
        await state(person, f"portal-sandbox-{name}-2-scenario")
        await page.locator("dd a[href^='/portal/sandbox/deals/']").click()
        await page.wait_for_url(re.compile(r".*/portal/sandbox/deals/[0-9a-f-]{36}$"))
        await expect(page.locator("[data-deal-offset]")).to_have_attribute("data-deal-offset", "0")
        await person.press("Move this deal's clock ahead")
        await expect(page.locator("[data-deal-offset]")).to_have_attribute(
            "data-deal-offset", "86400"
        )
        await state(person, f"portal-sandbox-{name}-3-deal-clock")

        assert person.errors == []
        async with database() as session:
            actions = list(
                await session.scalars(
                    select(AuditRecord.action)
                    .where(AuditRecord.actor == f"member:{email}")
                    .order_by(AuditRecord.at)
                )
            )
        assert [a for a in actions if not a.startswith("portal.")] == [
            "webhook.create",
            "webhook.test",
            "event.resend",
            "webhook.disable",
            "webhook.enable",
            "sandbox.clock.advance",
            "sandbox.scenario.run",
            "sandbox.deal_clock.advance",
        ]
    finally:
        await person.context.close()
        receiver.close()
