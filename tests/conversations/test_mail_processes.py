"""The conversations' e-mail from the real processes to a real SMTP server on loopback, with a
batch window of 3 seconds: three messages typed in a row on the buyer's page of ``serve`` reach
the seller as one e-mail carrying all three; a fourth, typed as soon as that one arrived, comes
in the next e-mail, alone, a window after the first. ``serve`` on SQLite (its embedded worker
writes and sends the mails); on PostgreSQL ``serve`` and two ``worker`` processes, which both
run the mail jobs and still write and send each mail once."""

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from sqlalchemy import select

from dealbroker.notifications.models import OutboxMessage
from tests.conftest import BACKENDS, SELLER, database_url, drop_databases
from tests.processes import Server, Worker, run_on, token
from tests.smtp_server import SmtpServer, text_of
from tests.web.conversations import write
from tests.web.pages import path

pytestmark = pytest.mark.server

BATCH = 3  # seconds: the mail batch window of these processes


@pytest.fixture
def smtp() -> Iterator[SmtpServer]:
    server = SmtpServer()
    yield server
    server.stop()


def _type(server: Server, page: str, *texts: str) -> None:
    """The buyer types ``texts`` on their page ``page``, sending each as soon as the page
    has come back from the one before."""

    async def typing() -> None:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as buyer:
            for text in texts:
                sent = await write(buyer, page, text)
                assert sent.status_code == 303, sent.text

    asyncio.run(typing())


def _written(db_url: str, deal_id: uuid.UUID) -> list[OutboxMessage]:
    async def work(sessionmaker: Any) -> list[OutboxMessage]:
        async with sessionmaker() as session:
            return list(
                await session.scalars(
                    select(OutboxMessage)
                    .where(
                        OutboxMessage.deal_id == deal_id,
                        OutboxMessage.kind == "conversation_message",
                    )
                    .order_by(OutboxMessage.created_at)
                )
            )

    return run_on(db_url, work)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_messages_in_a_row_reach_the_reader_in_one_mail_per_window(
    backend: str, tmp_path: Path, smtp: SmtpServer
) -> None:
    if backend not in BACKENDS:
        pytest.skip(f"{backend} is not among the test backends")
    db_url = database_url(backend, tmp_path, "conv_mail")
    settings = smtp.env(DEALBROKER_MESSAGE_MAIL_BATCH_SECONDS=str(BATCH))
    server = Server(db_url, tmp_path, **settings)  # on SQLite its embedded worker mails
    workers = (
        [Worker(db_url, tmp_path, **settings) for _ in range(2)] if backend == "postgresql" else []
    )
    try:
        for worker in workers:
            worker.wait_ready()
            assert "conversation-mail" in worker.output()  # each runs the mail job
        auth = token(server)
        deal = httpx.post(
            f"{server.base}/deals/v1/deals",
            json={"name": "Road bike", "price": 1000, "seller": SELLER},
            headers=auth,
            timeout=30,
        )
        assert deal.status_code == 201, deal.text
        link = httpx.post(
            f"{server.base}/deals/v1/deals/{deal.json()['id']}/offer",
            json={},
            headers=auth,
            timeout=30,
        )
        assert link.status_code == 201, link.text
        deal_id, page = uuid.UUID(deal.json()["id"]), path(link.json()["url"])

        _type(server, page, "Is the frame 56 cm?", "Any scratches?", "Pickup on Sunday?")
        (first,) = smtp.wait_for(1, timeout=20)
        assert first["To"] == SELLER["email"]
        assert first["Subject"] == "New messages about Road bike"
        body = text_of(first)
        for text in ("Is the frame 56 cm?", "Any scratches?", "Pickup on Sunday?"):
            assert f"> {text}" in body
        # The seller's own page (a worker process links to the deployment's base URL, which
        # is not this test server's).
        assert urlsplit(deal.json()["url"]).path in body

        _type(server, page, "Or Monday?")
        mails = smtp.wait_for(2, timeout=20)
        assert mails[1]["Subject"] == "New message about Road bike"
        second = text_of(mails[1])
        assert "> Or Monday?" in second
        assert "Is the frame" not in second
        time.sleep(BATCH + 1)  # a third mail (or a second worker's copy) would have come by now
        assert len(smtp.messages) == 2
        one, two = _written(db_url, deal_id)
        assert two.created_at - one.created_at >= timedelta(seconds=BATCH)
    finally:
        for worker in workers:
            worker.process.terminate()
        for worker in workers:
            assert worker.wait() == 0, worker.output()
            worker.close()
        server.stop()
        if backend == "postgresql":
            drop_databases({db_url.rsplit("/", 1)[1]})
