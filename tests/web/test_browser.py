"""The whole happy path, Carrier and Pickup, clicked through in a real headless Chromium.

The real ``dealbroker serve`` runs on a loopback port with a fresh database (plus a
``dealbroker worker`` on PostgreSQL, where the server embeds none). The integration uses the
demo credentials from the server's banner: OAuth2 token, a webhook endpoint pointing at a
loopback receiver, a deal and an offer link by API. Buyer and seller then do everything else
in the browser, each in a browser context of their own, and the test checks what each page
shows after every step. At the end every webhook must have arrived, verify with the
Standard Webhooks library, and tell the lifecycle in order.

Every page state the tests visit, at both widths, is checked with axe-core (injected by
Playwright; ``scripts/test`` installs it from the npm registry): no serious or critical
violation. The test contexts bypass the pages' Content-Security-Policy to inject it, except
the one test that checks the policy itself.

Each page is screenshotted along the way. The PNGs go to a temporary directory, or to
``docs/screenshots/`` when ``DEALBROKER_TEST_SCREENSHOTS=1`` (so test runs do not rewrite
tracked files; the pages carry fresh ids and times on every run).

CI installs Debian's Chromium (``apt-get install chromium``) and the ``playwright`` package;
browsers are never downloaded. Without either, these tests fail and say what is missing.
"""

import asyncio
import http.server
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from dealbroker.core import i18n, money
from dealbroker.web.render import DONE, LABELS
from tests.conftest import BACKENDS, SELLER, database_url
from tests.receiver import Received, Receiver, start_receiver

try:
    from playwright.async_api import (
        Browser,
        BrowserContext,
        ConsoleMessage,
        Page,
        async_playwright,
        expect,
    )
except ImportError as exc:  # CI installs it; say so loudly instead of skipping.
    PLAYWRIGHT_MISSING: str | None = f"{exc}: pip install the 'test' extra (playwright)"
else:
    PLAYWRIGHT_MISSING = None

pytestmark = pytest.mark.server

CHROMIUM = "/usr/bin/chromium"  # Debian's package; `playwright install` is never used.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # No network here: nothing may phone home and stall the browser.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 800}}
# A phone-sized window. Not ``is_mobile``: Chromium's mobile emulation widens the layout
# viewport to the overflowing offers table (see test_offers_fit_a_phone_screen), and
# Playwright's taps then land beside the Approve button.
PHONE: dict[str, Any] = {"viewport": {"width": 390, "height": 844}, "has_touch": True}
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "docs" / "screenshots"
AXE = ROOT / ".cache" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ("serious", "critical")
FLOW_SECONDS = 60
ASKING, OFFERED = 1000, 950
SELLER_NAME, BUYER_NAME, BUYER_EMAIL = "Kari Nordmann", "Ola Nordmann", "ola@example.com"
IBAN = "NO93 8601 1117 947"
DEAL_STATUSES = {
    "Carrier": [
        "Draft",
        "Ad",
        "Signed",
        "Shipping_Pending",
        "Shipping_In_Progress",
        "Shipping_Arrived",
        "Completed",
    ],
    "Pickup": ["Draft", "Ad", "Signed", "Pickup_Pending", "Completed"],
}
PAYMENT_STATUSES = ["Created", "Processing", "Paid", "PendingPayOut", "PaidOut"]
SIGNATURE_STATUSES = ["Initiated", "Completed"]


# --- the server -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(db_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEALBROKER_")}
    env.update({"DEALBROKER_DATABASE_URL": db_url, "DEALBROKER_LOG_LEVEL": "warning", **extra})
    return env


@dataclass
class LiveServer:
    """``dealbroker serve`` (and on PostgreSQL a ``dealbroker worker``), output to a log file."""

    base: str
    log: Path
    processes: list[subprocess.Popen[bytes]]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def credential(self, label: str) -> str:
        for line in self.output().splitlines():
            if line.strip().startswith(label + ":"):
                return line.split(":", 1)[1].strip()
        raise AssertionError(f"no {label!r} in the server's banner:\n{self.output()}")

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def serve_module(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    label: str,
    settings: dict[str, str] | None = None,
) -> Iterator[tuple[LiveServer, str]]:
    """A module fixture's body: the server on ``request.param``'s backend, and its database's
    URL (for the operator's commands), stopped after the module. ``settings``: more
    ``DEALBROKER_`` variables for its processes."""
    workdir = tmp_path_factory.mktemp(f"{label}-{request.param}")
    if request.param == "sqlite":
        db_url = f"sqlite+aiosqlite:///{workdir / f'{label}.db'}"
    else:
        db_url = database_url(request.param, workdir, label.replace("-", "_"))
    server = start_server(db_url, workdir, settings)
    try:
        yield server, db_url
    finally:
        server.stop()


def start_server(db_url: str, workdir: Path, settings: dict[str, str] | None = None) -> LiveServer:
    """``dealbroker serve``, and a ``dealbroker worker`` where the server embeds none
    (PostgreSQL, or ``DEALBROKER_EMBEDDED_WORKER=off`` in ``settings``)."""
    port = _free_port()
    log = workdir / "server.log"
    env = {**_env(db_url), **(settings or {})}
    with log.open("ab") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "dealbroker", "serve", "--port", str(port)],
            env=env,
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    live = LiveServer(f"http://127.0.0.1:{port}", log, [server])
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{live.base}/ping", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            live.stop()
            raise AssertionError(f"the server did not start:\n{live.output()}")
        time.sleep(0.1)
    embedded = env.get("DEALBROKER_EMBEDDED_WORKER", "auto")
    if embedded == "off" or (embedded == "auto" and not db_url.startswith("sqlite")):
        with log.open("ab") as out:
            live.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "dealbroker", "worker"],
                    env=env,
                    cwd=workdir,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    return live


@pytest.fixture(scope="module", params=BACKENDS)
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    workdir = tmp_path_factory.mktemp(f"browser-{request.param}")
    if request.param == "sqlite":
        db_url = f"sqlite+aiosqlite:///{workdir / 'browser.db'}"
    else:
        db_url = database_url(request.param, workdir, "browser")  # empty: serve makes the demo
    server = start_server(db_url, workdir)
    try:
        yield server
    finally:
        server.stop()


# --- the browser ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator["Browser"]:
    if PLAYWRIGHT_MISSING is not None:
        pytest.fail(f"The browser tests need Playwright: {PLAYWRIGHT_MISSING}", pytrace=False)
    if not Path(CHROMIUM).is_file():
        pytest.fail(
            f"The browser tests need Chromium at {CHROMIUM}: apt-get install chromium",
            pytrace=False,
        )
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            yield launched
        finally:
            await launched.close()


def axe_failures(url: str, violations: list[dict[str, Any]]) -> str:
    """Each violation's rule, impact, help and the elements it names, one per line."""
    lines = [f"axe found serious or critical violations on {url}:"]
    for v in violations:
        targets = ", ".join(" ".join(map(str, node["target"])) for node in v["nodes"])
        lines.append(f"  {v['id']} ({v['impact']}): {v['help']} -> {targets}")
    return "\n".join(lines)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    if os.environ.get("DEALBROKER_TEST_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path


# Time to first byte of each page state the flows visit (ms), reported when the module ends.
TTFB: dict[str, list[float]] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_time_to_first_byte() -> Iterator[None]:
    yield
    if TTFB:
        lines = [
            f"{statistics.median(v):7.1f} ms  {k} (n={len(v)})" for k, v in sorted(TTFB.items())
        ]
        everything = statistics.median([ms for v in TTFB.values() for ms in v])
        report = "\n".join(["median time to first byte per page state:", *lines])
        sys.__stderr__.write(f"\n{report}\nall page loads: {everything:.1f} ms\n")


class Person:
    """One person's browser context and tab, with every console or page error it saw."""

    def __init__(
        self,
        context: "BrowserContext",
        page: "Page",
        shots: Path,
        audits: bool = True,
        language: str = "en",
    ) -> None:
        self.context, self.page, self.shots = context, page, shots
        self.language = language  # the words the person reads, and how amounts are written
        self.audits = audits  # axe-core can only be injected where the CSP is bypassed
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _console(self, message: "ConsoleMessage") -> None:
        # The pages have no favicon; Chromium asks for one and logs the 404 (reported, harmless).
        if message.type == "error" and not message.location["url"].endswith("/favicon.ico"):
            self.errors.append(f"{message.text} at {message.location['url']}")

    @classmethod
    async def open(
        cls,
        browser: "Browser",
        shots: Path,
        device: dict[str, Any],
        bypass_csp: bool = True,
        language: str = "en",
    ) -> "Person":
        """A fresh context whose browser asks for pages in ``language`` (``nb``, ``sv`` or
        ``en``); it bypasses the pages' CSP (to inject axe-core) unless told not to."""
        if bypass_csp and not AXE.is_file():
            pytest.fail(
                f"The browser tests need axe-core at {AXE}: run scripts/test", pytrace=False
            )
        context = await browser.new_context(
            device_scale_factor=1,
            locale={"nb": "nb-NO", "sv": "sv-SE", "en": "en-GB"}[language],
            bypass_csp=bypass_csp,
            **device,
        )
        context.set_default_timeout(10_000)
        if bypass_csp:
            # axe-core is in every document of the context from its start: sent to the browser
            # once, where injecting it at each audit sent its 0.5 MB again (0.14 s a page).
            await context.add_init_script(path=AXE)
        return cls(context, await context.new_page(), shots, bypass_csp, language)

    def t(self, text: str, **values: object) -> str:
        """``text`` (the code's English) as this person reads it on the page, tags left out."""
        with i18n.using(self.language):
            said = i18n.gettext(text) % values if values else i18n.gettext(text)
        return re.sub(r"<[^>]+>", "", said)

    def amount(self, major: float) -> str:
        """An amount of NOK as this person's pages write it."""
        return money.to_text(round(major * 100), "NOK", self.language)

    def label(self, text: str, exact: bool = False, **values: object) -> Any:
        """The form field labelled ``text`` (the code's English), as this person reads it."""
        return self.page.get_by_label(self.t(text, **values), exact=exact)

    async def goto(self, url: str) -> None:
        response = await self.page.goto(url)
        assert response is not None
        assert response.status == 200, f"{url}: {response.status}"
        await self.audit()

    async def press(self, button: str, within: str = "main") -> None:
        """Click a form's submit button; the form posts, and the answer must not be a refusal."""
        async with self.page.expect_navigation() as navigation:
            await (
                self.page.locator(within)
                .get_by_role("button", name=self.t(button), exact=True)
                .click()
            )
        response = await navigation.value
        assert response is not None
        if response.status != 200:
            alert = await self.page.locator("[role=alert]").all_inner_texts()
            raise AssertionError(f"{button!r} answered {response.status}: {alert}")
        await self.audit()

    async def sees(self, status: str, done: str | None = None, payment: str | None = None) -> None:
        """The page shows deal ``status``, the flash message ``done`` and no error."""
        page = self.page
        await self._time_to_first_byte(f"{status}{f' ({done})' if done else ''}")
        await expect(page.locator("[data-status]")).to_have_attribute("data-status", status)
        await expect(page.locator("[role=alert]")).to_have_count(0)
        if done is None:
            await expect(page.locator(".flash.ok")).to_have_count(0)
        else:
            await expect(page.locator(".flash.ok")).to_have_text(self.t(DONE[done]))
        if payment is not None:
            raw = "" if payment == "Not paid yet" else payment  # the page's words for no payment
            await expect(page.locator("[data-payment-status]")).to_have_attribute(
                "data-payment-status", raw
            )

    async def reload_until_payment(self, status: str, timeout: float = 10.0) -> None:
        """Reload the page (as a person would) until it shows payment ``status``."""
        deadline = time.monotonic() + timeout
        marker = self.page.locator("[data-payment-status]")
        while await marker.get_attribute("data-payment-status") != status:
            assert time.monotonic() < deadline, f"the payment never became {status}"
            await asyncio.sleep(0.2)
            await self.page.reload()

    async def _time_to_first_byte(self, state: str) -> None:
        """Record how long the server took to start answering this page (Navigation Timing)."""
        ms = await self.page.evaluate(
            "(() => { const n = performance.getEntriesByType('navigation')[0];"
            " return n ? n.responseStart - n.requestStart : null; })()"
        )
        if ms is not None:
            TTFB.setdefault(state, []).append(ms)

    async def audit(self) -> None:
        """Run axe-core on the page as it stands: no serious or critical violation."""
        if not self.audits:
            return
        if not await self.page.evaluate("typeof window.axe !== 'undefined'"):
            await self.page.add_script_tag(path=AXE)
        results = await self.page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
        blocking = [v for v in results["violations"] if v["impact"] in BLOCKING_IMPACTS]
        assert not blocking, axe_failures(self.page.url, blocking)

    async def overflow(self) -> int:
        """How many pixels the page is wider than the window (it then scrolls sideways)."""
        return await self.page.evaluate("document.documentElement.scrollWidth - innerWidth")

    async def shot(self, name: str, overflows: bool = False) -> None:
        """Screenshot the whole page, which must fit the window's width."""
        await self.page.screenshot(path=self.shots / f"{name}.png", full_page=True)
        if not overflows:
            assert await self.overflow() == 0, f"{name} is wider than the window"

    async def sign(self, full_name: str) -> None:
        await self.label("Your full name").fill(full_name)
        await self.page.locator("input[name=consent]").check()
        await self.press("Sign the deal")


# --- the integration's side -----------------------------------------------------------------


@dataclass
class Integration:
    api: httpx.AsyncClient
    webhook_secret: str


@pytest.fixture
async def integration(live: LiveServer) -> AsyncIterator[Integration]:
    async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
        token = await api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(live.credential("client id"), live.credential("client secret")),
        )
        assert token.status_code == 200, token.text
        assert token.json()["token_type"] == "Bearer"
        api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        yield Integration(api, live.credential("webhook secret"))


@pytest.fixture
async def receiver(integration: Integration) -> AsyncIterator[Receiver]:
    """A loopback receiver, registered as a webhook endpoint for every kind of event."""
    hooks = start_receiver()
    api = integration.api
    endpoint = await api.post(
        "/integrations/v1/webhook-endpoints", json={"url": hooks.url, "description": "browser"}
    )
    assert endpoint.status_code == 201, endpoint.text
    try:
        yield hooks
    finally:
        await api.delete(f"/integrations/v1/webhook-endpoints/{endpoint.json()['id']}")
        hooks.close()


def verified(requests: list[Received], secret: str, deal_id: str) -> list[dict[str, Any]]:
    """The deal's events, each signature verified, each event once (delivery is at least once)."""
    events: dict[str, dict[str, Any]] = {}
    for request in list(requests):
        event = Webhook(secret).verify(request.body, request.headers)
        assert event["id"] == request.headers["webhook-id"]
        assert event["api_version"] == "v1"
        if event["data"].get("dealId") == deal_id:
            assert events.setdefault(event["id"], event) == event  # a redelivery is identical
    return list(events.values())


def key(event: dict[str, Any]) -> tuple[str, str]:
    data = event["data"]
    if event["event"] == "signature.status":
        return event["event"], f"{data['signatureType']}:{data['status']}"
    return event["event"], data["status"] if "status" in data else data["id"]


def in_order(events: list[dict[str, Any]], kind: str, order: list[str], field: str) -> list:
    """Events of ``kind``, by ``created`` and then (within one millisecond) by ``order``."""
    chosen = [e for e in events if e["event"] == kind]
    chosen.sort(key=lambda e: (e["created"], order.index(e["data"][field])))
    return chosen


async def all_events(
    hooks: Receiver, secret: str, deal_id: str, expected: set[tuple[str, str]]
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while True:
        events = verified(hooks.requests, secret, deal_id)
        missing = expected - {key(e) for e in events}
        if not missing:
            return events
        assert time.monotonic() < deadline, f"webhooks not delivered: {sorted(missing)}"
        await asyncio.sleep(0.1)


# --- the flows ------------------------------------------------------------------------------


# The Carrier flow at desktop width by Norwegian readers, the Pickup flow on a phone by Swedish
# ones: every word, amount and date on the way in their language.
@pytest.mark.parametrize(("shipping", "language"), [("Carrier", "nb"), ("Pickup", "sv")])
async def test_whole_deal_in_a_browser(
    browser: "Browser",
    integration: Integration,
    receiver: Receiver,
    live: LiveServer,
    shots: Path,
    shipping: str,
    language: str,
) -> None:
    device = DESKTOP if shipping == "Carrier" else PHONE
    buyer = await Person.open(browser, shots, device, language=language)
    seller = await Person.open(browser, shots, device, language=language)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            deal_id, offer_id = await _flow(integration, buyer, seller, shipping)
            await _check_webhooks(integration, receiver, deal_id, offer_id, shipping)
        assert buyer.errors == []
        assert seller.errors == []
    except BaseException:
        sys.stderr.write(f"--- server output ---\n{live.output()}\n")
        raise
    finally:
        await buyer.context.close()
        await seller.context.close()


async def _flow(
    integration: Integration, buyer: Person, seller: Person, shipping: str
) -> tuple[str, str]:
    api = integration.api
    created = await api.post(
        "/deals/v1/deals",
        json={
            "name": "Road bike",
            "description": "Steel frame, 56 cm, new tyres.",
            "price": ASKING,
            # A seller of their own per flow: a payout account registered in one flow would
            # otherwise pay the other flow's deal out at once.
            "seller": {**SELLER, "email": f"kari.{shipping.lower()}@example.com"},
        },
    )
    assert created.status_code == 201, created.text
    deal = created.json()
    link = await api.post(f"/deals/v1/deals/{deal['id']}/offer", json={"price": OFFERED})
    assert link.status_code == 201, link.text
    offer_url = link.json()["url"]
    carrier = shipping == "Carrier"

    async def shot(person: Person, name: str, phone: bool = False, overflows: bool = False) -> None:
        """Every page of the Carrier flow (desktop); the marked ones of Pickup (phone)."""
        if carrier:
            await person.shot(name)
        elif phone:
            await person.shot(f"phone-{name}", overflows)

    # The buyer opens the link and sends an offer at the prefilled price.
    await buyer.goto(offer_url)
    await buyer.sees("Draft")
    await expect(buyer.page.locator("html")).to_have_attribute("lang", buyer.language)
    await expect(buyer.label("Your price (%(currency)s)", currency="NOK")).to_have_value(
        money.to_input(OFFERED * 100, buyer.language)
    )
    await shot(buyer, "01-buyer-offer", phone=True)
    await buyer.label("Send it with a carrier" if carrier else "I pick it up").check()
    await buyer.label("Your name").fill(BUYER_NAME)
    await buyer.label("Your email").fill(BUYER_EMAIL)
    await buyer.press("Send offer")
    # The amount as it was understood, before anything is sent.
    await expect(buyer.page.locator("[data-confirm]")).to_contain_text(
        buyer.t(
            "You offer %(amount)s, %(delivery)s. Send the offer?",
            amount=buyer.amount(OFFERED),
            delivery=buyer.t("sent with a carrier" if carrier else "with pickup"),
        )
    )
    await shot(buyer, "01b-buyer-confirm-offer", phone=True)
    await buyer.press("Yes, send the offer")
    await buyer.sees("Draft", done="offer")
    mine = buyer.page.locator("[data-offer-status]")
    await expect(mine).to_have_attribute("data-offer-status", "Pending")
    await expect(mine).to_contain_text(
        f"{buyer.amount(OFFERED)}, {buyer.t(LABELS[shipping]).lower()}"
    )
    await expect(mine).to_contain_text(buyer.t("waiting for the seller's answer."))
    await expect(buyer.page.get_by_role("button", name=buyer.t("Send offer"))).to_have_count(0)
    await shot(buyer, "02-buyer-waiting")

    # The seller opens the deal, signs it (Draft -> Ad), and approves the offer.
    await seller.goto(deal["url"])
    await seller.sees("Draft", payment="Not paid yet")
    row = seller.page.locator("[data-offer]")
    await expect(row).to_have_count(1)
    offer_id = await row.get_attribute("data-offer")
    assert offer_id is not None
    await expect(row).to_contain_text(BUYER_NAME)
    await shot(seller, "03-seller-draft-sign")
    await seller.sign(SELLER_NAME)
    await seller.sees("Ad", done="signed")
    await expect(
        seller.page.get_by_role("heading", name=seller.t("Sign and publish"))
    ).to_have_count(0)
    await expect(row).to_have_attribute("data-offer-status", "Pending")
    await expect(row).to_contain_text(seller.t(LABELS["Pending"]))
    # On a phone the offers table is wider than the screen: test_offers_fit_a_phone_screen.
    await shot(seller, "04-seller-offer-pending", phone=True, overflows=True)
    await seller.press("Approve", within="[data-offer]")
    await expect(seller.page.get_by_role("heading", name=seller.t("Are you sure?"))).to_be_visible()
    await shot(seller, "04b-seller-confirm-approval", phone=True)
    await seller.press("Yes, approve the offer")
    await seller.sees("Ad", done="approved")
    await expect(row).to_have_attribute("data-offer-status", "Approved")
    await expect(row).to_contain_text(seller.t(LABELS["Approved"]))
    await expect(row.get_by_role("button")).to_have_count(0)
    delivery = seller.page.locator("[data-shipping]")
    await expect(delivery).to_have_attribute("data-shipping", shipping)
    await expect(delivery).to_have_text(seller.t(LABELS[shipping]))

    # The buyer sees the approval, signs (Ad -> Signed) and pays on the test payment page.
    await buyer.goto(offer_url)
    await buyer.sees("Ad")
    await expect(mine).to_have_attribute("data-offer-status", "Approved")
    await buyer.label("Your phone").fill("+47 400 00 001")
    if carrier:
        await buyer.label("Delivery address").fill("Kongens gate 2")
        await buyer.label("Postcode").fill("7011")
        await buyer.label("Town").fill("Trondheim")
    await shot(buyer, "05-buyer-sign")
    await buyer.sign(BUYER_NAME)
    await buyer.sees("Signed", done="signed")
    await expect(buyer.page.locator("main")).to_contain_text(
        buyer.t(
            "Pay %(price)s. The money is held safely until you approve the item.",
            price=buyer.amount(OFFERED),
        )
    )
    await shot(buyer, "06-buyer-pay")
    await buyer.press("Pay now")
    assert "/pay/" in buyer.page.url
    await expect(buyer.page.get_by_role("heading", name=buyer.t("Test payment"))).to_be_visible()
    await expect(buyer.page.locator("main")).to_contain_text(
        f"{buyer.t('Amount')}{buyer.amount(OFFERED)}"
    )
    await shot(buyer, "07-test-payment", phone=True)
    await buyer.press("Pay (succeeds)")
    assert buyer.page.url.startswith(offer_url)
    pending = "Shipping_Pending" if carrier else "Pickup_Pending"
    await buyer.sees(pending, done="paid")

    await seller.goto(deal["url"])
    await seller.sees(pending, payment="Paid")
    if carrier:
        # The seller ships; the buyer confirms the arrival (Shipping_In_Progress -> Arrived).
        await expect(
            seller.page.get_by_role("heading", name=seller.t("Ship the item"))
        ).to_be_visible()
        await expect(seller.page.locator("[data-ship-to]")).to_contain_text("7011 Trondheim")
        await seller.label("Carrier", exact=True).fill("Posten")
        await seller.label("Tracking number").fill("370712345678")
        await shot(seller, "08-seller-ship")
        await seller.press("I handed it to the carrier")
        await seller.sees("Shipping_In_Progress", done="handed", payment="Paid")
        await expect(
            seller.page.get_by_role("heading", name=seller.t("Sandbox carrier"))
        ).to_be_visible()
        await shot(seller, "09-seller-sandbox-carrier")
        await buyer.goto(offer_url)
        await buyer.sees("Shipping_In_Progress")
        await expect(buyer.page.get_by_role("heading", name=buyer.t("On its way"))).to_be_visible()
        await expect(buyer.page.locator("[data-tracking]")).to_contain_text("370712345678")
        await shot(buyer, "10-buyer-on-its-way")
        await buyer.press("The item has arrived")
        await buyer.sees("Shipping_Arrived", done="arrived")
        await expect(
            buyer.page.get_by_role("heading", name=buyer.t("Check the item"))
        ).to_be_visible()
        await shot(buyer, "11-buyer-approve")
    else:
        await expect(
            seller.page.get_by_role("heading", name=seller.t("Pickup"), exact=True)
        ).to_be_visible()
        await shot(seller, "08-seller-pickup", phone=True)
        await buyer.goto(offer_url)
        await buyer.sees(pending)
        await expect(
            buyer.page.get_by_role("heading", name=buyer.t("At the handover"))
        ).to_be_visible()
        await expect(buyer.page.locator("[data-handover-code]")).to_have_text(
            re.compile(r"^\d{6}$")
        )
        await expect(buyer.page.locator("[data-seller-contact]")).to_be_visible()
        await shot(buyer, "11-buyer-handover", phone=True)

    # The buyer approves the item: the deal is complete, the money waits for a payout account.
    await buyer.press("Approve the item")
    await buyer.press("Yes, the item is as agreed")
    await buyer.sees("Completed", done="item-approved")
    await expect(buyer.page.get_by_role("heading", name=buyer.t("Done"))).to_be_visible()

    await seller.goto(deal["url"])
    await seller.sees("Completed", payment="PendingPayOut")
    await seller.label("Account holder").fill(SELLER_NAME)
    await seller.label("IBAN or account number").fill(IBAN)
    await seller.press("Save payout account")
    await seller.sees("Completed", done="account")
    # The worker makes the payout after the account is saved; the seller looks again.
    await seller.reload_until_payment("PaidOut")
    await seller.sees("Completed", done="account", payment="PaidOut")
    on_page = seller.page.locator("main")
    await expect(on_page).to_contain_text(
        seller.t(
            "Paid to %(holder)s, %(kind)s ending %(last4)s.",
            holder=SELLER_NAME,
            kind=seller.t("IBAN"),
            last4="7947",
        )
    )
    await expect(on_page).to_contain_text(f"{seller.t('Amount')}{seller.amount(OFFERED)}")
    # 5 % of the agreed price, and the rest to the seller.
    await expect(on_page).to_contain_text(f"{seller.t('Our fee')}{seller.amount(47.5)}")
    await expect(on_page).to_contain_text(f"{seller.t('Your payout')}{seller.amount(902.5)}")
    history = await seller.page.locator("ol.history li").all_inner_texts()
    shown = [h.split(": ", 1)[1].split(" (")[0] for h in history]
    assert len(shown) == len(DEAL_STATUSES[shipping])
    assert shown[-1] == seller.t(LABELS["Completed"])
    await expect(on_page).to_contain_text(
        seller.t(
            "<strong>%(amount)s paid out</strong> (within 5 bank days).",
            amount=seller.amount(902.5),
        )
    )
    await shot(seller, "12-seller-paid-out", phone=True)
    return deal["id"], offer_id


async def _check_webhooks(
    integration: Integration, hooks: Receiver, deal_id: str, offer_id: str, shipping: str
) -> None:
    statuses = DEAL_STATUSES[shipping]
    expected = {
        ("deal.offer", offer_id),
        ("deal.offerApproved", offer_id),
        *(("deal.status", s) for s in statuses),
        *(("payment.status", s) for s in PAYMENT_STATUSES),
        *(
            ("signature.status", f"{who}:{s}")
            for who in ("Seller", "Buyer")
            for s in SIGNATURE_STATUSES
        ),
    }
    events = await all_events(hooks, integration.webhook_secret, deal_id, expected)
    assert {key(e) for e in events} == expected  # nothing more: no denial, no refund, ...

    deal_status = in_order(events, "deal.status", statuses, "status")
    assert [e["data"]["status"] for e in deal_status] == statuses
    dates = [e["data"]["statusDate"] for e in deal_status]
    assert dates == sorted(dates)

    payment = in_order(events, "payment.status", PAYMENT_STATUSES, "status")
    assert [e["data"]["status"] for e in payment] == PAYMENT_STATUSES
    last = payment[-1]["data"]
    assert (last["amount"], last["fee"], last["currency"]) == (f"{OFFERED}.00", "47.50", "NOK")
    users = {"Seller": last["sellerUserId"], "Buyer": last["buyerUserId"]}
    assert None not in users.values()

    signatures = in_order(events, "signature.status", SIGNATURE_STATUSES, "status")
    for who, user_id in users.items():
        mine = [e["data"] for e in signatures if e["data"]["signatureType"] == who]
        assert [s["status"] for s in mine] == SIGNATURE_STATUSES
        assert {s["userId"] for s in mine} == {user_id}

    (offer,) = (e["data"] for e in events if e["event"] == "deal.offer")
    assert (offer["shippingType"], offer["price"]) == (shipping, OFFERED)
    assert (offer["buyerName"], offer["buyerEmail"]) == (BUYER_NAME, BUYER_EMAIL)


async def test_offers_fit_a_phone_screen(
    browser: "Browser", integration: Integration, shots: Path
) -> None:
    api = integration.api
    created = await api.post(
        "/deals/v1/deals",
        json={
            "name": "Lamp",
            "price": 250,
            "seller": {**SELLER, "email": "kari.phone@example.com"},
        },
    )
    assert created.status_code == 201, created.text
    link = await api.post(f"/deals/v1/deals/{created.json()['id']}/offer", json={"price": 200})
    assert link.status_code == 201, link.text
    person = await Person.open(browser, shots, PHONE)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            await person.goto(link.json()["url"])
            await person.page.get_by_label("Your name").fill(BUYER_NAME)
            await person.page.get_by_label("Your email").fill(BUYER_EMAIL)
            await person.press("Send offer")
            await person.press("Yes, send the offer")
            await person.sees("Draft", done="offer")
            await person.goto(created.json()["url"])
            approve = person.page.get_by_role("button", name="Approve", exact=True)
            box = await approve.bounding_box()
            assert box is not None
            assert box["x"] + box["width"] <= PHONE["viewport"]["width"]
            assert await person.overflow() == 0
    finally:
        await person.context.close()


async def test_pages_cannot_be_framed_and_run_no_script(
    live: LiveServer, browser: "Browser", integration: Integration, shots: Path
) -> None:
    """Another site framing a page (to trick a click on a one-click action) gets an empty frame."""
    created = await integration.api.post(
        "/deals/v1/deals", json={"name": "Lamp", "price": 10, "seller": SELLER}
    )
    url = created.json()["url"]
    person = await Person.open(browser, shots, DESKTOP, bypass_csp=False)
    try:
        await person.goto(url)
        await expect(person.page.get_by_role("heading", name="Lamp")).to_be_visible()
        assert person.errors == []  # the stylesheet loads under the policy, nothing is refused
        await person.page.set_content(f'<iframe src="{url}" width="600" height="400"></iframe>')
        frame = person.page.frames[-1]
        await person.page.wait_for_timeout(500)
        shown = await frame.evaluate("document.body ? document.body.innerText : ''")
        assert "Lamp" not in shown  # Chromium shows its own "content is blocked" notice
        assert await frame.locator("form").count() == 0
        assert any("frame" in error.lower() for error in person.errors)
    finally:
        await person.context.close()


class _MarketplacePage(http.server.BaseHTTPRequestHandler):
    """The integration's own page that a redirect URL points at."""

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        body = b"<!doctype html><title>Marketplace</title><h1>Back at the marketplace</h1>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


async def test_forms_end_on_the_integrations_redirect_urls_under_the_pages_policy(
    browser: "Browser", integration: Integration, shots: Path
) -> None:
    """With the pages' Content-Security-Policy enforced (its form-action names only our origin
    and this deal's redirect URLs' origins), the buyer's offer and the seller's approval still
    end on the marketplace's pages."""
    market = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MarketplacePage)
    threading.Thread(target=market.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{market.server_address[1]}"
    api = integration.api
    created = await api.post(
        "/deals/v1/deals", json={"name": "Lamp", "price": 250, "seller": SELLER}
    )
    assert created.status_code == 201, created.text
    link = await api.post(
        f"/deals/v1/deals/{created.json()['id']}/offer",
        json={"buyerRedirectUrl": f"{base}/sent", "sellerRedirectUrl": f"{base}/approved"},
    )
    assert link.status_code == 201, link.text
    person = await Person.open(browser, shots, DESKTOP, bypass_csp=False)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            page = person.page
            await page.goto(link.json()["url"])
            await page.get_by_label("Your name").fill(BUYER_NAME)
            await page.get_by_label("Your email").fill(BUYER_EMAIL)
            await page.get_by_role("button", name="Send offer", exact=True).click()
            await page.get_by_role("button", name="Yes, send the offer", exact=True).click()
            await page.wait_for_url(f"{base}/sent")
            await expect(page.get_by_role("heading")).to_have_text("Back at the marketplace")
            await page.goto(created.json()["url"])
            await page.get_by_role("button", name="Approve", exact=True).click()
            await page.get_by_role("button", name="Yes, approve the offer", exact=True).click()
            await page.wait_for_url(f"{base}/approved")
            assert not [e for e in person.errors if "Content Security Policy" in e]
    finally:
        await person.context.close()
        market.shutdown()
        market.server_close()


async def test_a_refused_phone_is_shown_next_to_it_and_the_address_is_kept(
    browser: "Browser", integration: Integration, shots: Path
) -> None:
    """The buyer's sign form refused for its phone alone: the reason is next to the phone field,
    which is marked invalid and has the focus, and the address typed is still there."""
    api = integration.api
    created = await api.post(
        "/deals/v1/deals",
        json={"name": "Lamp", "price": 250, "seller": {**SELLER, "email": "kari.form@example.com"}},
    )
    assert created.status_code == 201, created.text
    deal = created.json()
    link = await api.post(f"/deals/v1/deals/{deal['id']}/offer", json={"price": 200})
    assert link.status_code == 201, link.text
    buyer = await Person.open(browser, shots, DESKTOP)
    seller = await Person.open(browser, shots, DESKTOP)
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            await buyer.goto(link.json()["url"])
            await buyer.page.get_by_label("Your email").fill(BUYER_EMAIL)
            await buyer.press("Send offer")
            await buyer.press("Yes, send the offer")
            await seller.goto(deal["url"])
            await seller.sign(SELLER_NAME)
            await seller.press("Approve", within="[data-offer]")
            await seller.press("Yes, approve the offer")
            await buyer.goto(link.json()["url"])

            page = buyer.page
            # Blanks pass the browser's own check of a required field, not ours.
            await page.get_by_label("Your phone").fill("   ")
            await page.get_by_label("Delivery address").fill("Kongens gate 2")
            await page.get_by_label("Postcode").fill("7011")
            await page.get_by_label("Town").fill("Trondheim")
            await page.get_by_label("Your full name").fill(BUYER_NAME)
            await page.locator("input[name=consent]").check()
            async with page.expect_navigation() as navigation:
                await page.get_by_role("button", name="Sign the deal").click()
            response = await navigation.value
            assert response is not None
            assert response.status == 400
            await buyer.audit()
            phone = page.get_by_label("Your phone")
            await expect(phone).to_have_attribute("aria-invalid", "true")
            await expect(phone).to_have_accessible_description(
                "Give a phone number, so the seller can reach you for the handover."
            )
            await expect(phone).to_be_focused()
            await expect(page.locator(".flash.error")).to_have_count(0)
            await expect(page.get_by_label("Delivery address")).to_have_value("Kongens gate 2")
            await expect(page.get_by_label("Postcode")).to_have_value("7011")
            await expect(page.get_by_label("Town")).to_have_value("Trondheim")
            await expect(page.get_by_label("Your full name")).to_have_value(BUYER_NAME)
            await expect(page.locator("input[name=consent]")).to_be_checked()
            await buyer.shot("05b-buyer-sign-refused")

            await phone.fill("+47 400 00 001")
            await buyer.press("Sign the deal")
            await buyer.sees("Signed", done="signed")
        # Chromium logs the refusal's 400 as a failed load; nothing else went wrong.
        (refusal,) = buyer.errors
        assert "status of 400" in refusal
        assert "/-/sign" in refusal
        assert seller.errors == []
    finally:
        await buyer.context.close()
        await seller.context.close()
