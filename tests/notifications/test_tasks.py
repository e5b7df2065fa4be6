"""The outbox job on both databases, with a mailer the test controls: each message is sent once
after its transaction commits, failures are retried with growing pauses, and the job gives up
(and logs) after a bounded number of attempts, on a refusal for good, or when a message is old."""

import logging
from datetime import timedelta

import pytest
from sqlalchemy import select

from dealbroker.core import clock
from dealbroker.notifications.mailer import Mail, SmtpMailer, Undeliverable
from dealbroker.notifications.models import OutboxMessage
from dealbroker.notifications.tasks import MAX_ATTEMPTS, RETRY_AFTER, TOO_OLD, OutboxSendJob
from dealbroker.worker import jobs
from tests.conftest import make_settings
from tests.lifecycle_helpers import new_deal

MAIL_ON = {"smtp_host": "127.0.0.1", "mail_from": "deals@example.com"}


class FakeMailer:
    """Records what it is asked to send; fails the first ``failures`` attempts of each."""

    def __init__(self, failures: int = 0, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionRefusedError("no SMTP server")
        self.tried: list[Mail] = []
        self.sent: list[Mail] = []

    async def send(self, mail: Mail) -> None:
        self.tried.append(mail)
        if sum(1 for m in self.tried if m.id == mail.id) <= self.failures:
            raise self.error
        self.sent.append(mail)


async def rows(sessionmaker) -> list[OutboxMessage]:
    async with sessionmaker() as session:
        return list(await session.scalars(select(OutboxMessage).order_by(OutboxMessage.created_at)))


async def two_messages(sessionmaker) -> None:
    """A deal with two offers: two messages to the seller."""
    d = await new_deal(sessionmaker)
    await d.offer()
    await d.offer()


def job(sessionmaker, db_url, mailer) -> OutboxSendJob:
    return OutboxSendJob(sessionmaker, make_settings(db_url, **MAIL_ON), mailer)


async def test_each_message_is_sent_once_and_marked(sessionmaker, db_url, frozen_clock):
    await two_messages(sessionmaker)
    mailer = FakeMailer()
    sender = job(sessionmaker, db_url, mailer)
    assert await sender.run_once() == 2
    assert await sender.run_once() == 0
    assert sorted(m.to for m in mailer.sent) == ["kari@example.com"] * 2
    assert {m.subject for m in mailer.sent} == {"New offer on Bike"}
    for row in await rows(sessionmaker):
        assert (row.sent_at, row.attempts, row.next_attempt_at) == (frozen_clock[0], 1, None)
    assert sender.sent == 2


async def test_failures_are_retried_with_growing_pauses_then_sent(
    sessionmaker, db_url, frozen_clock
):
    await two_messages(sessionmaker)
    mailer = FakeMailer(failures=2)
    sender = job(sessionmaker, db_url, mailer)
    assert await sender.run_once() == 2  # first attempts fail
    row = (await rows(sessionmaker))[0]
    assert row.sent_at is None
    assert row.attempts == 1
    assert row.next_attempt_at == frozen_clock[0] + RETRY_AFTER[0]
    assert "no SMTP server" in row.last_error
    assert await sender.run_once() == 0  # not due yet
    frozen_clock[0] += RETRY_AFTER[0]
    assert await sender.run_once() == 2  # second attempts fail too
    assert (await rows(sessionmaker))[0].next_attempt_at == frozen_clock[0] + RETRY_AFTER[1]
    frozen_clock[0] += RETRY_AFTER[1]
    assert await sender.run_once() == 2
    assert len(mailer.sent) == 2
    for row in await rows(sessionmaker):
        assert (row.attempts, row.sent_at, row.last_error) == (3, frozen_clock[0], None)


async def test_gives_up_after_the_last_attempt_and_logs_it(
    sessionmaker, db_url, frozen_clock, caplog
):
    d = await new_deal(sessionmaker)
    await d.offer()
    mailer = FakeMailer(failures=MAX_ATTEMPTS + 5)
    sender = job(sessionmaker, db_url, mailer)
    with caplog.at_level(logging.WARNING, logger="dealbroker.mail"):
        for pause in [*RETRY_AFTER, timedelta(days=1)]:
            assert await sender.run_once() == 1
            frozen_clock[0] += pause
        assert await sender.run_once() == 0
    row = (await rows(sessionmaker))[0]
    assert (row.attempts, row.sent_at, row.next_attempt_at) == (MAX_ATTEMPTS, None, None)
    assert len(mailer.tried) == MAX_ATTEMPTS
    assert timedelta(hours=12) < sum(RETRY_AFTER, timedelta()) < TOO_OLD  # hours of outage
    given_up = [r for r in caplog.records if "given up" in r.getMessage()]
    assert len(given_up) == 1
    assert given_up[0].levelno == logging.ERROR
    assert str(row.id) in given_up[0].getMessage()


async def test_a_refusal_for_good_is_not_retried(sessionmaker, db_url, frozen_clock):
    d = await new_deal(sessionmaker)
    await d.offer()
    mailer = FakeMailer(failures=1, error=Undeliverable("550 no such user"))
    sender = job(sessionmaker, db_url, mailer)
    assert await sender.run_once() == 1
    frozen_clock[0] += timedelta(days=1)
    assert await sender.run_once() == 0
    row = (await rows(sessionmaker))[0]
    assert (row.attempts, row.next_attempt_at, row.sent_at) == (1, None, None)
    assert row.last_error == "refused: 550 no such user"


async def test_a_message_not_sent_within_a_day_is_given_up(sessionmaker, db_url, frozen_clock):
    d = await new_deal(sessionmaker)
    await d.offer()
    frozen_clock[0] += TOO_OLD + timedelta(minutes=1)  # e.g. the worker was down for a day
    mailer = FakeMailer()
    assert await job(sessionmaker, db_url, mailer).run_once() == 1
    assert mailer.tried == []
    row = (await rows(sessionmaker))[0]
    assert (row.sent_at, row.next_attempt_at) == (None, None)
    assert "given up" in row.last_error


async def test_mail_is_off_by_default(sessionmaker, db_url):
    await two_messages(sessionmaker)
    sender = OutboxSendJob(sessionmaker, make_settings(db_url))
    assert sender.mailer is None
    assert await sender.run_once() == 0
    assert [r.sent_at for r in await rows(sessionmaker)] == [None, None]


async def test_the_job_is_registered_and_uses_smtp_when_configured(sessionmaker, db_url):
    registered = {j.name: j for j in jobs(sessionmaker, make_settings(db_url, **MAIL_ON))}
    mail = registered["mail"]
    assert isinstance(mail, OutboxSendJob)
    assert isinstance(mail.mailer, SmtpMailer)


def test_the_email_carries_a_message_id_stable_across_attempts():
    mailer = SmtpMailer(make_settings("sqlite://", **MAIL_ON))
    import uuid

    mail = Mail(uuid.uuid4(), "kari@example.com", "New offer on Bike", "Body", clock.now())
    first, again = mailer.message(mail), mailer.message(mail)
    assert first["Message-ID"] == again["Message-ID"] == f"<{mail.id}@example.com>"
    assert (first["From"], first["To"], first["Subject"]) == (
        "deals@example.com",
        "kari@example.com",
        "New offer on Bike",
    )


@pytest.mark.parametrize(("tls", "port"), [("none", 25), ("starttls", 587), ("tls", 465)])
def test_the_port_follows_the_tls_mode_unless_given(tls, port):
    settings = make_settings("sqlite://", smtp_tls=tls, **MAIL_ON)
    assert SmtpMailer(settings).port == port
    assert (
        SmtpMailer(make_settings("sqlite://", smtp_tls=tls, smtp_port=2525, **MAIL_ON)).port == 2525
    )
