"""Sending one e-mail through the deployment's SMTP server (``DEALBROKER_SMTP_*``).

The outbox job (``notifications.tasks``) calls ``SmtpMailer.send`` outside any transaction. A
refusal that sending again cannot change (the server rejects the address or the message for
good, a 5xx answer) is ``Undeliverable``; anything else (no connection, a timeout, a 4xx "try
later", a login failure an operator can fix) is raised as it is, and the job tries again.
The password goes only to the SMTP server: it is a ``SecretStr`` in the settings, never logged.
"""

import email.utils
import uuid
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from typing import Protocol

import aiosmtplib

from dealbroker.core.settings import Settings

SEND_TIMEOUT = 30.0  # seconds for the whole conversation with the server


@dataclass(frozen=True)
class Mail:
    """One message of the outbox, as the job sends it."""

    id: uuid.UUID
    to: str
    subject: str
    body: str
    created_at: datetime


class Undeliverable(Exception):
    """The server refused the message for good: trying again would not help."""


class Mailer(Protocol):
    async def send(self, mail: Mail) -> None: ...


class SmtpMailer:
    def __init__(self, settings: Settings) -> None:
        self.host = settings.smtp_host
        self.port = settings.smtp_port_in_use
        self.tls = settings.smtp_tls
        self.username = settings.smtp_username or None
        self.password = settings.smtp_password
        self.sender = settings.mail_from

    def message(self, mail: Mail) -> EmailMessage:
        """The e-mail for ``mail``. Its Message-ID comes from the outbox row, the same on every
        attempt, so a message sent twice (a worker died before recording it) can be recognised."""
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = mail.to
        message["Subject"] = mail.subject
        message["Date"] = email.utils.format_datetime(mail.created_at)
        domain = self.sender.rsplit("@", 1)[-1]
        message["Message-ID"] = f"<{mail.id}@{domain}>"
        message.set_content(mail.body)
        return message

    async def send(self, mail: Mail) -> None:
        try:
            await aiosmtplib.send(
                self.message(mail),
                hostname=self.host,
                port=self.port,
                username=self.username,
                password=self.password.get_secret_value() or None,
                use_tls=self.tls == "tls",
                start_tls=self.tls == "starttls",
                timeout=SEND_TIMEOUT,
            )
        except aiosmtplib.SMTPRecipientsRefused as exc:
            if all(r.code >= 500 for r in exc.recipients):
                refused = "; ".join(f"{r.code} {r.message}" for r in exc.recipients)
                raise Undeliverable(refused) from exc
            raise
        except aiosmtplib.SMTPDataError as exc:
            if exc.code >= 500:
                raise Undeliverable(f"{exc.code} {exc.message}") from exc
            raise
