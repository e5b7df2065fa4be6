"""A photo upload against a real ``dealbroker serve``, its memory read from /proc: a photo that
could not be kept is refused before its body is read (nothing decoded, the process's peak
memory unmoved, answered at once), and photos decoded at the same time take the memory of
``DEALBROKER_EVIDENCE_CONCURRENT_DECODES`` of them, not of all.

The decompression bomb is a 150 KB PNG of 49 megapixels: under the 50-megapixel bound, so it
is decoded when it may be kept (196 MB of pixels, as Pillow holds them)."""

import asyncio
import html
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tests.browser import Integration, LiveServer, serve_module
from tests.conftest import BACKENDS
from tests.evidence import hostile
from tests.web.pages import forms
from tests.web.walks import disputed_deal

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc"),
]

MB = 1024 * 1024
BOMB = hostile.png_bomb(7000, colour=True)
# What its decoded pixels take in memory: Pillow keeps RGB in four bytes a pixel (196 MB).
BOMB_PIXELS_BYTES = 7000 * 7000 * 4


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    yield from serve_module(
        request,
        tmp_path_factory,
        "photos",
        {"DEALBROKER_EVIDENCE_CONCURRENT_DECODES": "1"},
    )


def memory(pid: int) -> dict[str, int]:
    """The process's resident memory now (VmRSS) and at its peak so far (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}


@asynccontextmanager
async def market(live: LiveServer) -> AsyncIterator[Integration]:
    async with httpx.AsyncClient(base_url=live.base, timeout=60) as api:
        token = await api.post(
            "/oauth2/token",
            data={"grant_type": "client_credentials"},
            auth=(live.credential("client id"), live.credential("client secret")),
        )
        assert token.status_code == 200, token.text
        api.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        yield Integration(api, live.credential("webhook secret"))


async def post_photo(api: httpx.AsyncClient, page_url: str, data: bytes) -> httpx.Response:
    form = forms((await api.get(page_url)).text)["evidence-photo"]
    action = form.pop("action")
    return await api.post(action, data=form, files={"photo": ("p.png", data, "image/png")})


def report(line: str) -> None:
    sys.__stderr__.write(f"\n{line}\n")


async def test_a_bomb_that_could_not_be_kept_is_refused_unread_and_decodes_are_bounded(
    served: tuple[LiveServer, str],
) -> None:
    live, _db_url = served
    pid = live.processes[0].pid
    async with market(live) as integration:
        api = integration.api
        full, _buyer = await disputed_deal(integration, "kari.full@x.no")
        small = hostile.png((64, 48), "RGB")
        for _ in range(5):
            assert (await post_photo(api, full, small)).status_code == 303
        stale = forms((await api.get(full)).text)["evidence-photo"]  # one place left on it
        assert (await post_photo(api, full, small)).status_code == 303
        assert "evidence-photo" not in forms((await api.get(full)).text)  # none left
        open_deals = [(await disputed_deal(integration, f"kari.{n}@x.no"))[0] for n in range(3)]

        before = memory(pid)
        started = time.monotonic()
        refused = await api.post(
            stale.pop("action"), data=stale, files={"photo": ("bomb.png", BOMB, "image/png")}
        )
        took = time.monotonic() - started
        after = memory(pid)
        assert refused.status_code == 409, refused.text
        assert "Du har lagt til 6 bilder" in html.unescape(refused.text)  # Bokmål, the default
        report(
            f"refused bomb: {took * 1000:.0f} ms, RSS {before['VmRSS'] / MB:.0f} -> "
            f"{after['VmRSS'] / MB:.0f} MB, peak {before['VmHWM'] / MB:.0f} -> "
            f"{after['VmHWM'] / MB:.0f} MB"
        )
        assert after["VmHWM"] - before["VmHWM"] < 16 * MB  # nothing decoded
        assert took < 1.0  # decoding it takes seconds

        # Three bombs that may be kept, sent at once: decoded one at a time (the setting).
        started = time.monotonic()
        sent = await asyncio.gather(*(post_photo(api, url, BOMB) for url in open_deals))
        took = time.monotonic() - started
        peak = memory(pid)
        assert [r.status_code for r in sent] == [303] * 3, [r.text[:200] for r in sent]
        report(
            f"3 bombs kept, 1 decode at a time: {took:.1f} s, peak {after['VmHWM'] / MB:.0f} "
            f"-> {peak['VmHWM'] / MB:.0f} MB (RSS now {peak['VmRSS'] / MB:.0f} MB)"
        )
        # Three decoded together would hold three times the pixels (588 MB) at the least; one
        # at a time holds one's, and what scaling it down takes.
        assert peak["VmHWM"] - after["VmHWM"] < 3 * BOMB_PIXELS_BYTES
