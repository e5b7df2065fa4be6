"""The back office's disputes in a real headless Chromium, in Swedish on a phone (390 px) and in
Norwegian Bokmål on a desktop (1280 px): an operator opens the queue, opens a dispute with both
parties' statements and photos (added through the parties' pages), and decides it with a
reason; a dispute on a deal above the four eyes amount is proposed, and a second operator
approves it; the audit trail shows every step.

The real ``dealbroker serve`` runs (plus a ``dealbroker worker`` on PostgreSQL); the deals are
taken to their disputes through the API, the sandbox and the parties' pages. Every page state
is checked with axe-core, must fit the window, and is screenshotted (to
``docs/screenshots/back-office-disputes-*.png`` with ``DEALBROKER_TEST_SCREENSHOTS=1``), as in
``tests/browser.py``.
"""

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser import FLOW_SECONDS, WINDOWS, LiveServer, serve_module
from tests.conftest import BACKENDS
from tests.evidence import hostile
from tests.web.pages import forms
from tests.web.walks import disputed_with_return, operator, photos_shown

try:
    from playwright.async_api import Browser, expect
except ImportError:  # the browser fixture says what is missing
    pass

pytestmark = pytest.mark.server

STATEMENTS = {
    "nb": ("Kjøperen tok sykkelen uten å gi koden.", "Jeg fikk aldri sykkelen."),
    "sv": ("Köparen tog cykeln utan att ge koden.", "Jag fick aldrig cykeln."),
}
REASONS = {
    "nb": "Bildene viser at sykkelen ble overlevert.",
    "sv": "Bilderna visar att cykeln lämnades över.",
}


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, str]]:
    """The running server and its database (the operator's commands need it)."""
    yield from serve_module(request, tmp_path_factory, "back-office-disputes")


async def _evidence(live: LiveServer, page_url: str, statement: str, photo: bytes) -> None:
    """A party adds a statement and a photo on their own page, as their browser would post."""
    url = page_url if page_url.startswith("http") else live.base + page_url
    async with httpx.AsyncClient(timeout=10) as party:
        said = forms((await party.get(url)).text)["evidence"]
        action = said.pop("action")
        answer = await party.post(_absolute(live, action), data={**said, "statement": statement})
        assert answer.status_code == 303, answer.text
        sent = forms((await party.get(url)).text)["evidence-photo"]
        action = sent.pop("action")
        answer = await party.post(
            _absolute(live, action), data=sent, files={"photo": ("p.jpg", photo, "image/jpeg")}
        )
        assert answer.status_code == 303, answer.text


def _absolute(live: LiveServer, action: str) -> str:
    return action if action.startswith("http") else live.base + action


@pytest.mark.parametrize(("device", "language", "name"), WINDOWS)
async def test_an_operator_decides_disputes_and_a_second_approves_the_large_one(
    served: tuple[LiveServer, str],
    browser: "Browser",
    shots: Any,
    device: dict[str, Any],
    language: str,
    name: str,
) -> None:
    live, db_url = served
    shot = f"back-office-disputes-{name}"
    ann = await operator(
        browser,
        shots,
        device,
        language,
        db_url,
        live,
        f"ann-{name}@ops.example.com",
        "support",
        "admin",
    )
    bob = None
    try:
        async with asyncio.timeout(FLOW_SECONDS):
            # A small deal, decided at once; a large one (above 5,000 NOK), with four eyes.
            small, small_seller, small_buyer = await disputed_with_return(live, language, price=800)
            large, _large_seller, _large_buyer = await disputed_with_return(
                live, language, price=6000
            )
            seller_says, buyer_says = STATEMENTS[language]
            await _evidence(live, small_seller, seller_says, hostile.jpeg_with_gps((640, 480)))
            await _evidence(live, small_buyer, buyer_says, hostile.png((480, 360)))

            page = ann.page
            await ann.goto(f"{live.base}/back-office/")
            await (
                page.locator("nav.back-office")
                .get_by_role("link", name=ann.t("Disputes"), exact=True)
                .click()
            )
            await page.wait_for_url(f"{live.base}/back-office/disputes")
            await ann.audit()
            await expect(page.locator(f'[data-dispute="{small}"]')).to_have_count(1)
            await expect(page.locator(f'[data-dispute="{large}"]')).to_have_count(1)
            await ann.shot(f"{shot}-1-queue")

            await page.locator(f'[data-dispute="{small}"] a').click()
            await page.wait_for_url(f"{live.base}/back-office/disputes/{small}")
            await ann.audit()
            await expect(page.locator("[data-statement]")).to_have_count(2)
            await expect(page.locator("main")).to_contain_text(seller_says)
            await expect(page.locator("main")).to_contain_text(buyer_says)
            await photos_shown(ann)
            await ann.shot(f"{shot}-2-dispute")

            await ann.label("Release the money to the seller").check()
            await ann.label("Reason, sent to both parties with the decision").fill(
                REASONS[language]
            )
            await ann.press("Decide")
            await expect(page.locator(".flash.ok")).to_have_text(
                ann.t("The dispute is decided. Both parties are told, with your reason.")
            )
            await expect(page.locator("[data-decision-reason]")).to_have_text(REASONS[language])
            await ann.shot(f"{shot}-3-decided")

            await ann.goto(f"{live.base}/back-office/disputes/{large}")
            await ann.label("Refund the buyer").check()
            await ann.label("Reason, sent to both parties with the decision").fill(
                REASONS[language]
            )
            await ann.press("Decide")
            await expect(page.locator(".flash.ok")).to_have_text(
                ann.t(
                    "The decision is proposed. Another operator must approve it before it is "
                    "carried out."
                )
            )
            await expect(page.locator("[data-own-proposal]")).to_be_visible()
            await ann.shot(f"{shot}-4-proposed")

            bob = await operator(
                browser,
                shots,
                device,
                language,
                db_url,
                live,
                f"bob-{name}@ops.example.com",
                "support",
            )
            await bob.goto(f"{live.base}/back-office/disputes")
            await expect(
                bob.page.locator(f'[data-dispute="{large}"] [data-proposal]')
            ).to_have_count(1)
            await bob.goto(f"{live.base}/back-office/disputes/{large}")
            await bob.shot(f"{shot}-5-to-approve")
            await bob.press("Approve and carry out")
            await expect(bob.page.locator(".flash.ok")).to_have_text(
                bob.t("The decision is approved and carried out. Both parties are told.")
            )
            await expect(bob.page.locator("[data-proposal-status]")).to_have_attribute(
                "data-proposal-status", "approved"
            )
            await bob.shot(f"{shot}-6-approved")
            # The refunded deal's dossier: a refund and no payout; its history in words.
            await bob.goto(f"{live.base}/back-office/deals/{large}")
            money = bob.page.locator("[data-money]")
            await expect(money.locator("[data-refunded]")).to_have_count(1)
            await expect(money.locator("[data-payout]")).to_have_count(0)
            await expect(money).not_to_contain_text(bob.t("Payout to the seller"))
            history = bob.page.locator("[data-history]")
            await expect(history.locator('[data-trigger="created"]')).to_have_text(
                f"({bob.t('marketplace')}: {bob.t('deal created')})"
            )
            await expect(history.locator('[data-trigger="dispute_refunded"]')).to_contain_text(
                bob.t("dispute decided: the buyer is refunded")
            )
            await bob.shot(f"{shot}-6-refunded-dossier")

            await ann.goto(f"{live.base}/back-office/audit")
            actions = await page.locator("tr[data-action]").evaluate_all(
                "rows => rows.map(r => r.dataset.action)"
            )
            assert actions[0] == "dispute.approve", actions  # newest first
            mine = [a for a in actions if a.startswith("dispute.")]
            assert mine[:3] == ["dispute.approve", "dispute.propose", "dispute.resolve"], actions
            # The values as written: the reason's letters, not JSON's \u escapes.
            await expect(page.locator('tr[data-action="dispute.resolve"]').first).to_contain_text(
                REASONS[language]
            )
            await ann.shot(f"{shot}-7-audit")
            assert not ann.errors, ann.errors
            assert not bob.errors, bob.errors
    finally:
        await ann.context.close()
        if bob is not None:
            await bob.context.close()
