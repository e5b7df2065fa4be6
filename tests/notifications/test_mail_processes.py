"""E-mail from the real processes to a real SMTP server on loopback.

* ``dealbroker serve`` on SQLite (its embedded worker sends): a deal driven through the API, the
  pages and the sandbox triggers mails the seller and the buyer, each with their own link (which
  opens their page) and the deadline; the SMTP login works and its password is never logged.
* A server that refuses first and accepts later gets the message on a retry.
* ``dealbroker worker`` on PostgreSQL sends the messages the deals' transactions wrote.
"""

import asyncio
import html
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest

from dealbroker.cli.common import start_messages
from dealbroker.core import clock
from dealbroker.core.db import create_engine, create_sessionmaker
from dealbroker.deals.lifecycle import Actor
from dealbroker.integrations.service import deployment_links
from dealbroker.notifications import messages
from dealbroker.signatures.service import SignatureType
from tests.conftest import BACKENDS, SELLER, database_url, make_settings
from tests.lifecycle_helpers import new_deal
from tests.processes import Server, Worker, drop_database, wait_until
from tests.smtp_server import SmtpServer, text_of
from tests.web.pages import BUYER_SIGNS, HANDOVER, path, submit

pytestmark = [
    pytest.mark.server,
    # The test server takes a login without TLS: it listens on loopback only.
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
]

PASSWORD = "smtp-pass-8c1f2e"
OSLO = ZoneInfo("Europe/Oslo")


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    server = SmtpServer(login=("dealbroker", PASSWORD))
    yield server
    server.stop()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return database_url("sqlite", tmp_path, "mail")


async def _token(client: httpx.AsyncClient, server: Server) -> dict[str, str]:
    response = await client.post(
        "/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(server.credential("client id"), server.credential("client secret")),
    )
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


async def _deal(client: httpx.AsyncClient, auth: dict[str, str], buyer: str) -> tuple[dict, str]:
    """A deal with Kari as seller and an offer link for ``buyer``: ``(deal, offer link)``."""
    created = await client.post(
        "/deals/v1/deals",
        json={"name": "Road bike", "price": 1000, "seller": SELLER},
        headers=auth,
    )
    assert created.status_code == 201, created.text
    deal = created.json()
    link = await client.post(
        f"/deals/v1/deals/{deal['id']}/offer",
        json={"buyer": {"name": "Ola", "email": buyer}},
        headers=auth,
    )
    assert link.status_code == 201, link.text
    return deal, link.json()["url"]


def _deadlines(days: int) -> set[str]:
    """The deadline ``days`` from now as the messages write it (a minute either way)."""
    now = clock.now()
    return {messages.when(now + timedelta(days=days, minutes=m), OSLO) for m in (-1, 0, 1, 2)}


async def _drive(server: Server) -> tuple[dict, str, dict, str]:
    """A carrier deal from offer to completion, and a second deal cancelled with an offer
    pending, through the API, the pages and the sandbox's payment trigger."""
    async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
        auth = await _token(client, server)
        deal, buyer_url = await _deal(client, auth, "ola@example.com")
        seller, buyer = path(deal["url"]), path(buyer_url)
        await submit(
            client, buyer, "offer", price="950", shippingType="Carrier",
            name="Ola", email="ola@example.com",
        )  # fmt: skip
        await submit(client, seller, "sign", full_name="Kari Nordmann", consent="yes")
        offer_id = re.search(r'data-offer="([^"]+)"', (await client.get(seller)).text).group(1)
        await submit(client, seller, "approve", offer=offer_id)
        await submit(client, buyer, "sign", **{**BUYER_SIGNS, "full_name": "Ola Nordmann"})
        paid = await client.post(
            "/webhooks/v1/paymentStatus",
            json={"dealId": deal["id"], "status": "Paid"},
            headers={"webhook-secret": server.credential("webhook secret")},
        )
        assert paid.status_code == 200, paid.text
        await submit(client, seller, "handover", **HANDOVER)
        await submit(client, seller, "carrier", outcome="delivered")  # the sandbox's carrier
        await submit(client, buyer, "approve")

        other, other_url = await _deal(client, auth, "per@example.com")
        await submit(
            client, path(other_url), "offer", price="900", shippingType="Pickup",
            name="Per", email="per@example.com",
        )  # fmt: skip
        cancelled = await client.post(
            f"/deals/v1/deals/{other['id']}/status", json={"status": "Cancelled"}, headers=auth
        )
        assert cancelled.status_code == 200, cancelled.text
    return deal, buyer_url, other, other_url


def test_serve_mails_each_party_their_link_and_deadline(
    sqlite_url: str, tmp_path: Path, smtp: SmtpServer
) -> None:
    server = Server(sqlite_url, tmp_path, DEALBROKER_LOG_LEVEL="info", **smtp.env())
    try:
        paid_by = _deadlines(7)
        deal, buyer_url, other, other_url = asyncio.run(_drive(server))
        arrived_by = _deadlines(1)
        mails = smtp.wait_for(14)  # every message below, the cancellation to Per the last
        kari, ola, per = "kari@example.com", "ola@example.com", "per@example.com"
        # Messages of one change are sent side by side, so their order of arrival may vary.
        paid = next(m for m in mails if m["Subject"].startswith("Road bike is paid: send it by"))
        assert paid["Subject"] in {f"Road bike is paid: send it by {d}" for d in paid_by}
        assert Counter((m["To"], m["Subject"]) for m in mails) == Counter(
            [
                (kari, "New offer on Road bike"),
                (ola, "Your offer on Road bike was approved"),
                (ola, "Please pay for Road bike"),
                (kari, paid["Subject"]),
                (ola, "Payment received for Road bike"),
                (ola, "Road bike is on its way"),
                (kari, "Road bike is with the carrier"),
                (ola, "Road bike has arrived"),
                (kari, "Road bike has arrived at the buyer"),
                (ola, "Road bike: the deal is completed"),
                (kari, "Road bike: the deal is completed"),
                (kari, "New offer on Road bike"),  # the second deal
                (kari, "Road bike was cancelled"),
                (per, "Road bike was cancelled"),
            ]
        )
        by = {(m["To"], m["Subject"]): text_of(m) for m in mails}
        assert any(f"by {d}" in by[ola, "Payment received for Road bike"] for d in paid_by)
        assert any(f"by {d}" in by[ola, "Road bike has arrived"] for d in arrived_by)
        assert any(
            f"until {d}" in by[kari, "Road bike has arrived at the buyer"] for d in arrived_by
        )
        # Each reader gets their own page: the seller the deal's, the buyer the offer link.
        pages = {
            (kari, deal["id"]): deal["url"],
            (ola, deal["id"]): buyer_url,
            (kari, other["id"]): other["url"],
            (per, other["id"]): other_url,
        }
        for mail in mails:
            assert mail["From"] == "deals@dealbroker.example.com"
            assert mail["Message-ID"].endswith("@dealbroker.example.com>")
            body = text_of(mail)
            own = [url for (to, _), url in pages.items() if to == mail["To"] and url in body]
            assert len(own) == 1, (mail["To"], mail["Subject"], body)
        for url in pages.values():  # and each link opens that page
            assert httpx.get(url, timeout=10).status_code == 200, url
        assert set(smtp.logins) == {"dealbroker"}  # logged in for every message
        # The seller's sandbox mailbox still shows every message sent to the seller (5 of the
        # deal's 11), marked as mailed.
        seller_page = httpx.get(deal["url"], timeout=10).text
        mailbox = re.search(r'<a href="([^"]+)">Sandbox mailbox</a>', seller_page).group(1)
        shown = httpx.get(html.unescape(mailbox), timeout=10).text
        assert len(re.findall(r'data-message="\w+"', shown)) == 5
        wait_until(
            lambda: httpx.get(html.unescape(mailbox), timeout=10).text.count("sent by e-mail") == 5,
            10,
            "the mailbox to show the messages as sent",
        )
    finally:
        server.stop()
    output = server.output()
    assert PASSWORD not in output
    assert "Traceback" not in output


def test_a_refusing_mail_server_gets_the_message_on_a_retry(
    sqlite_url: str, tmp_path: Path
) -> None:
    smtp = SmtpServer(refuse_first=1)
    server = Server(sqlite_url, tmp_path, DEALBROKER_LOG_LEVEL="info", **smtp.env())
    try:

        async def offer() -> None:
            async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
                auth = await _token(client, server)
                deal, _ = await _deal(client, auth, "ola@example.com")
                sent = await client.post(
                    "/webhooks/v1/dealOffer",
                    json={"dealId": deal["id"], "price": 900},
                    headers={"webhook-secret": server.credential("webhook secret")},
                )
                assert sent.status_code in (200, 204), sent.text

        asyncio.run(offer())
        mails = smtp.wait_for(1, timeout=30)  # the first try is refused, the retry is 5 s later
        assert smtp.refused == 1
        assert [(m["To"], m["Subject"]) for m in mails] == [
            ("kari@example.com", "New offer on Road bike")
        ]
    finally:
        server.stop()
        smtp.stop()
    output = server.output()
    assert "will retry" in output
    assert "451" in output


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="the worker process runs on PostgreSQL")
def test_worker_on_postgresql_sends_the_messages(tmp_path: Path, smtp: SmtpServer) -> None:
    db_url = database_url("postgresql", tmp_path, "mail_worker")
    base = "https://deals.example.com"

    async def seed() -> tuple[uuid.UUID, str]:
        engine = create_engine(db_url, pool_size=2)
        try:
            sessionmaker = create_sessionmaker(engine)
            settings = make_settings(db_url, base_url=base)
            await start_messages(sessionmaker, settings)
            d = await new_deal(sessionmaker)
            await d.approve(await d.offer())
            await d.sign(SignatureType.SELLER, Actor.SELLER)
            async with sessionmaker() as session, session.begin():
                seller_page = (await deployment_links(session, settings)).deal_url(d.deal_id)
            return d.deal_id, seller_page
        finally:
            await engine.dispose()

    worker = None
    try:
        deal_id, seller_page = asyncio.run(seed())
        worker = Worker(db_url, tmp_path, **smtp.env())
        worker.wait_ready()
        mails = smtp.wait_for(2)
        by_subject = {m["Subject"]: m for m in mails}
        assert sorted(by_subject) == ["New offer on Bike", "Your offer on Bike was approved"]
        assert by_subject["New offer on Bike"]["To"] == "kari@example.com"
        assert by_subject["Your offer on Bike was approved"]["To"].startswith("ola-")
        assert f"Your deal page: {seller_page}" in text_of(by_subject["New offer on Bike"])
        assert str(deal_id) in seller_page
        worker.process.terminate()
        assert worker.wait() == 0, worker.output()
        assert PASSWORD not in worker.output()
    finally:
        if worker is not None:
            worker.close()
        drop_database(db_url)
