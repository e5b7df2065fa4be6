"""Signing deals with eID against a real OpenID provider on loopback: panva's
``oidc-provider`` playing an eID broker (``tests/operators/oidc_provider.mjs`` with "eid": the
ID token carries name, birthdate, a national identity number and ``acr``). The browser's part
is followed with httpx: the party's sign form, our page that sends it to the issuer, the
provider's interaction (which test person signs in, or cancel), back to our callback.

Both parties sign a deal this way; each failure (a changed deal, so another nonce; another
state; a cancel at the provider; too late; a return replayed; a used code brought back with
another flow) is refused with the page that
says nothing was signed, and ``signature.status`` ``Failed``. The ID token's own checks (another
audience or issuer, expired, ``alg: none``, another key, a rotated key, the ``acr``) are tried
on tokens the provider issued, through the same validation the callback uses; test_eid_forged.py
meets each of them through the whole flow, with the provider answering a forged ID token."""

import base64
import json
import re
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx
import pytest
from authlib.integrations.httpx_client import AsyncOAuth2Client
from authlib.jose import JsonWebKey, JsonWebToken
from sqlalchemy import select, update

from dealbroker.audit.models import AuditRecord
from dealbroker.core import clock, oidc
from dealbroker.deals.models import Deal
from dealbroker.notifications.models import OutboxMessage
from dealbroker.payments.models import PayoutAccount
from tests.conftest import BASE_URL
from tests.oidc import Provider, issuer_documents, secret
from tests.signatures.eid import (
    ACR,
    CALLBACK,
    FAILED_PAGE,
    at_broker,
    flows_of,
    refused,
    seller_deal,
    statuses,
    to_provider,
)
from tests.web.back_office import log_in, make_operator
from tests.web.pages import offer_link, path, status_of, submit

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    running = Provider(CALLBACK, "eid")
    yield running
    running.stop()


@pytest.fixture
def app(eid_app: object) -> object:
    """The app signs with eID at this module's provider."""
    return eid_app


async def test_both_parties_sign_with_eid(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    page = (await client.get(seller)).text
    assert "Sign with eID" in page
    assert 'name="full_name"' not in page  # the issuer gives the name
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    back = await client.get(callback)
    assert back.status_code == 303, back.text
    assert back.headers["location"] == f"{seller}?done=signed"
    assert "dealbroker-eid" not in client.cookies
    assert await status_of(client, caller, deal) == ("Ad", None)
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Completed"]
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert (flow.status, flow.name, flow.birthdate) == (
        "Completed",
        "Sigrid Selger",
        date(1980, 4, 1),
    )
    assert flow.acr == ACR
    assert flow.issuer.startswith("http://127.0.0.1:")
    assert flow.national_id_hash  # a keyed hash of the number, never the number
    assert "01048012345" not in flow.national_id_hash
    assert flow.subject == "sigrid"
    assert flow.token_issued_at is not None

    buyer = await offer_link(client, caller, deal, buyer={"name": "B", "email": "b@example.com"})
    offered = await submit(
        client, buyer, "offer", price="1000", shippingType="Pickup", name="B", email="b@example.com"
    )
    assert offered.status_code == 303
    offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
    assert (await submit(client, seller, "approve", offer=offer_id)).status_code == 303
    # Before paying, the buyer sees who the seller is, as the seller's eID verified it.
    shown = (await client.get(buyer)).text
    assert re.search(r"data-seller-verified>Sigrid Selger <span class=\"badge\">", shown)
    callback = await at_broker(
        await to_provider(client, buyer, "sign", phone="+47 400 00 001"), "bjorn"
    )
    back = await client.get(callback)
    assert back.status_code == 303, back.text
    assert back.headers["location"] == f"{buyer}&done=signed"
    assert await status_of(client, caller, deal) == ("Signed", None)
    assert await statuses(sessionmaker, deal["id"], "Buyer") == ["Initiated", "Completed"]
    async with sessionmaker() as session:
        row = await session.get(Deal, uuid.UUID(deal["id"]))
        assert row.buyer_contact["name"] == "Bjørn Kjøper"  # the verified name
    assert "data-buyer-verified>Bjørn Kjøper" in (await client.get(seller)).text

    # The same return again, with the browser's pending signing put back: nothing more.
    client.cookies.set("dealbroker-eid", "x")
    again = await client.get(callback)
    assert again.status_code == 400
    assert FAILED_PAGE in again.text
    assert await statuses(sessionmaker, deal["id"], "Buyer") == ["Initiated", "Completed"]


async def test_a_deal_changed_meanwhile_is_another_nonce(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    # The seller changes the price in another tab while signing in the first.
    async with sessionmaker() as session, session.begin():
        await session.execute(
            update(Deal).where(Deal.id == uuid.UUID(deal["id"])).values(price_minor=1)
        )
    await refused(client, sessionmaker, deal, callback)
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert "nonce" in flow.failure


async def test_another_state_is_refused(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    parts = urlsplit(callback)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query["state"] = "not-the-state"
    await refused(client, sessionmaker, deal, urlunsplit(parts._replace(query=urlencode(query))))


async def test_cancelled_at_the_provider(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "cancel")
    assert "error=access_denied" in callback
    await refused(client, sessionmaker, deal, callback)


async def test_too_late(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    later = clock.now() + timedelta(minutes=11)  # eid_flow_minutes is 10
    clock.set_clock(lambda: later)
    await refused(client, sessionmaker, deal, callback)


async def test_a_replayed_code_is_refused(client, caller, sessionmaker):
    """A return replayed changes nothing; a code already used, brought back with another
    flow's state, is refused by the issuer at the token exchange, and that flow fails."""
    first, seller = await seller_deal(client, caller)
    used = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    assert (await client.get(used)).status_code == 303
    again = await client.get(used)
    assert again.status_code == 400
    assert FAILED_PAGE in again.text
    assert await statuses(sessionmaker, first["id"], "Seller") == ["Initiated", "Completed"]

    deal, seller = await seller_deal(client, caller)
    callback = urlsplit(await at_broker(await to_provider(client, seller, "sign"), "sigrid"))
    query = {k: v[0] for k, v in parse_qs(callback.query).items()}
    query["code"] = parse_qs(urlsplit(used).query)["code"][0]
    await refused(client, sessionmaker, deal, urlunsplit(callback._replace(query=urlencode(query))))
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert "token" in flow.failure or "grant" in flow.failure, flow.failure


async def test_a_return_to_another_browser_signs_nothing(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    client.cookies.clear()
    answer = await client.get(callback)
    assert answer.status_code == 400
    assert FAILED_PAGE in answer.text
    # Nothing to fail either: the flow stays the seller's browser's, which may still return.
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated"]


async def test_an_earlier_flow_fails_when_another_starts(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    await to_provider(client, seller, "sign")
    await to_provider(client, seller, "sign")
    assert await statuses(sessionmaker, deal["id"], "Seller") == [
        "Initiated",
        "Failed",
        "Initiated",
    ]


def eid_client(provider: Provider, client_id: str = "dealbroker", acr: str = ACR) -> oidc.Client:
    return oidc.Client(
        provider.issuer, client_id, secret(client_id), "openid profile", CALLBACK, acr
    )


async def eid_tokens(provider: Provider, client_id: str = "dealbroker") -> tuple[dict, str]:
    """The token response of a whole code flow by ``client_id`` (the test person "sigrid"
    signing in), run by authlib, and its nonce."""
    nonce = "n-" + client_id
    async with AsyncOAuth2Client(
        client_id=client_id,
        client_secret=secret(client_id),
        scope="openid profile",
        redirect_uri=CALLBACK,
        code_challenge_method="S256",
    ) as oauth:
        verifier = "v" * 64
        url, _ = oauth.create_authorization_url(
            f"{provider.issuer}/auth", nonce=nonce, code_verifier=verifier, acr_values=ACR
        )
        back = BASE_URL + await at_broker(url, "sigrid")
        token = await oauth.fetch_token(
            f"{provider.issuer}/token", authorization_response=back, code_verifier=verifier
        )
    return dict(token), nonce


async def test_the_id_tokens_checks(provider, db_url):
    token, nonce = await eid_tokens(provider)
    metadata, jwks = await issuer_documents(provider)
    good = oidc.validate_id_token(
        eid_client(provider), metadata, jwks, token["id_token"], nonce, token
    )
    assert (good["name"], good["nin"], good["acr"]) == ("Sigrid Selger", "01048012345", ACR)

    def refused_with(client: oidc.Client, id_token: str, match: str, meta: dict = metadata) -> None:
        with pytest.raises(oidc.OidcRefused, match=match):
            oidc.validate_id_token(client, meta, jwks, id_token, nonce, token)

    with pytest.raises(oidc.OidcRefused, match="nonce"):
        oidc.validate_id_token(
            eid_client(provider), metadata, jwks, token["id_token"], "other", token
        )
    # Another audience: a token the provider issued to another client.
    other, other_nonce = await eid_tokens(provider, "other-app")
    with pytest.raises(oidc.OidcRefused, match="aud"):
        oidc.validate_id_token(
            eid_client(provider), metadata, jwks, other["id_token"], other_nonce, other
        )
    # Another issuer: the same token, where we expect another.
    refused_with(
        eid_client(provider), token["id_token"], "iss", {**metadata, "issuer": "http://127.0.0.1:1"}
    )
    # A level of assurance we did not get.
    refused_with(eid_client(provider, acr="urn:eid:test:substantial"), token["id_token"], "acr")
    # Expired.
    later = clock.now() + timedelta(hours=2)
    clock.set_clock(lambda: later)
    refused_with(eid_client(provider), token["id_token"], "expired")
    clock.reset_clock()
    # alg none: the same claims, unsigned.
    header, payload, _signature = token["id_token"].split(".")
    none = base64.urlsafe_b64encode(json.dumps({"alg": "none"}).encode()).rstrip(b"=").decode()
    refused_with(eid_client(provider), f"{none}.{payload}.", "ID token refused")
    # The same claims signed by another key under the provider's key id.
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    stranger = JsonWebKey.generate_key("RSA", 2048, is_private=True)
    kid = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["kid"]
    forged = JsonWebToken(["RS256"]).encode({"alg": "RS256", "kid": kid}, claims, stranger).decode()
    refused_with(eid_client(provider), forged, "ID token refused")


async def test_a_rotated_key(provider, client, caller, sessionmaker):
    old, nonce = await eid_tokens(provider)
    provider.rotate("key-2")
    metadata, jwks = await issuer_documents(provider)
    assert [k["kid"] for k in jwks["keys"]] == ["key-2"]
    with pytest.raises(oidc.OidcRefused):
        oidc.validate_id_token(eid_client(provider), metadata, jwks, old["id_token"], nonce, old)
    # A signing after the rotation verifies with the new key.
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    assert (await client.get(callback)).status_code == 303
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Completed"]


async def payout_change_link(client, sessionmaker, deal: dict, seller: str) -> str:
    """The signed seller's deal gets an account, then asks to change it: the e-mailed link."""
    for number in ("NO9386011117947", "DE89370400440532013000"):
        saved = await submit(client, seller, "account", holder="Sigrid Selger", account=number)
        assert saved.status_code == 303, saved.text
    async with sessionmaker() as session:
        body = await session.scalar(
            select(OutboxMessage.body).where(
                OutboxMessage.deal_id == uuid.UUID(deal["id"]),
                OutboxMessage.kind == "confirm_payout_account",
            )
        )
    return path(re.search(r"(http\S+/payout-account/\S+)", body).group(1))


async def confirm_with(client, link: str, person: str) -> httpx.Response:
    """The seller opens the e-mailed link, confirms, and is sent to eID as ``person``."""
    page = (await client.get(link)).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    confirmed = await client.post(link, data={"csrf": csrf})
    assert confirmed.status_code == 303, confirmed.text
    assert confirmed.headers["location"].startswith(f"{BASE_URL}/eid/")
    sent = await client.get(confirmed.headers["location"])
    assert sent.status_code == 303, sent.text
    return await client.get(await at_broker(sent.headers["location"], person))


async def account_number(sessionmaker, deal: dict) -> str:
    async with sessionmaker() as session:
        account = await session.scalar(
            select(PayoutAccount).where(PayoutAccount.deal_id == uuid.UUID(deal["id"]))
        )
        return account.number


async def test_a_payout_account_change_needs_the_sellers_eid(client, caller, sessionmaker):
    deal, seller = await seller_deal(client, caller)
    callback = await at_broker(await to_provider(client, seller, "sign"), "sigrid")
    assert (await client.get(callback)).status_code == 303
    link = await payout_change_link(client, sessionmaker, deal, seller)

    # Another person's eID is refused, recorded for the operators; the account stays.
    refused = await confirm_with(client, link, "bjorn")
    assert refused.status_code == 400
    assert "The change was not confirmed" in refused.text
    assert await account_number(sessionmaker, deal) == "NO9386011117947"
    async with sessionmaker() as session:
        record = await session.scalar(
            select(AuditRecord).where(AuditRecord.action == "payout_account.identity_refused")
        )
    assert record.target_id == deal["id"]
    assert record.after["subject"] == "bjorn"
    assert record.before["subject"] == "sigrid"
    # Support sees it in the deal's dossier in the back office: who tried, and why it failed.
    await make_operator(sessionmaker, "support@example.com", "support")
    await log_in(client, sessionmaker, "support@example.com")
    dossier = await client.get(f"/back-office/deals/{deal['id']}")
    assert dossier.status_code == 200
    refusal = re.search(
        r'<li data-eid-flow="payout" data-eid-status="Failed">.*?</li>', dossier.text, re.S
    )
    assert refusal, dossier.text
    assert "Bjørn Kjøper" in refusal.group(0)
    assert "another identity than the seller&#39;s" in refusal.group(0)
    assert 'data-eid-flow="sign" data-eid-status="Completed"' in dossier.text

    # The seller's own eID applies the change; no signature event for either.
    confirmed = await confirm_with(client, link, "sigrid")
    assert confirmed.status_code == 303, confirmed.text
    assert confirmed.headers["location"] == f"{seller}?done=account-changed"
    assert await account_number(sessionmaker, deal) == "DE89370400440532013000"
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Completed"]
