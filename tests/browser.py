"""The browser walks' shared setup: the real ``dealbroker serve`` on a loopback port, Debian's
Chromium driven by Playwright, and a person's browser context and tab at a phone's (390 px) or a
desktop's (1280 px) width, reading the pages in their language. The fixtures that hand these to
the tests are in ``tests/conftest.py`` (``browser``, ``shots``) and ``tests/web/conftest.py``
(``live``, ``integration``, ``receiver``).

Every page state a walk visits is checked with axe-core (injected by Playwright;
``scripts/test`` installs it from the npm registry): no serious or critical violation. The
contexts bypass the pages' Content-Security-Policy to inject it, unless a test checks the
policy itself.

The screenshots go to a temporary directory, or to ``docs/screenshots/`` with
``DEALBROKER_TEST_SCREENSHOTS=1`` (``screenshots``: so test runs do not rewrite tracked files;
the pages carry fresh ids and times on every run).

CI installs Debian's Chromium (``apt-get install chromium``) and the ``playwright`` package;
browsers are never downloaded. Without either, the browser tests fail and say what is missing.
"""

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dealbroker.core import i18n, money
from dealbroker.web.render import DONE
from tests.conftest import database_url
from tests.processes import free_port

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


# The two windows most walks are taken in, each in its own language: (device, language, name).
WINDOWS = [(PHONE, "sv", "phone"), (DESKTOP, "nb", "desktop")]
ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "docs" / "screenshots"
AXE = ROOT / ".cache" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ("serious", "critical")
FLOW_SECONDS = 60
SELLER_NAME = "Kari Nordmann"
BUYER_NAME = "Ola Nordmann"
BUYER_EMAIL = "ola@example.com"


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
    port = free_port()
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


def axe_failures(url: str, violations: list[dict[str, Any]]) -> str:
    """Each violation's rule, impact, help and the elements it names, one per line."""
    lines = [f"axe found serious or critical violations on {url}:"]
    for v in violations:
        targets = ", ".join(" ".join(map(str, node["target"])) for node in v["nodes"])
        lines.append(f"  {v['id']} ({v['impact']}): {v['help']} -> {targets}")
    return "\n".join(lines)


# Time to first byte of each page state the flows visit (ms), reported when the module ends.
TTFB: dict[str, list[float]] = {}


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


@dataclass
class Integration:
    api: httpx.AsyncClient
    webhook_secret: str


async def launch() -> AsyncIterator["Browser"]:
    """Debian's Chromium, headless, for as long as the caller iterates; a test fails (it is not
    skipped) where Playwright or Chromium is missing."""
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


def screenshots(tmp_path: Path, keep: bool = True) -> Path:
    """Where a test's screenshots go: ``docs/screenshots/`` with
    ``DEALBROKER_TEST_SCREENSHOTS=1`` where the test ``keep``s them (the pages the docs show),
    else the test's temporary directory."""
    if keep and os.environ.get("DEALBROKER_TEST_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path
