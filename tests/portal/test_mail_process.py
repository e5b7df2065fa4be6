"""A developer portal login link by e-mail from the real process: ``dealbroker serve`` on
SQLite (its embedded worker sends) to a real SMTP server on loopback. The mail is in the
asking page's language, then in the language the member last used; its link logs in once; the
server's log never shows the link's token."""

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import database_url
from tests.processes import Server, cli
from tests.smtp_server import SmtpServer, text_of
from tests.web.login_links import nonce_of

pytestmark = [
    pytest.mark.server,
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
]


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    server = SmtpServer()
    yield server
    server.stop()


def test_a_login_link_goes_by_email_in_the_members_language(tmp_path: Path, smtp: SmtpServer):
    url = database_url("sqlite", tmp_path, "portal-mail")
    server = Server(url, tmp_path, DEALBROKER_LOG_LEVEL="info", **smtp.env())
    try:
        client_id = server.credential("client id")
        added = cli(url, "portal", "members", "add", client_id, "ann@example.com", "owner")
        assert added.returncode == 0, added.stderr
        with httpx.Client(base_url=server.base, timeout=10) as browser:
            asked = browser.post(
                "/portal/login",
                data={"email": "ann@example.com"},
                headers={"Accept-Language": "sv"},
            )
            assert asked.status_code == 200
            (mail,) = smtp.wait_for(1)
            assert mail["To"] == "ann@example.com"
            assert mail["Subject"] == "Din inloggningslänk till dealbrokers utvecklarportal"
            body = text_of(mail)
            found = re.search(re.escape(server.base) + r"(/portal/login/[A-Za-z0-9_-]+)", body)
            assert found, body
            link = found.group(1)
            shown = browser.get(link)
            assert shown.status_code == 200  # the button's page uses nothing up
            pressed = {"nonce": nonce_of(shown.text)}  # bound to this browser's cookie
            logged_in = browser.post(link, data=pressed, headers={"Accept-Language": "nb"})
            assert logged_in.status_code == 303
            assert browser.get("/portal/").status_code == 200
            again = {"nonce": nonce_of(browser.get(link).text)}
            assert browser.post(link, data=again).status_code == 400  # once

        # The member used the portal in Norwegian: their next link is in Norwegian, whatever
        # the asking page's language.
        with httpx.Client(base_url=server.base, timeout=10) as other:
            other.post("/portal/login", data={"email": "ann@example.com"})
            second = smtp.wait_for(2)[1]
        assert second["Subject"] == "Innloggingslenken din til utviklerportalen til dealbroker"
    finally:
        server.stop()
    token = link.rsplit("/", 1)[1]
    assert token not in server.output()
    assert "/portal/login/…" in server.output()
