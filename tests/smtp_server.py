"""A real SMTP server on loopback for the e-mail tests (aiosmtpd, in a thread of its own):
records every message it accepts, can ask for a login, and can refuse the first recipients
with a "try again later" (451) to show that the sender retries."""

import email
import email.policy
import threading
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.processes import free_port, wait_until


class SmtpServer:
    def __init__(self, refuse_first: int = 0, login: tuple[str, str] | None = None) -> None:
        self.port = free_port()
        self.messages: list[EmailMessage] = []
        self.refused = 0
        self.logins: list[str] = []
        self._refuse_first = refuse_first
        self._login = login
        self._lock = threading.Lock()
        kwargs: dict[str, Any] = {}
        if login is not None:
            kwargs = {
                "authenticator": self._authenticate,
                "auth_required": True,
                "auth_require_tls": False,  # loopback only; TLS is the client library's part
            }
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port, **kwargs)
        self._controller.start()

    def env(self, **extra: str) -> dict[str, str]:
        """The settings that point dealbroker at this server."""
        settings = {
            "DEALBROKER_SMTP_HOST": "127.0.0.1",
            "DEALBROKER_SMTP_PORT": str(self.port),
            "DEALBROKER_SMTP_TLS": "none",
            "DEALBROKER_MAIL_FROM": "deals@dealbroker.example.com",
        }
        if self._login is not None:
            settings["DEALBROKER_SMTP_USERNAME"] = self._login[0]
            settings["DEALBROKER_SMTP_PASSWORD"] = self._login[1]
        return {**settings, **extra}

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        ok = (
            isinstance(data, LoginPassword)
            and (
                data.login.decode(),
                data.password.decode(),
            )
            == self._login
        )
        if ok:
            self.logins.append(data.login.decode())
        return AuthResult(success=ok)

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        with self._lock:
            if self.refused < self._refuse_first:
                self.refused += 1
                return "451 4.3.0 Try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self._lock:
            self.messages.append(message)  # type: ignore[arg-type]
        return "250 Message accepted for delivery"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[EmailMessage]:
        wait_until(lambda: len(self.messages) >= count, timeout, f"{count} e-mails")
        return list(self.messages)

    def stop(self) -> None:
        self._controller.stop()


def text_of(message: EmailMessage) -> str:
    body = message.get_body(("plain",))
    assert body is not None
    return body.get_content()  # type: ignore[no-any-return]
