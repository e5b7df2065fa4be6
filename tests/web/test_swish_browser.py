"""The Swish checkout walked in Chromium, in Swedish on a phone (390 px) and Norwegian on a
desktop (1280 px), with no JavaScript needed: the choice, then the waiting page (the app link
on the phone, the QR code on the desktop), which reloads itself until Swish's callback has
made the payment ``Paid`` and sends the buyer back to the deal. Each state is checked with
axe-core and screenshotted, and must fit the window's width."""

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dealbroker.core.settings import Settings
from tests.browser import WINDOWS, Person
from tests.payments.swish_fixture import SwishEmulator, signed_swish_deal
from tests.processes import Server, free_port

pytestmark = pytest.mark.server


async def test_pay_with_swish_in_the_browser(
    tmp_path: Path, browser: Any, shots: Path, swish_emulator: SwishEmulator
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'swish.db'}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"DEALBROKER_BASE_URL": base, **swish_emulator.settings()}
    server = Server(db_url, tmp_path, port=port, **env)
    values = {k.removeprefix("DEALBROKER_").lower(): v for k, v in env.items()}
    settings = Settings(database_url=db_url, environment="sandbox", **values)  # type: ignore[arg-type]
    try:
        for device, language, kind in WINDOWS:
            _, token = await asyncio.to_thread(signed_swish_deal, db_url, settings)
            person = await Person.open(browser, shots, device, language=language)
            page = person.page
            await page.goto(f"{base}/pay/swish/{token}?return=/o/back")
            await person.audit()
            await person.shot(f"swish-choice-{kind}-{language}")
            mode = "app" if kind == "phone" else "qr"
            await page.locator(f"button[value={mode}]").click()
            await page.wait_for_selector("[data-swish-waiting]")
            if kind == "phone":
                link = await page.locator("[data-swish-app]").get_attribute("href")
                assert link is not None
                assert link.startswith("swish://paymentrequest?token=")
            else:
                assert await page.locator("[data-swish-qr] svg").count() == 1
            await person.audit()
            await person.shot(f"swish-waiting-{kind}-{language}")
            [request] = [r for r in swish_emulator.get("requests") if r["status"] == "CREATED"]
            swish_emulator.post("pay", {"id": request["id"]})
            await page.wait_for_url("**/o/back?done=paid", timeout=15_000)  # the meta refresh
            assert person.errors == [] or all("404" in e for e in person.errors)
            await person.context.close()
    finally:
        server.stop()
