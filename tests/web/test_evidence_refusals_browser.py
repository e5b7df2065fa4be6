"""Photos refused before they are read, in Chromium: for the party's hourly pixel budget (the
seller reads why and when to try again), and from a page left open while the operator decided
the dispute; in Bokmål and Swedish, on a phone and a desktop, each page checked with axe-core.
The server allows 1 megapixel per photo and 2 per party per hour."""

import asyncio
import io
import math
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from dealbroker.core import i18n
from tests.browser import (
    DESKTOP,
    FLOW_SECONDS,
    PHONE,
    Integration,
    LiveServer,
    Person,
    serve_module,
)
from tests.conftest import BACKENDS
from tests.evidence import hostile
from tests.processes import cli
from tests.web.walks import disputed_deal

pytestmark = pytest.mark.server

CLOSED = (
    "Evidence can no longer be added: the dispute has been decided or the deal is not in dispute."
)
SPENT = (
    "You have sent more large photos in the last hour than we can take. Try again in "
    "%(minutes)s minute.",
    "You have sent more large photos in the last hour than we can take. Try again in "
    "%(minutes)s minutes.",
)


@pytest.fixture(scope="module", params=BACKENDS[:1])
def bounded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    settings = {
        "DEALBROKER_EVIDENCE_PHOTO_MAX_PIXELS": "1000000",
        "DEALBROKER_EVIDENCE_PIXELS_PER_PARTY_PER_HOUR": "2000000",
    }
    yield from serve_module(request, tmp_path_factory, "photo-budget", settings)


@pytest.fixture
async def market(bounded: tuple[LiveServer, str]) -> AsyncIterator[Integration]:
    live = bounded[0]
    async with httpx.AsyncClient(base_url=live.base, timeout=10) as api:
        token = await api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(live.credential("client id"), live.credential("client secret")),
        )
        assert token.status_code == 200, token.text
        api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        yield Integration(api, live.credential("webhook secret"))


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_a_spent_pixel_budget_is_explained_in_the_sellers_language(
    browser: Any,
    market: Integration,
    shots: Path,
    tmp_path: Path,
    language: str,
) -> None:
    photo = tmp_path / "riper.jpg"
    out = io.BytesIO()
    Image.new("RGB", (1000, 1000), (150, 90, 40)).save(out, "JPEG")  # 1 megapixel
    photo.write_bytes(out.getvalue())
    for device, width in ((PHONE, "phone"), (DESKTOP, "desktop")):
        seller_url, _buyer = await disputed_deal(market, f"kari.{language}.{width}@x.no")
        seller = await Person.open(browser, shots, device, language=language)
        try:
            async with asyncio.timeout(FLOW_SECONDS):
                await seller.goto(seller_url)
                for _ in range(2):
                    await seller.page.locator("input[name=photo]").set_input_files(str(photo))
                    await seller.press("Send the photo")
                await seller.page.locator("input[name=photo]").set_input_files(str(photo))
                async with seller.page.expect_navigation() as navigation:
                    await seller.page.get_by_role(
                        "button", name=seller.t("Send the photo"), exact=True
                    ).click()
                refused = await navigation.value
                assert refused is not None
                assert refused.status == 429
                wait = int((await refused.all_headers())["retry-after"])
                assert 3500 < wait <= 3600
                minutes = math.ceil(wait / 60)
                with i18n.using(language):
                    said = i18n.ngettext(*SPENT, minutes) % {"minutes": minutes}
                alert = await seller.page.locator("[role=alert]").inner_text()
                assert alert.strip() == said
                assert "Try again" not in await seller.page.inner_text("body")
                await seller.audit()
                await seller.shot(f"evidence-pixel-budget-{language}-{width}")
                # Still two photos, and the form to send another later.
                card = seller.page.locator("[data-evidence]")
                assert await card.locator("[data-photo] img").count() == 2
                assert await card.locator("input[name=photo]").count() == 1
                # Chromium logs the refused page's own 429 as a failed load; nothing else.
                others = [e for e in seller.errors if "status of 429" not in e]
                assert len(others) == len(seller.errors) - 1, seller.errors
        finally:
            await seller.context.close()


@pytest.mark.parametrize("language", ["nb", "sv"])
async def test_a_photo_sent_after_the_decision_is_refused_in_the_sellers_language(
    browser: Any,
    market: Integration,
    bounded: tuple[LiveServer, str],
    shots: Path,
    tmp_path: Path,
    language: str,
) -> None:
    photo = tmp_path / "riper.jpg"
    photo.write_bytes(hostile.jpeg_with_gps((800, 600)))
    for device, width in ((PHONE, "phone"), (DESKTOP, "desktop")):
        seller_url, _buyer = await disputed_deal(market, f"kari.late.{language}.{width}@x.no")
        seller = await Person.open(browser, shots, device, language=language)
        try:
            async with asyncio.timeout(FLOW_SECONDS):
                await seller.goto(seller_url)  # the page stays open while we decide
                deal_id = seller_url.split("/d/", 1)[1].split("/", 1)[0]
                decided = await asyncio.to_thread(
                    cli, bounded[1], "disputes", "resolve", deal_id, "--refund"
                )
                assert decided.returncode == 0, decided.stderr
                await seller.page.locator("input[name=photo]").set_input_files(str(photo))
                async with seller.page.expect_navigation() as navigation:
                    await seller.page.get_by_role(
                        "button", name=seller.t("Send the photo"), exact=True
                    ).click()
                refused = await navigation.value
                assert refused is not None
                assert refused.status == 409
                alert = await seller.page.locator("[role=alert]").inner_text()
                assert alert.strip() == seller.t(CLOSED)
                await seller.audit()
                await seller.shot(f"evidence-decided-{language}-{width}")
                card = seller.page.locator("[data-evidence]")
                assert await card.locator("input[name=photo]").count() == 0  # no form now
                others = [e for e in seller.errors if "status of 409" not in e]
                assert len(others) == len(seller.errors) - 1, seller.errors
        finally:
            await seller.context.close()
