"""A developer portal login on a local sandbox with no mail server, from the real processes:
``dealbroker serve`` on SQLite (its embedded worker running the mail job, which sends nothing)
says where its mail is; the login mail is read on ``/sandbox/outbox`` and its link logs in;
``dealbroker portal login-link`` prints a one-time link instead, recorded in the audit trail."""

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import database_url
from tests.processes import Server, cli, env
from tests.web.login_links import press_sync

pytestmark = pytest.mark.server

EMAIL = "ann@example.com"


def login_link(url: str, base: str, email: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dealbroker", "portal", "login-link", email],
        env=env(url, DEALBROKER_BASE_URL=base),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_without_a_mail_server_the_login_mail_is_in_the_outbox_and_the_cli_prints_a_link(
    tmp_path: Path,
):
    url = database_url("sqlite", tmp_path, "portal-outbox")
    server = Server(url, tmp_path)
    try:
        (said,) = [line for line in server.banner if "/sandbox/outbox" in line]
        assert f"{server.base}/sandbox/outbox" in said
        assert "dealbroker portal login-link" in said
        client_id = server.credential("client id")
        added = cli(url, "portal", "members", "add", client_id, EMAIL, "owner")
        assert added.returncode == 0, added.stderr

        with httpx.Client(base_url=server.base, timeout=10) as browser:
            asked = browser.post(
                "/portal/login", data={"email": EMAIL}, headers={"Accept-Language": "sv"}
            )
            assert asked.status_code == 200
            assert '<a href="/sandbox/outbox">utkorgen</a>' in asked.text
            outbox = browser.get("/sandbox/outbox", headers={"Accept-Language": "sv"})
            assert outbox.status_code == 200
            assert "Sandlådans utkorg" in outbox.text
            assert "Din inloggningslänk till dealbrokers utvecklarportal" in outbox.text
            found = re.search(
                r'<a href="' + re.escape(server.base) + r'(/portal/login/[A-Za-z0-9_-]+)"',
                outbox.text,
            )
            assert found, outbox.text
            assert press_sync(browser, found.group(1)).status_code == 303
            assert browser.get("/portal/").status_code == 200

        printed = login_link(url, server.base, EMAIL.upper())
        assert printed.returncode == 0, printed.stderr
        issued = json.loads(printed.stdout)
        assert issued["link"].startswith(f"{server.base}/portal/login/")
        assert issued["expiresAt"]
        with httpx.Client(timeout=10) as other:
            assert press_sync(other, issued["link"]).status_code == 303
            assert other.get(f"{server.base}/portal/").status_code == 200
            assert press_sync(other, issued["link"]).status_code == 400  # once
        token = issued["link"].rsplit("/", 1)[1]
        trail = cli(url, "audit", "list")
        assert trail.returncode == 0, trail.stderr
        (record,) = [
            json.loads(line) for line in trail.stdout.splitlines() if "portal.login_link" in line
        ]
        assert record["actor"].startswith("system:")
        assert token not in trail.stdout
        assert token not in server.output()

        unknown = login_link(url, server.base, "nobody@example.com")
        assert unknown.returncode == 1
        assert unknown.stdout == ""
        (line,) = unknown.stderr.splitlines()
        assert line == (
            "error: No member of an active integration has the address nobody@example.com."
        )
    finally:
        server.stop()


def test_a_sandbox_with_a_public_base_url_shows_no_outbox(tmp_path: Path):
    url = database_url("sqlite", tmp_path, "portal-public")
    server = Server(url, tmp_path, DEALBROKER_BASE_URL="https://sandbox.market.example.com")
    try:
        assert not [line for line in server.banner if "/sandbox/outbox" in line]
        assert httpx.get(f"{server.base}/sandbox/outbox").status_code == 404
    finally:
        server.stop()
