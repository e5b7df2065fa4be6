"""Signing with eID at the loopback OpenID provider, followed with httpx: the sign form to the
provider and back to our callback, and what the deal keeps of it."""

import json
import re
import uuid
from urllib.parse import parse_qs, urlsplit

import httpx
from sqlalchemy import select

from dealbroker.deals.models import Deal
from dealbroker.events.models import Event
from dealbroker.signatures import eid
from dealbroker.signatures.models import EidSignature
from tests.conftest import BASE_URL, SELLER, create_deal, make_settings
from tests.oidc import Provider, secret
from tests.web.pages import path, submit

CALLBACK = BASE_URL + eid.CALLBACK_PATH
ACR = "urn:eid:test:high"
FAILED_PAGE = "The signature did not go through"


def eid_settings(provider: Provider, db_url: str, **overrides: object):  # type: ignore[no-untyped-def]
    return make_settings(
        db_url,
        eid_issuer=provider.issuer,
        eid_client_id="dealbroker",
        eid_client_secret=secret("dealbroker"),
        eid_acr_values=ACR,
        secret_key="k" * 40,
        **overrides,
    )


async def to_provider(client: httpx.AsyncClient, page: str, form: str, **data: str) -> str:
    """Post the party's sign form; follow our page to the issuer. The issuer's URL."""
    signed = await submit(client, page, form, consent="yes", **data)
    assert signed.status_code == 303, signed.text
    assert signed.headers["location"].startswith(f"{BASE_URL}/eid/")
    sent = await client.get(signed.headers["location"])
    assert sent.status_code == 303, sent.text
    query = parse_qs(urlsplit(sent.headers["location"]).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["acr_values"] == [ACR]
    assert all(query.get(k) for k in ("state", "nonce", "code_challenge"))
    return sent.headers["location"]


async def at_broker(url: str, person: str) -> str:
    """The provider's part: ``person`` signs in there (or "cancel"). Our callback's URL."""
    async with httpx.AsyncClient(timeout=10) as browser:
        for _ in range(12):
            if re.search(r"/interaction/[^/?]+$", url):
                url += f"?as={person}"
            answer = await browser.get(url)
            assert answer.status_code in (302, 303), answer.text[:500]
            url = answer.headers["location"]
            if url.startswith("/"):
                url = urlsplit(str(answer.url))._replace(path=url, query="").geturl()
            if url.startswith(CALLBACK):
                return url.removeprefix(BASE_URL)
    raise AssertionError("the provider never sent the browser back")


async def statuses(sessionmaker, deal_id: str, party: str) -> list[str]:
    """The deal's ``signature.status`` events of ``party``, in order: their statuses."""
    async with sessionmaker() as session:
        found = await session.scalars(
            select(Event)
            .where(Event.kind == "signature.status", Event.deal_id == uuid.UUID(deal_id))
            .order_by(Event.seq)
        )
        sent = [json.loads(e.payload)["data"] for e in found]
        return [d["status"] for d in sent if d["signatureType"] == party]


async def flows_of(sessionmaker, deal_id: str) -> list[EidSignature]:
    async with sessionmaker() as session:
        found = await session.scalars(select(EidSignature).order_by(EidSignature.started_at))
        return [f for f in found if str(f.deal_id) == deal_id]


async def seller_deal(client, caller) -> tuple[dict, str]:
    deal = await create_deal(client, caller, price=1000, seller=SELLER)
    return deal, path(deal["url"])


async def refused(client, sessionmaker, deal, callback: str) -> None:
    """The callback refuses: the page says so, the deal is still a draft, and the seller's
    signature went Initiated then Failed."""
    answer = await client.get(callback)
    assert answer.status_code == 400, answer.text
    assert FAILED_PAGE in answer.text
    assert "Back to the deal, to sign again" in answer.text
    assert await statuses(sessionmaker, deal["id"], "Seller") == ["Initiated", "Failed"]
    (flow,) = await flows_of(sessionmaker, deal["id"])
    assert flow.status == "Failed"
    assert flow.failure  # why, for the operator
    async with sessionmaker() as session:
        assert (await session.get(Deal, uuid.UUID(deal["id"]))).status == "Draft"
