"""The back office in a real headless Chromium, in Swedish on a phone (390 px) and in Norwegian
Bokmål on a desktop (1280 px): the login page, a one-time link from the operator's command
(``dealbroker operators login-link``), its button, the home page with the operator's roles,
the audit trail with the login in it, the operators page, and logging out.

The real ``dealbroker serve`` runs (plus a ``dealbroker worker`` on PostgreSQL). Every page
state is checked with axe-core, must fit the window, and is screenshotted (to
``docs/screenshots/back-office-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``), as in
``tests/browser.py``.
"""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import WINDOWS, LiveServer, Person, serve_module
from tests.conftest import BACKENDS
from tests.processes import cli
from tests.web.walks import login_path

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The running server and its database (the operator's commands need it)."""
    yield from serve_module(request, tmp_path_factory, "back-office")


@pytest.mark.parametrize(("device", "language", "name"), WINDOWS)
async def test_an_operator_logs_in_sees_the_audit_trail_and_logs_out(
    served: tuple[LiveServer, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    name: str,
) -> None:
    live, db_url = served
    email = f"{name}@operators.example.com"
    added = cli(db_url, "operators", "add", email, "--role", "support", "--role", "admin")
    assert added.returncode == 0, added.stderr
    person = await Person.open(browser, shots, device, language=language)
    page = person.page
    try:
        # Not logged in: the back office sends a person to its login page.
        await page.goto(f"{live.base}/back-office/audit")
        assert page.url == f"{live.base}/back-office/login"
        await person.audit()
        await person.shot(f"back-office-{name}-1-login")

        await person.goto(live.base + login_path(db_url, email))
        await person.shot(f"back-office-{name}-2-link")
        await person.press("Log in")
        assert page.url == f"{live.base}/back-office/"
        await expect(page.locator("[data-role]")).to_have_count(2)
        await expect(page.locator("main")).to_contain_text(email)
        await person.shot(f"back-office-{name}-3-home")

        await person.goto(f"{live.base}/back-office/audit")
        await expect(page.locator("tr[data-action]").first).to_have_attribute(
            "data-action", "operator.login"
        )
        await person.shot(f"back-office-{name}-4-audit")

        await person.goto(f"{live.base}/back-office/operators")
        await expect(page.locator(f'[data-operator="{email}"]')).to_have_count(1)
        await person.shot(f"back-office-{name}-5-operators")

        await person.press("Log out")
        assert page.url.endswith("/back-office/login?done=logged-out")
        await expect(page.locator(".flash.ok")).to_have_text(person.t("You are logged out."))
        await person.shot(f"back-office-{name}-6-logged-out")
        assert not person.errors, person.errors
    finally:
        await person.context.close()
