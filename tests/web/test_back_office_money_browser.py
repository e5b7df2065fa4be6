"""A finance operator runs the payouts in a real headless Chromium, in Swedish on a phone
(390 px) and in Norwegian Bokmål on a desktop (1280 px): completed deals' payouts waiting, the
bank file made and downloaded, the bank's status report (built here as a bank's) uploaded, the
payouts shown paid and one refused, that one tried again, reconciliation, and every action in
the audit trail.

The real ``dealbroker serve`` runs on the bank-file rail (plus a ``dealbroker worker`` on
PostgreSQL); the deals reach ``PendingPayOut`` through the real services on its database. Every
page state is checked with axe-core, must fit the window, and is screenshotted (to
``docs/screenshots/back-office-money-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``).
"""

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from babel.dates import format_datetime

from dealbroker.cli.common import start_messages
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.core.i18n import LOCALES
from dealbroker.integrations.service import deployment_links
from dealbroker.payments import repository as payment_rows
from tests import lifecycle_helpers
from tests.browser import DESKTOP, PHONE, WINDOWS, LiveServer, Person, serve_module
from tests.conftest import BACKENDS, make_settings
from tests.payments.bank import BANK_SETTINGS, RAIL, pending_payout, read_file, status_report
from tests.processes import cli
from tests.web.english import english_in
from tests.web.walks import login_path, operator

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The running server on the bank-file rail, and its database."""
    yield from serve_module(request, tmp_path_factory, "back-office-money", RAIL)


@pytest.mark.parametrize(("device", "language", "name"), WINDOWS)
async def test_an_operator_takes_payouts_from_the_export_to_the_banks_report(
    served: tuple[LiveServer, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live, db_url = served
    monkeypatch.setattr(lifecycle_helpers, "SETTINGS", BANK_SETTINGS)
    engine = create_engine(db_url)
    sessionmaker = create_sessionmaker(engine)
    await start_messages(sessionmaker, make_settings(db_url))
    deals = [
        await pending_payout(sessionmaker, 450000, "NO9386011117947"),
        await pending_payout(sessionmaker, 123455, "1503.00.00029"),
        await pending_payout(sessionmaker, 9999, "DE89370400440532013000"),
    ]
    async with sessionmaker() as session:
        # Each payout's end-to-end id is its call's (the walk before this one may have left
        # a payout of its own waiting, which goes in this file too).
        ids = [(await payment_rows.calls_of(session, d.deal_id))[0].id.hex for d in deals]
        links = await deployment_links(session, make_settings(db_url))
    # The first deal's seller page, on this server.
    seller_page = live.base + "/" + links.deal_url(deals[0].deal_id).split("/", 3)[3]
    await engine.dispose()
    email = f"{name}@finance.example.com"
    added = cli(db_url, "operators", "add", email, "--role", "finance", "--role", "admin")
    assert added.returncode == 0, added.stderr
    person = await Person.open(browser, shots, device, language=language)
    page = person.page
    try:
        await person.goto(live.base + login_path(db_url, email))
        await person.press("Log in")
        await page.get_by_role("link", name=person.t("Money"), exact=True).first.click()
        assert page.url == f"{live.base}/back-office/payouts"
        await person.audit()
        for d in deals:
            await expect(page.locator(f'[data-waiting="{d.deal_id}"]')).to_have_count(1)
        # 4500 kr less the 5 % fee, in the reader's way of writing amounts.
        await expect(page.locator(f'[data-waiting="{deals[0].deal_id}"]')).to_contain_text(
            person.amount(4275)
        )
        await person.shot(f"back-office-money-{name}-1-waiting")

        await person.press("Make the bank file")
        await expect(page.locator(".flash.ok")).to_have_text(
            person.t(
                "The bank file is made. Download it and upload it to the bank; it is kept here."
            )
        )
        await expect(page.locator("[data-waiting]")).to_have_count(0)
        message_id = await page.locator("[data-file]").first.get_attribute("data-file")
        newest = page.locator(f'[data-file="{message_id}"]')
        for e2e in ids:
            await expect(newest.locator(f'[data-transfer="{e2e}"]')).to_have_attribute(
                "data-state", "submitted"
            )
        await person.shot(f"back-office-money-{name}-2-exported")
        # The seller, their account in and the payout in the bank file, is asked for nothing.
        seller = await Person.open(browser, shots, device, language=language)
        try:
            await seller.goto(seller_page)
            await expect(seller.page.locator("[data-payment-status]")).to_have_attribute(
                "data-payment-status", "PendingPayOut"
            )
            await expect(seller.page.locator("[data-money-at]")).to_have_text(
                seller.t("On its way to your account ending %(last4)s.", last4="7947")
            )
            await expect(seller.page.locator("[data-next]")).to_contain_text(
                seller.t("Your payout is on its way.")
            )
            await expect(seller.page.locator("[data-next]")).not_to_contain_text(
                seller.t("Add the payout account the money is to be paid to.")
            )
            await seller.shot(f"back-office-money-{name}-2-seller-payout-on-its-way")
            assert not seller.errors, seller.errors
        finally:
            await seller.context.close()

        async with page.expect_download() as waiting:
            await page.get_by_role(
                "link", name=person.t("Download %(id)s.xml", id=message_id)
            ).click()
        download = await waiting.value
        assert download.suggested_filename == f"{message_id}.xml"
        saved = tmp_path / "file.xml"
        await download.save_as(saved)
        sent = read_file(saved)  # valid against the schema, as the bank reads it
        assert sent.message_id == message_id
        assert set(ids) <= {t.end_to_end_id for t in sent.transfers}

        report = tmp_path / "report.xml"
        report.write_bytes(
            status_report(
                f"BANK-{name.upper()}",
                message_id,
                [
                    (ids[0], "ACSC", None, None),
                    (ids[1], "ACCP", None, None),
                    (ids[2], "RJCT", "AC04", None),
                ],
            )
        )
        await page.locator("#report").set_input_files(report)
        await person.press("Import the report")
        outcomes = page.locator("[data-imported] [data-outcome]")
        await expect(outcomes).to_have_count(3)
        assert sorted([await o.get_attribute("data-outcome") for o in await outcomes.all()]) == [
            "failed",
            "paid",
            "paid",
        ]
        states = [newest.locator(f'[data-transfer="{e2e}"]') for e2e in ids]
        for transfer, state in zip(states, ["succeeded", "succeeded", "failed"], strict=True):
            await expect(transfer).to_have_attribute("data-state", state)
        await person.shot(f"back-office-money-{name}-3-report")

        await person.goto(f"{live.base}/back-office/refused-calls")
        refused = page.locator("[data-call]")
        await expect(refused).to_have_count(1)
        await expect(refused).to_contain_text("AC04")
        await person.shot(f"back-office-money-{name}-4-refused")
        await person.press("Try again")
        await expect(page.locator(".flash.ok")).to_have_text(
            person.t("The call is queued again: the worker makes it in a moment.")
        )
        await expect(page.locator("[data-call]")).to_have_count(0)

        await person.goto(f"{live.base}/back-office/reconcile")
        await expect(page.locator('[data-difference="conflict"]')).to_have_count(0)
        await person.shot(f"back-office-money-{name}-5-reconcile")

        await person.goto(f"{live.base}/back-office/audit")
        actions = [
            await row.get_attribute("data-action")
            for row in await page.locator("tr[data-action]").all()
        ]
        assert actions[:4] == [
            "provider_call.retry",
            "payouts.import",
            "payouts.file",
            "payouts.export",
        ]
        await person.shot(f"back-office-money-{name}-6-audit")
        assert not person.errors, person.errors
    finally:
        await person.context.close()


# The words ``scripts/restore`` holds money out with (it names the backup restored).
HOLD_REASON = "restored from dealbroker-2026-01-05T0300.dump"


@pytest.fixture
def held(served: tuple[LiveServer, str]) -> Iterator[dict[str, str]]:
    """Money out held with the operator's command (its JSON: since, reason), released after the
    test whatever happens: the hold is a row of instance_settings, which the module's later
    walks share."""
    _, db_url = served
    taken = cli(db_url, "payments", "hold", "--reason", HOLD_REASON)
    assert taken.returncode == 0, taken.stderr
    try:
        yield json.loads(taken.stdout)
    finally:
        released = cli(db_url, "payments", "release")
        assert released.returncode == 0, released.stderr


@pytest.mark.parametrize("language", list(LOCALES))
@pytest.mark.parametrize(("device", "width"), [(PHONE, 390), (DESKTOP, 1280)])
async def test_held_payouts_say_since_when_and_why_and_the_export_is_refused(
    served: tuple[LiveServer, str],
    held: dict[str, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    width: int,
    language: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live, db_url = served
    monkeypatch.setattr(lifecycle_helpers, "SETTINGS", BANK_SETTINGS)
    engine = create_engine(db_url)
    try:
        sessionmaker = create_sessionmaker(engine)
        await start_messages(sessionmaker, make_settings(db_url))
        waiting = await pending_payout(sessionmaker, 250000, "NO9386011117947")
    finally:
        await engine.dispose()
    email = f"held-{width}-{language}@finance.example.com"
    person = await operator(browser, shots, device, language, db_url, live, email, "finance")
    page = person.page
    name = f"back-office-money-held-{width}-{language}"
    try:
        await person.goto(f"{live.base}/back-office/payouts")
        banner = page.locator("[data-payouts-held]")
        await expect(banner).to_be_visible()
        since = format_datetime(
            datetime.fromisoformat(held["since"]),
            "short",
            tzinfo=ZoneInfo(make_settings(db_url).time_zone),
            locale=language,
        )
        sentence = person.t(
            "Payouts and refunds are held since %(since)s (%(reason)s): none is made and no file "
            "written until they are released.",
            since=since,
            reason=HOLD_REASON,
        )
        await expect(banner).to_have_text(sentence)
        # Decided while held, the payout waits for the release, not "a moment".
        await expect(page.locator(f'[data-waiting="{waiting.deal_id}"]')).to_contain_text(
            person.t("held: handed to the bank rail once released")
        )
        await _in_the_pages_language(person)
        await person.shot(f"{name}-1-banner")

        async with page.expect_navigation() as navigation:
            await page.get_by_role("button", name=person.t("Make the bank file")).click()
        refused = await navigation.value
        assert refused is not None
        assert refused.status == 409
        await person.audit()
        refusal = page.locator("[role=alert]")
        await expect(refusal).to_have_text(
            person.t(
                "Payouts and refunds are held: the database was restored to an earlier moment, "
                "and money that left since would leave twice. No file is made until they are "
                "released with `dealbroker payments release`, after reconciling (see the backup "
                "and restore guide)."
            ).replace("`", "")
        )
        # The command to type, as code, not between the message's backticks.
        await expect(refusal.locator("code")).to_have_text("dealbroker payments release")
        await expect(banner).to_have_text(sentence)
        await expect(page.locator(f'[data-waiting="{waiting.deal_id}"]')).to_have_count(1)
        await expect(page.locator(".flash.ok")).to_have_count(0)
        await _in_the_pages_language(person)
        await person.shot(f"{name}-2-export-refused")
        # Chromium logs the refusal's 409 once; nothing else went wrong.
        others = [e for e in person.errors if "status of 409" not in e]
        assert len(others) == len(person.errors) - 1 == 0, person.errors
    finally:
        await person.context.close()


async def _in_the_pages_language(person: Person) -> None:
    """No English on a Norwegian or Swedish page but the hold's reason, as the operator typed
    it, and the command to type."""
    if person.language == "en":
        return
    html = re.sub(r"<code>.*?</code>", "", await person.page.content())
    assert english_in(html.replace(HOLD_REASON, "")) == []
