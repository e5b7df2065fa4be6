"""The Swish checkout walked in Chromium, as a Swedish and a Norwegian buyer see it, on a phone
(390 px, with a phone's user agent) and on a desktop (1280 px), against the real
``dealbroker serve`` taking Swish payments through the emulator (its own process on loopback,
mutual TLS), on SQLite and beside a ``dealbroker worker`` on PostgreSQL. No JavaScript is
needed to choose; the waiting page's script asks our server until Swish's callback has made the
payment ``Paid``, and then sends the buyer back to the deal.

One page sequence per language, width and backend: the choice (the app first on a phone, the
QR code first on a desktop), then the waiting page (the "Open Swish" button on the phone, its
QR code folded away; the QR code on the desktop). Each state is checked with axe-core, has no
English on the nb and sv pages, fits the window's width, and is screenshotted
(``docs/screenshots/swish-WIDTH-LANGUAGE-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``)."""

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dealbroker.core.settings import Settings
from tests.browser import DESKTOP, PHONE, Person
from tests.conftest import BACKENDS, database_url
from tests.payments.swish_fixture import SwishEmulator, signed_swish_deal
from tests.processes import Server, Worker, free_port
from tests.web.english import english_in

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

WALKS = [("nb", 390), ("nb", 1280), ("sv", 390), ("sv", 1280)]
# The phone's own user agent: the checkout orders its ways to pay by it (the width alone would
# show a desktop's page on a narrow window).
PHONE_AGENT = (
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.0.0 Mobile Safari/537.36"
)
SWISH_PHONE: dict[str, Any] = {**PHONE, "user_agent": PHONE_AGENT}


class SwishServer:
    """``serve`` whose Swish payments go to the emulator (and a ``worker`` beside PostgreSQL).
    Its port is known before it starts: Swish's callback address is built from
    ``DEALBROKER_BASE_URL``."""

    def __init__(self, db_url: str, workdir: Path, emulator: SwishEmulator) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.db_url = db_url
        env = emulator.settings(DEALBROKER_BASE_URL=self.base)
        values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in env.items()}
        self.settings = Settings(database_url=db_url, environment="sandbox", **values)
        if not db_url.startswith("sqlite"):
            env["DEALBROKER_EMBEDDED_WORKER"] = "off"
        self.server = Server(db_url, workdir, port=port, **env)  # type: ignore[arg-type]
        self.worker = (
            None if db_url.startswith("sqlite") else Worker(db_url, workdir, **env)  # type: ignore[arg-type]
        )
        if self.worker is not None:
            self.worker.wait_ready()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
        self.server.stop()


@pytest.fixture(scope="module", params=BACKENDS)
def swish_live(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    swish_emulator: SwishEmulator,
) -> Iterator[SwishServer]:
    workdir = tmp_path_factory.mktemp(f"swish-browser-{request.param}")
    if request.param == "sqlite":
        db_url = f"sqlite+aiosqlite:///{workdir / 'swish.db'}"
    else:
        db_url = database_url(request.param, workdir, "swish_browser")
    live = SwishServer(db_url, workdir, swish_emulator)
    try:
        yield live
    finally:
        live.stop()
        (workdir / "serve.log").write_text(live.server.output())


async def _no_english(person: Person) -> None:
    found = english_in(await person.page.content())
    assert not found, f"English on {person.page.url}: {found}"


@pytest.mark.parametrize(("language", "width"), WALKS, ids=[f"{lang}-{w}" for lang, w in WALKS])
async def test_pay_with_swish_in_the_browser(
    browser: "Browser",
    shots: Path,
    swish_live: SwishServer,
    swish_emulator: SwishEmulator,
    language: str,
    width: int,
) -> None:
    on_phone = width == 390
    name = f"swish-{width}-{language}"
    _, token = await asyncio.to_thread(signed_swish_deal, swish_live.db_url, swish_live.settings)
    person = await Person.open(
        browser, shots, SWISH_PHONE if on_phone else DESKTOP, language=language
    )
    page = person.page
    try:
        await person.goto(f"{swish_live.base}/pay/swish/{token}?return=/o/back")
        await expect(page.locator("h1")).to_have_text(person.t("Pay with Swish"))
        # The way this device pays comes first; the other, and the buyer's number, follow.
        first, second = ("app", "qr") if on_phone else ("qr", "app")
        choice = page.locator("form[data-swish-start] button")
        await expect(choice).to_have_count(2)
        assert await choice.nth(0).get_attribute("value") == first
        assert await choice.nth(1).get_attribute("value") == second
        await expect(page.locator("form[data-swish-number] input[type=tel]")).to_be_visible()
        await person.audit()
        await _no_english(person)
        await person.shot(f"{name}-choice")

        async with page.expect_navigation():
            await choice.nth(0).click()
        await page.wait_for_selector("[data-swish-waiting]")
        await expect(page.locator("[data-payment-status]")).to_have_attribute(
            "data-payment-status", "Processing"
        )
        link = await page.locator("[data-swish-app]").get_attribute("href")
        assert link is not None
        assert link.startswith("swish://paymentrequest?token=")
        qr = page.locator("[data-swish-qr] svg")
        if on_phone:
            # The app is opened by a button of its own; the QR code (for another phone beside
            # this one) is folded away until asked for.
            await expect(page.locator("a.button[data-swish-app]")).to_have_text(
                person.t("Open Swish")
            )
            await expect(qr).to_be_hidden()
        else:
            await expect(qr).to_be_visible()
        await person.audit()
        await _no_english(person)
        await person.shot(f"{name}-waiting")
        if on_phone:
            await page.locator("[data-swish-qr-folded] summary").click()
            await expect(qr).to_be_visible()

        # The buyer pays in the app: Swish calls back, and the page's script, asking our
        # server, sends the buyer on to the deal.
        [request] = [
            r
            for r in swish_emulator.get("requests")
            if r["status"] == "CREATED" and r["callbackUrl"].startswith(swish_live.base)
        ]
        swish_emulator.post("pay", {"id": request["id"]})
        await page.wait_for_url("**/o/back?done=paid", timeout=15_000)
        # The address the test returns to is no page of ours (a 404); nothing else went wrong.
        assert all("404" in e for e in person.errors), person.errors
    finally:
        await person.context.close()
