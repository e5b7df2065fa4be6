"""Login CSRF on the consoles' one-time links, in a real headless Chromium against the real
``dealbroker serve`` (on 127.0.0.1) and an attacker's site on another loopback origin
(127.0.0.2, a real HTTP server).

The attacker has a login link to their own account (a back office operator, a portal member)
and has opened its page themselves (so they hold its nonce). Their site's page posts the link
from the victim's browser by itself. The victim's browser must end on the console's refusal,
not logged in, and the link must stay usable: the browser of the person it was for, following
it from a mail page on another site (a cross-site navigation, as from webmail), presses its
button and is logged in. Each console is walked in Norwegian and Swedish at 390 and 1280 px;
axe-core on our pages.
"""

import html
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.browser import DESKTOP, PHONE, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.processes import cli
from tests.web.login_links import nonce_of
from tests.web.walks import emailed_link, login_path

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

REFUSED = (
    "This login link was not opened in this browser, so nobody was logged in. Open the link "
    "again, in the browser you want to log in with."
)
WALKS = [
    pytest.param(console, device, language, id=f"{console}-{language}-{width}")
    for console in ("back-office", "portal")
    for device, width in ((PHONE, 390), (DESKTOP, 1280))
    for language in ("nb", "sv")
]
SESSION_COOKIES = {"back-office": "dealbroker-operator", "portal": "dealbroker-portal"}


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    yield from serve_module(request, tmp_path_factory, "link-csrf")


class AttackerSite:
    """Another site: a real HTTP server on 127.0.0.2 answering each path with its page."""

    def __init__(self) -> None:
        self.pages: dict[str, str] = {}
        pages = self.pages

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                body = pages.get(self.path, "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        self.base = f"http://127.0.0.2:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def attacker() -> Iterator[AttackerSite]:
    site = AttackerSite()
    try:
        yield site
    finally:
        site.stop()


async def link_for(live: LiveServer, db_url: str, console: str, email: str) -> str:
    """A login link to the attacker's own account on ``console``."""
    if console == "back-office":
        added = cli(db_url, "operators", "add", email, "--role", "support")
        assert added.returncode == 0, added.stderr
        return login_path(db_url, email)
    client_id = live.credential("client id")
    added = cli(db_url, "portal", "members", "add", client_id, email, "owner")
    assert added.returncode == 0, added.stderr
    asked = httpx.post(f"{live.base}/portal/login", data={"email": email}, timeout=10)
    assert asked.status_code == 200
    return await emailed_link(db_url, email)


@pytest.mark.parametrize(("console", "device", "language"), WALKS)
async def test_another_sites_form_posting_a_link_logs_the_victim_in_to_nothing(
    served: tuple[LiveServer, str],
    attacker: AttackerSite,
    browser: "Browser",
    shots: Any,
    console: str,
    device: dict[str, Any],
    language: str,
) -> None:
    live, db_url = served
    name = f"{console}-{language}-{device['viewport']['width']}"
    path = await link_for(live, db_url, console, f"mallory-{name}@example.com")
    url = live.base + path
    # The attacker opens their link's page themselves: its nonce is theirs to put in the form.
    with httpx.Client(timeout=10) as own:
        nonce = nonce_of(own.get(url).text)
    attacker.pages[f"/{name}"] = (
        "<!doctype html><title>Win a bike</title>"
        f'<form method="post" action="{html.escape(url)}">'
        f'<input type="hidden" name="nonce" value="{html.escape(nonce)}"></form>'
        "<script>document.forms[0].submit()</script>"
    )
    attacker.pages[f"/{name}/mail"] = (
        f'<!doctype html><title>Mail</title><a href="{html.escape(url)}">Log in</a>'
    )

    victim = await Person.open(browser, shots, device, language=language)
    page = victim.page
    try:
        async with page.expect_navigation(url=url) as posted:
            await page.goto(f"{attacker.base}/{name}")
        refused = await posted.value
        assert refused is not None
        assert refused.status == 403
        await expect(page.locator("[role=alert]")).to_have_text(victim.t(REFUSED))
        await expect(page.locator("html")).to_have_attribute("lang", language)
        await expect(page.locator(f'form[action="{path}"]')).to_have_count(0)
        await victim.audit()
        await victim.shot(f"link-csrf-{name}-refused")
        cookies = {c["name"] for c in await victim.context.cookies()}
        assert SESSION_COOKIES[console] not in cookies
        await page.goto(f"{live.base}/{console}/")
        assert page.url == f"{live.base}/{console}/login"  # not logged in
    finally:
        await victim.context.close()
    # Chromium logs the refusal's 403 as a resource that failed to load; nothing else.
    assert [e for e in victim.errors if "status of 403" not in e] == []

    # The link was not used up: its owner's browser follows it from a mail page on another
    # site (the nonce's SameSite=Strict cookie is set on that navigation) and logs in.
    owner = await Person.open(browser, shots, device, language=language)
    page = owner.page
    try:
        await page.goto(f"{attacker.base}/{name}/mail")
        async with page.expect_navigation(url=url):
            await page.get_by_role("link").click()
        await owner.audit()
        await owner.shot(f"link-csrf-{name}-link")
        await owner.press("Log in")
        assert page.url.startswith(f"{live.base}/{console}/")
        assert "/login" not in page.url
        cookies = {c["name"] for c in await owner.context.cookies()}
        assert SESSION_COOKIES[console] in cookies
    finally:
        await owner.context.close()
    assert owner.errors == []
