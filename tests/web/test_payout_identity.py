"""Who may say where a seller's money goes (docs/decisions/0013-payout-account.md).

A penetration test took a victim's payout: the holder of any draft deal's link typed the
victim's e-mail on the details form, the deal was linked to the victim's user, and registering
a payout account there overwrote the victim's account and paid out the victim's waiting deals
to the attacker, whose page showed the victim's name and IBAN ending. These tests replay that
attack and check the model that stops it: identity across deals only from the integration,
payout accounts per deal, and a change of account confirmed by e-mail, with an audit trail.
"""

import re
import uuid

from sqlalchemy import select

from dealbroker.deals.models import Deal
from dealbroker.notifications.models import OutboxMessage
from dealbroker.offers.models import Offer
from dealbroker.payments.models import PayoutAccount, PayoutAccountChange, ProviderCall
from tests.conftest import SELLER, create_deal
from tests.lifecycle_helpers import run_provider_calls
from tests.web.pages import forms, path, submit

VICTIM = {**SELLER, "firstname": "Vera", "lastname": "Victim", "email": "vera@example.com"}
VICTIM_IBAN = "NO9386011117947"
ATTACKER_IBAN = "DE89370400440532013000"
OTHER_IBAN = "GB82WEST12345698765432"


async def trigger(client, caller, name: str, body: dict) -> None:
    response = await client.post(
        f"/webhooks/v1/{name}", json=body, headers={"webhook-secret": caller.webhook_secret}
    )
    assert response.status_code in (200, 204), response.text


async def completed_deal(client, caller, seller: dict) -> dict:
    """A deal paid for, picked up and approved: its payout waits for an account."""
    deal = await create_deal(client, caller, price=100, seller=seller)
    await trigger(client, caller, "dealOffer", {"dealId": deal["id"], "shippingType": "Pickup"})
    await trigger(client, caller, "dealOfferApproved", {"dealId": deal["id"]})
    await trigger(client, caller, "signatureStatus", {"dealId": deal["id"]})
    await trigger(client, caller, "paymentStatus", {"dealId": deal["id"], "status": "Paid"})
    await trigger(client, caller, "dealStatus", {"dealId": deal["id"], "status": "Completed"})
    got = await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)
    assert (got.json()["status"], got.json()["paymentStatus"]) == ("Completed", "PendingPayOut")
    return deal


async def payment_status(client, caller, deal: dict) -> str:
    got = await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)
    return got.json()["paymentStatus"]


async def seller_user(sessionmaker, deal: dict) -> uuid.UUID | None:
    async with sessionmaker() as session:
        return await session.scalar(
            select(Deal.seller_user_id).where(Deal.id == uuid.UUID(deal["id"]))
        )


async def paid_to(sessionmaker, deal: dict) -> list[str]:
    """The account numbers the provider was asked to pay this deal's money to."""
    async with sessionmaker() as session:
        rows = await session.execute(
            select(PayoutAccount.number)
            .join(ProviderCall, ProviderCall.account_id == PayoutAccount.id)
            .where(ProviderCall.deal_id == uuid.UUID(deal["id"]), ProviderCall.kind == "payout")
        )
        return [r[0] for r in rows]


async def test_a_deal_link_cannot_take_another_sellers_payout(client, caller, sessionmaker):
    # The victim was paid on one deal, and another deal of theirs waits for its payout.
    paid = await completed_deal(client, caller, VICTIM)
    account = await submit(
        client, path(paid["url"]), "account", holder="Vera Victim", account=VICTIM_IBAN
    )
    assert account.status_code == 303
    await run_provider_calls(sessionmaker)
    assert await payment_status(client, caller, paid) == "PaidOut"
    waiting = await completed_deal(client, caller, VICTIM)

    # The attacker holds the link of a draft deal without a seller and types the victim's
    # e-mail, then registers their own account on that page.
    created = await client.post(
        "/deals/v1/deals", json={"name": "Lamp", "price": 5}, headers=caller.headers
    )
    own = created.json()
    page = path(own["url"])
    details = await submit(
        client, page, "details", name="Lamp", firstname="Vera", email=VICTIM["email"]
    )
    assert details.status_code == 303
    registered = await submit(client, page, "account", holder="Mallory", account=ATTACKER_IBAN)
    assert registered.status_code == 303
    await run_provider_calls(sessionmaker)

    # The typed address linked the attacker's deal to nobody else.
    assert await seller_user(sessionmaker, own) not in (
        await seller_user(sessionmaker, paid),
        None,
    )
    # The victim's waiting payout was not made, let alone to the attacker; the paid one stands.
    assert await payment_status(client, caller, waiting) == "PendingPayOut"
    assert await paid_to(sessionmaker, waiting) == []
    assert await paid_to(sessionmaker, paid) == [VICTIM_IBAN]
    # Nothing of the victim's account shows on the attacker's page.
    shown = (await client.get(page)).text
    assert "Vera Victim" not in shown
    assert VICTIM_IBAN[-4:] not in shown
    # The victim registers on the waiting deal and is paid to their own account.
    await submit(client, path(waiting["url"]), "account", holder="Vera", account=VICTIM_IBAN)
    await run_provider_calls(sessionmaker)
    assert await paid_to(sessionmaker, waiting) == [VICTIM_IBAN]


async def test_the_marketplaces_email_cannot_be_changed_on_the_page(client, caller, sessionmaker):
    deal = await create_deal(client, caller, seller=VICTIM)
    before = await seller_user(sessionmaker, deal)
    refused = await submit(
        client, path(deal["url"]), "details", name="Lamp", email="mallory@example.com"
    )
    assert refused.status_code == 400
    assert "cannot be changed here" in refused.text
    got = (await client.get(f"/deals/v1/deals/{deal['id']}", headers=caller.headers)).json()
    assert got["seller"]["email"] == VICTIM["email"]
    assert await seller_user(sessionmaker, deal) == before
    page = (await client.get(path(deal["url"]))).text
    assert re.search(r'name="email" value="vera@example.com" readonly', page)


async def confirmation_links(sessionmaker, deal: dict) -> list[str]:
    async with sessionmaker() as session:
        bodies = await session.scalars(
            select(OutboxMessage.body)
            .where(
                OutboxMessage.deal_id == uuid.UUID(deal["id"]),
                OutboxMessage.kind == "confirm_payout_account",
                OutboxMessage.to_email == VICTIM["email"],
            )
            .order_by(OutboxMessage.created_at)
        )
        return [path(re.search(r"(http\S+/payout-account/\S+)", b).group(1)) for b in bodies]


async def audit(sessionmaker, deal: dict) -> list[tuple[str, str]]:
    async with sessionmaker() as session:
        rows = await session.execute(
            select(PayoutAccountChange.status, PayoutAccountChange.number)
            .where(PayoutAccountChange.deal_id == uuid.UUID(deal["id"]))
            .order_by(PayoutAccountChange.requested_at)
        )
        return [(r[0], r[1][-4:]) for r in rows]


async def test_changing_the_payout_account_needs_the_emailed_confirmation(
    client, caller, sessionmaker
):
    # The first account of a deal takes effect at once.
    deal2 = await create_deal(client, caller, seller=VICTIM)
    page2 = path(deal2["url"])
    first = await submit(client, page2, "account", holder="Vera Victim", account=VICTIM_IBAN)
    assert first.headers["location"].endswith("done=account")

    # Whoever holds the page's link asks to move the money elsewhere: nothing changes yet.
    change = await submit(client, page2, "account", holder="Mallory", account=ATTACKER_IBAN)
    assert "done=account-confirm" in change.headers["location"]
    shown = (await client.get(page2)).text
    assert f"ending {VICTIM_IBAN[-4:]}" in shown
    assert f"account ending {ATTACKER_IBAN[-4:]} waits for your confirmation" in shown

    # A newer request replaces it; only its link confirms, and only once.
    await submit(client, page2, "account", holder="Vera Victim", account=OTHER_IBAN)
    old_link, new_link = await confirmation_links(sessionmaker, deal2)
    assert "not valid any more" in (await client.get(old_link)).text
    confirm_page = (await client.get(new_link)).text
    assert f"ending {OTHER_IBAN[-4:]}" in confirm_page
    csrf = forms(confirm_page)["pay"]["csrf"]
    confirmed = await client.post(new_link, data={"csrf": csrf})
    assert confirmed.status_code == 303
    assert confirmed.headers["location"] == f"{page2}?done=account-changed"
    assert f"ending {OTHER_IBAN[-4:]}" in (await client.get(page2)).text
    again = await client.post(new_link, data={"csrf": csrf})
    assert again.status_code == 404
    assert "not valid" in again.text
    # A forged token confirms nothing.
    forged = new_link.rsplit("/", 1)[0] + "/not-a-token"
    assert "not valid any more" in (await client.get(forged)).text

    assert await audit(sessionmaker, deal2) == [
        ("applied", VICTIM_IBAN[-4:]),
        ("superseded", ATTACKER_IBAN[-4:]),
        ("applied", OTHER_IBAN[-4:]),
    ]
    async with sessionmaker() as session:
        kinds = list(
            await session.scalars(
                select(OutboxMessage.kind)
                .where(OutboxMessage.deal_id == uuid.UUID(deal2["id"]))
                .order_by(OutboxMessage.created_at)
            )
        )
    assert kinds[-1] == "payout_account_changed"


async def test_a_typed_buyer_email_links_to_no_other_buyer(client, caller, sessionmaker):
    # The integration vouches for a buyer's address on one deal: that buyer is a user.
    first = await create_deal(client, caller, seller=VICTIM)
    await trigger(
        client,
        caller,
        "dealOffer",
        {"dealId": first["id"], "buyer": {"name": "Ola", "email": "ola@example.com"}},
    )
    # On another deal, someone types that address on an offer link made for nobody.
    second = await create_deal(client, caller, seller=VICTIM)
    link = await client.post(
        f"/deals/v1/deals/{second['id']}/offer", json={}, headers=caller.headers
    )
    offered = await submit(
        client,
        path(link.json()["url"]),
        "offer",
        price="10",
        shippingType="Pickup",
        email="ola@example.com",
    )
    assert offered.status_code == 303
    # An offer link made for that buyer, who types their own address, links to them.
    third = await create_deal(client, caller, seller=VICTIM)
    link = await client.post(
        f"/deals/v1/deals/{third['id']}/offer",
        json={"buyer": {"name": "Ola", "email": "ola@example.com"}},
        headers=caller.headers,
    )
    await submit(
        client,
        path(link.json()["url"]),
        "offer",
        price="10",
        shippingType="Pickup",
        email="OLA@example.com",
    )
    async with sessionmaker() as session:
        rows = dict(
            (str(d), u)
            for d, u in await session.execute(select(Offer.deal_id, Offer.buyer_user_id))
        )
    assert rows[second["id"]] != rows[first["id"]]
    assert rows[third["id"]] == rows[first["id"]]
