"""The pages around an approval that lapses: the approved buyer sees their deadline; once it has
passed (the sandbox clock moved past it), the lapsed buyer and every buyer whose offer was
declined may offer again on their own links, and the seller's page takes offers again at the
asking price. On SQLite and PostgreSQL (the ``client`` fixture's backends)."""

import html
import re

from tests.conftest import advance_clock
from tests.web.pages import (
    BUYER_SIGNS,
    HOURS,
    forms,
    status_of,
    submit,
    two_buyers_one_approved,
)


async def test_the_approved_buyer_sees_the_deadline_and_what_happens_after(client, caller):
    _, seller, first, _ = await two_buyers_one_approved(client, caller)
    for page in (first, seller):
        shown = html.unescape((await client.get(page)).text)
        assert "If not: The approval lapses and the deal takes offers again." in shown
        assert "data-due" in shown


async def test_after_the_lapse_every_buyer_may_offer_again(client, caller):
    deal, seller, first, second = await two_buyers_one_approved(client, caller)
    assert (await advance_clock(client, caller, HOURS * 3600 + 1))["timersFired"] == 1
    assert await status_of(client, caller, deal) == ("Ad", None)

    lapsed = html.unescape((await client.get(first)).text)
    assert 'data-offer-status="Lapsed"' in lapsed
    assert "the seller approved it, but it lapsed" in lapsed
    assert "offer" in forms(lapsed)  # the form to offer again
    declined = (await client.get(second)).text
    assert 'data-offer-status="Denied"' in declined
    assert "offer" in forms(declined)

    seller_page = html.unescape((await client.get(seller)).text)
    assert "The approved offer lapsed: it was not signed and paid in time" in seller_page
    assert 'data-offer-status="Lapsed"' in seller_page
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    assert got["price"] == 100  # the asking price again

    # The declined buyer offers again, and the seller can approve it.
    again = await submit(
        client, second, "offer", price="95", shippingType="Pickup", email="b@example.com"
    )
    assert again.status_code == 303
    page = (await client.get(seller)).text
    pending = re.findall(r'data-offer="([^"]+)" data-offer-status="Pending"', page)
    assert len(pending) == 1
    assert (await submit(client, seller, "approve", offer=pending[0])).status_code == 303
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    assert (got["status"], got["price"]) == ("Ad", 95)
    # The lapsed buyer's link no longer acts on the deal: no sign form, and a crafted post
    # (a stale tab) is refused.
    lapsed_page = (await client.get(first)).text
    assert "sign" not in forms(lapsed_page)
    csrf = forms(lapsed)["offer"]["csrf"]  # the page's token, from when it still had a form
    version = next(iter(forms((await client.get(seller)).text).values()))["version"]
    hidden = {"csrf": csrf, "version": version}
    base = first.split("?")[0]
    refused = await client.post(
        f"{base}/-/sign?{first.split('?')[1]}", data={**hidden, **BUYER_SIGNS, "confirm": "yes"}
    )
    assert refused.status_code == 400
    assert "Only the buyer whose offer was approved can do this." in html.unescape(refused.text)
