"""The evidence card in Chromium: a seller in dispute adds a statement and a photo, in Bokmål
and Swedish, on a phone and a desktop; every state checked with axe-core, the photo shown under
the page's own policy (no CSP bypass for the last look). Screenshots go to docs/screenshots/
with ``DEALBROKER_TEST_SCREENSHOTS=1``."""

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.browser import DESKTOP, FLOW_SECONDS, PHONE, Integration, Person
from tests.evidence import hostile
from tests.web.walks import disputed_deal, photos_shown

pytestmark = pytest.mark.server


STATEMENTS = {
    "nb": ("Kjøperen tok sykkelen uten å gi koden.", "Jeg ga koden, men den ble ikke tastet inn."),
    "sv": ("Köparen tog cykeln utan att ge koden.", "Jag gav koden, men den knappades inte in."),
}


async def add_statement(person: Person, text: str) -> None:
    await person.label("Add a statement").fill(text)
    await person.press("Add the statement")
    done = person.t("Your statement is added. The other party and we can read it.")
    assert done in await person.page.inner_text("main")


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_evidence_card_in_a_browser(
    browser: Any,
    integration: Integration,
    shots: Path,
    tmp_path: Path,
    language: str,
) -> None:
    photo = tmp_path / "skade.jpg"
    photo.write_bytes(hostile.jpeg_with_gps((1200, 900)))
    for device, width in ((PHONE, "phone"), (DESKTOP, "desktop")):
        seller_url, buyer_url = await disputed_deal(integration, f"kari.{language}.{width}@x.no")
        seller = await Person.open(browser, shots, device, language=language)
        buyer = await Person.open(browser, shots, device, language=language)
        try:
            async with asyncio.timeout(FLOW_SECONDS):
                await seller.goto(seller_url)
                card = seller.page.locator("[data-evidence]")
                assert await card.get_by_role("heading", name=seller.t("Evidence")).count() == 1
                await add_statement(seller, STATEMENTS[language][0])
                await seller.page.locator("input[name=photo]").set_input_files(str(photo))
                await seller.press("Send the photo")
                await seller.audit()
                assert await card.locator("[data-photo] img").count() == 1
                left = seller.t(
                    "%(left)s of %(max)s photos left. JPEG, PNG or WebP, at most 10 MB each.",
                    left=5,
                    max=6,
                )
                assert left in await card.inner_text()
                await photos_shown(seller)
                await seller.shot(f"evidence-seller-{language}-{width}")

                # The buyer sees the seller's statement and photo, and answers.
                await buyer.goto(buyer_url)
                theirs = buyer.page.locator("[data-evidence]")
                assert STATEMENTS[language][0] in await theirs.inner_text()
                assert await theirs.locator("[data-photo-party=seller] img").count() == 1
                await add_statement(buyer, STATEMENTS[language][1])
                await buyer.audit()
                text = await buyer.page.locator("[data-evidence]").inner_text()
                assert text.index(STATEMENTS[language][0]) < text.index(STATEMENTS[language][1])
                await photos_shown(buyer)
                await buyer.shot(f"evidence-buyer-{language}-{width}")
                assert not seller.errors, seller.errors
                assert not buyer.errors, buyer.errors
        finally:
            await seller.context.close()
            await buyer.context.close()
    # Under the page's own policy (no bypass), the photo loads: img-src allows our own links.
    seller_url, _ = await disputed_deal(integration, f"kari.{language}.csp@x.no")
    person = await Person.open(browser, shots, DESKTOP, bypass_csp=False, language=language)
    try:
        await person.page.goto(seller_url)
        await person.page.locator("input[name=photo]").set_input_files(str(photo))
        await person.press("Send the photo")
        # The page is back when its HTML is; the photo may still be on its way.
        await person.page.wait_for_function(
            "() => { const i = document.querySelector('[data-photo] img');"
            " return i !== null && i.complete; }"
        )
        loaded = await person.page.eval_on_selector(
            "[data-photo] img", "img => img.complete && img.naturalWidth"
        )
        assert loaded == 900  # turned upright by its EXIF orientation: 900 × 1200
        assert not person.errors, person.errors
    finally:
        await person.context.close()
